package policy

import (
	"fmt"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/topdown/lineage"
)

// Bounds of a failed test's trace: a test that loops over many inputs, or
// binds a large value, would otherwise print thousands of lines.
const (
	maxTraceLines = 40
	maxValueBytes = 400
)

// failTrace is what a failed test, in file, failed on: each expression of
// the test that failed (lineage.Fails: what `opa test -v` prints), with
// file:line and the value of every variable it uses, so a test that binds
// the decision (`d := http.decision with …`) shows the decision it got.
// What the test called (the fixtures, the entry points) is left out. Cut
// to maxTraceLines, each value to maxValueBytes; "" without events.
func failTrace(events []*topdown.Event, file string) string {
	var lines []string
	for _, e := range lineage.Fails(events) {
		if e.Op != topdown.FailOp || e.Location == nil || e.Location.File != file {
			continue
		}
		at := len(lines)
		lines = append(lines, "")
		expr := fmt.Sprint(e.Node)
		seen := map[ast.Var]bool{}
		ast.WalkVars(e.Node, func(v ast.Var) bool {
			meta, ok := e.LocalMetadata[v]
			if !ok || seen[meta.Name] || meta.Name.IsGenerated() || e.Locals == nil {
				return false
			}
			seen[meta.Name] = true
			// The compiler renames the test's variables; show its names.
			expr = strings.ReplaceAll(expr, string(v), string(meta.Name))
			if val := e.Locals.Get(v); val != nil {
				s := val.String()
				if len(s) > maxValueBytes {
					s = s[:maxValueBytes] + "…"
				}
				lines = append(lines, fmt.Sprintf("  %s = %s", meta.Name, s))
			}
			return false
		})
		lines[at] = fmt.Sprintf("%s:%d: fail %s", e.Location.File, e.Location.Row, expr)
	}
	if len(lines) > maxTraceLines {
		more := len(lines) - maxTraceLines
		lines = append(lines[:maxTraceLines], fmt.Sprintf("… %d more lines", more))
	}
	return strings.Join(lines, "\n")
}
