package proxy

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	"github.com/egressd/egressd/policy"
)

// tinyRecords re-frames the one-record flight rec so that its first n-1
// records carry one payload byte each and the last carries the rest: the
// worst framing for a reassembler that re-walks what it has.
func tinyRecords(t testing.TB, rec []byte, n int) []byte {
	t.Helper()
	sizes := make([]int, n-1)
	for i := range sizes {
		sizes[i] = 1
	}
	return splitRecords(t, rec, sizes...)
}

// The assembler returns the same message however the flight is framed and
// however its bytes arrive, looks at each byte once, and refuses more
// records than the cap.
func TestHelloAssembler(t *testing.T) {
	rec := clientHello(t, "example.com")
	want := rec[tlsRecordHeaderLen:]
	tests := []struct {
		name    string
		flight  []byte
		wantErr error
	}{
		{name: "one record", flight: rec},
		{name: "three records", flight: splitRecords(t, rec, 2, 60)},
		{name: "one-byte records up to the cap", flight: tinyRecords(t, rec, maxHelloRecords)},
		{name: "one-byte records past the cap", flight: tinyRecords(t, rec, maxHelloRecords+1), wantErr: errHelloTooManyRecords},
		{name: "bytes after the message", flight: append(bytes.Clone(rec), "early data"...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, step := range []int{len(tt.flight), 1, 7} {
				var a helloAssembler
				var msg []byte
				var err error
				for off := 0; off < len(tt.flight) && msg == nil && err == nil; off += step {
					msg, err = a.feed(tt.flight[off:min(off+step, len(tt.flight))])
				}
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("%s, fed %d bytes at a time: err = %v; want %v", tt.name, step, err, tt.wantErr)
				}
				if err != nil {
					continue
				}
				if !bytes.Equal(msg, want) {
					t.Fatalf("%s, fed %d bytes at a time: message of %d bytes; want the %d of the ClientHello", tt.name, step, len(msg), len(want))
				}
				if a.examined > len(tt.flight)+len(msg) {
					t.Errorf("%s, fed %d bytes at a time: examined %d bytes; want at most %d (flight plus message)", tt.name, step, a.examined, len(tt.flight)+len(msg))
				}
			}
		})
	}
}

// The assembler's answer does not depend on how the flight's bytes are cut
// into reads: fed whole and fed in chunks of any size, the message and the
// error are the same.
func FuzzHelloAssembler(f *testing.F) {
	f.Add(clientHello(f, "example.com"), uint8(1))
	f.Add(splitRecords(f, clientHello(f, "example.com"), 2, 60), uint8(7))
	f.Add(tinyRecords(f, clientHello(f, "example.com"), 40), uint8(3))
	f.Fuzz(func(t *testing.T, flight []byte, step uint8) {
		var whole helloAssembler
		want, wantErr := whole.feed(flight)
		var a helloAssembler
		var msg []byte
		var err error
		n := max(int(step), 1)
		for off := 0; off < len(flight) && msg == nil && err == nil; off += n {
			msg, err = a.feed(flight[off:min(off+n, len(flight))])
		}
		if !bytes.Equal(msg, want) || (err == nil) != (wantErr == nil) {
			t.Errorf("fed in %d-byte chunks: %x, %v; fed whole: %x, %v", n, msg, err, want, wantErr)
		}
		if a.examined > len(flight)+len(msg) {
			t.Errorf("examined %d bytes of a %d-byte flight", a.examined, len(flight))
		}
	})
}

// A worst-case first flight — one-byte TLS records, up to the record cap
// and past it — costs the proxy work linear in the flight. The work is
// counted as the bytes the whole process allocates while the tunnel checks
// the flight: re-walking and re-copying the flight on every record (the
// old reassembly) allocates a cube of the record count.
func TestConnectHelloWorstCaseIsLinear(t *testing.T) {
	rec := clientHello(t, "localhost")
	tests := []struct {
		name     string
		records  int
		wantSent bool
	}{
		{"up to the record cap", maxHelloRecords, true},
		{"every byte its own record", len(rec) - tlsRecordHeaderLen, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			flight := tinyRecords(t, rec, tt.records)
			ft := openFlightTunnel(t, "localhost")
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b := ft.send(t, flight)
			runtime.ReadMemStats(&after)
			if sent := bytes.Equal(b, flight); sent != tt.wantSent {
				t.Errorf("upstream received %d bytes (the flight: %v); want the flight %v", len(b), sent, tt.wantSent)
			}
			// The flight, a buffer of one record and the message, with
			// room for the test's own upstream and audit records.
			limit := uint64(8 * maxHelloFlight)
			alloc := after.TotalAlloc - before.TotalAlloc
			if alloc > limit {
				t.Errorf("checking a %d-byte flight of %d records allocated %d bytes; want at most %d", len(flight), tt.records, alloc, limit)
			}
			t.Logf("checking a %d-byte flight of %d records allocated %d bytes", len(flight), tt.records, alloc)
			if !tt.wantSent {
				ft.wantRefused(t, policy.ReasonMalformedClientHello)
			}
		})
	}
}
