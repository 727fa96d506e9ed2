package main

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzBatchLines: the lines readChunks hands on are the lines of a naive
// split of the whole input (on \n, a trailing \r dropped, empty lines
// left out), in order, none lost across chunks.
func FuzzBatchLines(f *testing.F) {
	f.Add([]byte("a\nb\r\n\n\nc"))
	f.Add([]byte("\r\n\r\n"))
	f.Add(bytes.Repeat([]byte("{}\n"), 3*batchChunk))
	f.Fuzz(func(t *testing.T, in []byte) {
		var got [][]byte
		err := readChunks(context.Background(), bytes.NewReader(in), func(j *batchJob) bool {
			if len(j.lines) == 0 || len(j.lines) > batchChunk {
				t.Fatalf("a chunk of %d lines", len(j.lines))
			}
			for _, l := range j.lines {
				if l.long {
					t.Fatalf("line marked long in %d bytes of input", len(in))
				}
				got = append(got, j.arena[l.start:l.end])
			}
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		var want [][]byte
		for _, l := range bytes.Split(in, []byte("\n")) {
			if l = bytes.TrimSuffix(l, []byte("\r")); len(l) > 0 {
				want = append(want, l)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%d lines; want %d", len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("line %d = %q; want %q", i+1, got[i], want[i])
			}
		}
	})
}

// FuzzParseRequest: a line parseRequest accepts is one JSON object that
// encoding/json decodes into the same request, whose kind has what it
// needs, and the request's own encoding parses back to it.
func FuzzParseRequest(f *testing.F) {
	for _, r := range batchRequests {
		b, _ := json.Marshal(r)
		f.Add(b)
	}
	f.Add([]byte(`{"kind":"http","method":"GET","url":"http://x/","body":null}`))
	f.Add([]byte(`{"kind":"dns","name":"a"} {}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		req, err := parseRequest(line)
		if err != nil {
			return
		}
		var witness checkRequest
		if err := json.Unmarshal(line, &witness); err != nil {
			t.Fatalf("parseRequest accepted %q, which encoding/json refuses: %v", line, err)
		}
		if !reflect.DeepEqual(*req, witness) {
			t.Fatalf("parseRequest(%q) = %+v; encoding/json reads %+v", line, *req, witness)
		}
		if err := req.validate(); err != nil {
			t.Fatalf("parseRequest accepted %q that validate refuses: %v", line, err)
		}
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		back, err := parseRequest(again)
		if err != nil || !reflect.DeepEqual(back, req) {
			t.Fatalf("parseRequest(%s) = %+v, %v; want %+v", again, back, err, req)
		}
	})
}
