package pggate

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAnalystCorpusThroughGate runs the analyst corpus
// (policy/testdata/analyst) through the gate as the read_only profile
// against a real PostgreSQL holding the corpus's schema: every query is
// allowed and runs without error.
func TestAnalystCorpusThroughGate(t *testing.T) {
	pg := sharedPG(t)
	dir := filepath.Join("..", "..", "policy", "testdata", "analyst")
	schema, err := os.ReadFile(filepath.Join(dir, "schema.sql"))
	if err != nil {
		t.Fatal(err)
	}
	admin := connect(t, pg.DSN("postgres"))
	if _, err := admin.Exec(ctxT(t), "DROP DATABASE IF EXISTS shop").ReadAll(); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctxT(t), "CREATE DATABASE shop").ReadAll(); err != nil {
		t.Fatal(err)
	}
	if _, err := connect(t, pg.DSN("shop")).Exec(ctxT(t), string(schema)).ReadAll(); err != nil {
		t.Fatalf("schema.sql: %v", err)
	}
	f := startGate(t, pg, nil)
	c := connect(t, f.dsn("agent-ro", passRO, "shop"))
	files, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, file := range files {
		if filepath.Base(file) == "schema.sql" {
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range corpusBlocks(string(b)) {
			n++
			if strings.HasPrefix(q, "COPY") {
				_, err = c.CopyTo(ctxT(t), io.Discard, q)
			} else {
				_, err = c.Exec(ctxT(t), q).ReadAll()
			}
			if err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	}
	if n < 100 {
		t.Errorf("corpus has %d queries; want at least 100", n)
	}
}

// corpusBlocks splits a corpus file into its queries: blocks of lines
// separated by blank lines, without comment lines.
func corpusBlocks(s string) []string {
	var qs []string
	for _, block := range strings.Split(s, "\n\n") {
		var lines []string
		for _, l := range strings.Split(block, "\n") {
			if !strings.HasPrefix(l, "--") {
				lines = append(lines, l)
			}
		}
		if q := strings.TrimSpace(strings.Join(lines, "\n")); q != "" {
			qs = append(qs, q)
		}
	}
	return qs
}
