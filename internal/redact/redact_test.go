package redact

import (
	"errors"
	"io/fs"
	"testing"
)

func TestError(t *testing.T) {
	subs := []Sub{{Value: "hunter2", With: "<a: not shown>"}, {Value: "s3cret", With: "<b: not shown>"}}
	tests := []struct {
		name string
		err  error
		want string
		same bool
	}{
		{name: "nil", err: nil},
		{name: "nothing quoted", err: errors.New("open x: denied"), want: "open x: denied", same: true},
		{name: "one value", err: errors.New("bad token hunter2"), want: "bad token <a: not shown>"},
		{name: "every occurrence of every value", err: errors.New("hunter2 s3cret hunter2"), want: "<a: not shown> <b: not shown> <a: not shown>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Error(tt.err, subs)
			if tt.err == nil {
				if got != nil {
					t.Fatalf("Error(nil) = %v, want nil", got)
				}
				return
			}
			if got.Error() != tt.want {
				t.Errorf("message %q, want %q", got.Error(), tt.want)
			}
			if tt.same && got != tt.err {
				t.Errorf("unchanged message: got a new error %T, want err itself", got)
			}
		})
	}
}

func TestErrorKeepsChain(t *testing.T) {
	err := Error(&fs.PathError{Op: "open", Path: "hunter2", Err: fs.ErrNotExist}, []Sub{{Value: "hunter2", With: "<k>"}})
	if err.Error() != "open <k>: file does not exist" {
		t.Errorf("message %q", err.Error())
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Error("errors.Is lost the wrapped error")
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		t.Error("errors.As lost the wrapped error")
	}
}
