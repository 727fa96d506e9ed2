package defaults

import (
	"reflect"
	"testing"
	"time"
)

type section struct {
	Name     string
	Timeout  time.Duration
	Rate     float64
	Cap      int
	List     []string
	hidden   int
	ZeroDflt int
}

func TestFill(t *testing.T) {
	d := section{Name: "n", Timeout: time.Second, Rate: 2.5, Cap: 7, List: []string{"a"}, hidden: 9}
	tests := []struct {
		name string
		in   section
		want section
	}{
		{"zero takes every default", section{}, section{Name: "n", Timeout: time.Second, Rate: 2.5, Cap: 7, List: []string{"a"}}},
		{"set values stay", section{Name: "x", Timeout: -time.Second, Rate: 0.5, Cap: -1, ZeroDflt: 3},
			section{Name: "x", Timeout: -time.Second, Rate: 0.5, Cap: -1, List: []string{"a"}, ZeroDflt: 3}},
		{"empty non-nil list stays empty", section{List: []string{}}, section{Name: "n", Timeout: time.Second, Rate: 2.5, Cap: 7, List: []string{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in
			Fill(&got, d)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Fill(%+v) = %+v; want %+v", tt.in, got, tt.want)
			}
		})
	}
}
