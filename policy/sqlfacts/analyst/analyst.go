// Package analyst is the analyst corpus: queries a data analyst with the
// read_only SQL profile writes (joins, windows, CTEs, JSON, date math,
// GROUPING SETS, string functions, session settings), written against the
// shop schema of schema.sql. The read_only profile must allow every one
// (policy: TestAnalystCorpusReadOnly) and each must run on PostgreSQL
// through the gate (proxy/pggate: TestAnalystCorpusThroughGate).
//
// A corpus file holds one query per block of lines; blocks are separated
// by blank lines, and lines starting with "--" are comments.
package analyst

import (
	"embed"
	"io/fs"
	"strings"
)

//go:embed *.sql
var files embed.FS

// Schema is schema.sql: the tables and rows the corpus queries.
var Schema = mustRead("schema.sql")

// Queries is every query of the corpus files other than schema.sql, in
// file-name order.
func Queries() []string {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		panic(err)
	}
	var qs []string
	for _, n := range names {
		if n == "schema.sql" {
			continue
		}
		for _, block := range strings.Split(mustRead(n), "\n\n") {
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
	}
	return qs
}

func mustRead(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}
