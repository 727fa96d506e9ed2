// Package rego is egressd's default policy bundle: the Rego modules of every
// entry point, their tests, and the default rules in data.json. It is
// embedded so that the binary runs with no policy directory; an operator's
// bundle directory has the same layout.
package rego

import "embed"

// FS is the embedded default bundle. The policy loader reads only .rego
// modules and data.json/data.yaml files from it; this Go file is ignored.
//
//go:embed *
var FS embed.FS
