package testledger

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"
)

const digest = "sha256:0123"

// TestPassed: an entry answers only for its digest and build, and only
// when it says exactly that; any doubt is "not passed".
func TestPassed(t *testing.T) {
	dir := t.TempDir()
	l := New(dir, "build-a")
	if l.Passed(digest) {
		t.Fatal("Passed before Record = true; want false")
	}
	l.Record(digest)
	tests := []struct {
		name   string
		ledger *Ledger
		digest string
		want   bool
	}{
		{"recorded", l, digest, true},
		{"same build, reopened", New(dir, "build-a"), digest, true},
		{"another digest", l, "sha256:4567", false},
		{"another build", New(dir, "build-b"), digest, false},
		{"empty digest", l, "", false},
		{"nil ledger", nil, digest, false},
		{"unidentified build", New(dir, ""), digest, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.ledger.Passed(tt.digest); got != tt.want {
				t.Errorf("Passed(%q) = %v; want %v", tt.digest, got, tt.want)
			}
		})
	}
}

// TestPassedTampered: an entry whose content is not exactly what Record
// writes (truncated, extended, another digest under its name) is not a
// pass.
func TestPassedTampered(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(b []byte) []byte
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)-2] }},
		{"extended", func(b []byte) []byte { return append(b, "x\n"...) }},
		{"empty", func([]byte) []byte { return nil }},
		{"other content", func(b []byte) []byte { b[len(b)-2] ^= 1; return b }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := New(t.TempDir(), "build-a")
			l.Record(digest)
			name, content := l.entry(digest)
			if err := os.WriteFile(name, tt.change(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if l.Passed(digest) {
				t.Errorf("Passed with a %s entry = true; want false", tt.name)
			}
		})
	}
}

// TestRecordUnwritable: a directory Record cannot write to costs a test
// run later, never an error or a pass now.
func TestRecordUnwritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	l := New(filepath.Join(file, "ledger"), "build-a")
	l.Record(digest)
	if l.Passed(digest) {
		t.Error("Passed after a failed Record = true; want false")
	}
}

// TestRecordPrunes: the directory keeps at most maxEntries entries, the
// newest, and leaves no temporary files.
func TestRecordPrunes(t *testing.T) {
	dir := t.TempDir()
	l := New(dir, "build-a")
	old := time.Now().Add(-time.Hour)
	for i := range maxEntries {
		d := "sha256:" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		l.Record(d)
		name, _ := l.entry(d)
		if err := os.Chtimes(name, old, old.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	first := "sha256:aa"
	if !l.Passed(first) {
		t.Fatalf("Passed(%s) = false before the directory is full", first)
	}
	l.Record(digest)
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(des) != maxEntries {
		t.Errorf("%d files after %d records; want %d", len(des), maxEntries+1, maxEntries)
	}
	if l.Passed(first) || !l.Passed(digest) {
		t.Errorf("after pruning: Passed(oldest) = %v, Passed(newest) = %v; want false, true", l.Passed(first), l.Passed(digest))
	}
}

// TestBuildID reads the test binary's own build ID, and goNote refuses
// notes that are not the Go linker's.
func TestBuildID(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	id, err := BuildID(exe)
	if err != nil || id == "" {
		t.Fatalf("BuildID(test binary) = %q, %v; want an ID", id, err)
	}
	if _, err := BuildID(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("BuildID(missing file) succeeded")
	}
	note := func(name string, typ uint32, desc string) []byte {
		b := binary.LittleEndian.AppendUint32(nil, uint32(len(name)))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(desc)))
		b = binary.LittleEndian.AppendUint32(b, typ)
		b = append(b, name...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return append(b, desc...)
	}
	tests := []struct {
		name string
		note []byte
		want string // "" for refused
	}{
		{"go note", note("Go\x00\x00", 4, "abc/def"), "abc/def"},
		{"other name", note("GNU\x00", 4, "abc"), ""},
		{"other type", note("Go\x00\x00", 3, "abc"), ""},
		{"empty id", note("Go\x00\x00", 4, ""), ""},
		{"desc past the end", note("Go\x00\x00", 4, "abc")[:18], ""},
		{"short header", []byte{4, 0, 0}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := goNote(tt.note, binary.LittleEndian)
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("goNote = %q, %v; want %q", got, ok, tt.want)
			}
		})
	}
}
