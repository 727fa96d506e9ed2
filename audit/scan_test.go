package audit

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// TestSpecial checks the word-at-a-time scan against a byte loop for every
// byte value in every position.
func TestSpecial(t *testing.T) {
	for pos := range 8 {
		for c := range 256 {
			w := bytes.Repeat([]byte{'a'}, 8)
			w[pos] = byte(c)
			want := c == '"' || c == '\\' || c < 0x20
			if got := special(binary.LittleEndian.Uint64(w)); got != want {
				t.Errorf("special(%q) = %v; want %v", w, got, want)
			}
		}
	}
	// Random words, biased to bytes next to the boundaries, catch borrows
	// between neighbouring bytes.
	rng := rand.New(rand.NewPCG(1, 2))
	picks := []byte{0, 0x1f, 0x20, 0x21, '"', '\\', 0x7f, 0x80, 0x9f, 0xa0, 0xdc, 0xff}
	for range 200000 {
		var w [8]byte
		want := false
		for i := range w {
			if rng.IntN(2) == 0 {
				w[i] = picks[rng.IntN(len(picks))]
			} else {
				w[i] = byte(rng.IntN(256))
			}
			want = want || w[i] == '"' || w[i] == '\\' || w[i] < 0x20
		}
		if got := special(binary.LittleEndian.Uint64(w[:])); got != want {
			t.Fatalf("special(%q) = %v; want %v", w, got, want)
		}
	}
}
