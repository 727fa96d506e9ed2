package sqlparse

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"
)

func reply(status byte, payload string) []byte {
	b := []byte{status, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

func TestReadReply(t *testing.T) {
	huge := []byte{statusOK, 0xff, 0xff, 0xff, 0xff}
	tests := []struct {
		name    string
		in      []byte
		want    string
		wantErr error
	}{
		{"ok", reply(statusOK, "{}"), "{}", nil},
		{"parse error", reply(statusParseError, "\x00\x00\x00\x07syntax error"), "", &Error{}},
		{"too large", reply(statusTooLarge, ""), "", ErrTooLarge},
		{"unknown status", reply(9, ""), "", ErrCrashed},
		{"length past the bound", huge, "", ErrCrashed},
		{"short payload", reply(statusOK, "{}")[:6], "", ErrCrashed},
		{"parse error without position", reply(statusParseError, "ab"), "", ErrCrashed},
		{"nothing", nil, "", ErrCrashed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readReply(bytes.NewReader(tt.in))
			var pe *Error
			switch want := tt.wantErr.(type) {
			case nil:
				if err != nil || string(got) != tt.want {
					t.Errorf("readReply = %q, %v; want %q", got, err, tt.want)
				}
			case *Error:
				if !errors.As(err, &pe) || pe.Cursorpos != 7 || pe.Message != "syntax error" {
					t.Errorf("readReply = %v; want *Error at 7", err)
				}
			default:
				if !errors.Is(err, want) {
					t.Errorf("readReply = %q, %v; want %v", got, err, want)
				}
			}
		})
	}
}

func TestServeWorkerRefusesBadRequests(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want int
	}{
		{"clean end", nil, 0},
		{"request past the bound", []byte{byte(opJSON), 0xff, 0xff, 0xff, 0xff}, 4},
		{"unknown operation", reply(77, "SELECT 1"), 5},
		{"truncated request", reply(byte(opJSON), "SELECT 1")[:7], 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if got := serveWorker(bytes.NewReader(tt.in), &out); got != tt.want {
				t.Errorf("serveWorker = %d; want exit %d", got, tt.want)
			}
		})
	}
	var out bytes.Buffer
	in := append(reply(byte(opNormalize), "SELECT 1"), reply(byte(opJSON), "SELEC")...)
	if got := serveWorker(bytes.NewReader(in), &out); got != 0 {
		t.Fatalf("serveWorker = %d; want 0", got)
	}
	if got, err := readReply(&out); err != nil || string(got) != "SELECT $1" {
		t.Errorf("first reply = %q, %v; want SELECT $1", got, err)
	}
	var pe *Error
	if _, err := readReply(&out); !errors.As(err, &pe) {
		t.Errorf("second reply = %v; want a parse error", err)
	}
}

// TestPoolWaitHonoursContext: a caller waiting for a busy pool, or for the
// backoff after failures, leaves when its context ends, starting nothing.
func TestPoolWaitHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	busy := newPool(1)
	busy.sem <- struct{}{}
	if _, err := busy.do(ctx, opJSON, "SELECT 1"); !errors.Is(err, context.Canceled) {
		t.Errorf("do on a busy pool = %v; want context.Canceled", err)
	}
	backing := newPool(1)
	backing.fails, backing.lastFail = 10, time.Now()
	if _, err := backing.get(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("get during backoff = %v; want context.Canceled", err)
	}
	if len(backing.idle) != 0 {
		t.Errorf("%d workers started during backoff; want 0", len(backing.idle))
	}
	if _, err := busy.do(context.Background(), opJSON, strings.Repeat("x", maxRequest+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("do(request past the bound) = %v; want ErrTooLarge", err)
	}
}
