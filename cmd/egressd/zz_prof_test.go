package main

import (
	"io"
	"testing"
)

func BenchmarkZZCheck(b *testing.B) {
	for b.Loop() {
		runCheckFrom(nil, []string{"http", "GET", "https://pypi.org/simple/"}, io.Discard, io.Discard)
	}
}
