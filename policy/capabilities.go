package policy

import (
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
)

// ioBuiltins are the OPA built-ins a bundle may not call, each with why: a
// bundle decides from its input and data alone. Every one of these lets
// Rego reach past that — egressd's own network, bypassing the floor that
// guards sandbox traffic, or its files and environment — and a bundle's
// tests run at every start and reload, so a test calling one would act with
// egressd's privileges. TestCapabilitiesPinned fails when an OPA upgrade
// adds a built-in, so that each new one is judged here.
var ioBuiltins = map[string]string{
	"http.send":          "sends an HTTP request to any address, the metadata service included, with no floor check",
	"net.lookup_ip_addr": "resolves a name through the host's resolver",
	"opa.runtime":        "returns the process's environment and configuration",
	"json.verify_schema": "a schema's $ref loads a remote URL or a local file (file:// is not covered by allow_net)",
	"json.match_schema":  "a schema's $ref loads a remote URL or a local file (file:// is not covered by allow_net)",
}

// capabilities are OPA's capabilities for this version without ioBuiltins,
// and with no host a built-in may reach (allow_net empty, not nil: nil
// means any host). A module calling a removed built-in fails to compile
// ("undefined function http.send" at file:line). Fresh per call: the
// compiler keeps what it is given.
func capabilities() *ast.Capabilities {
	caps := ast.CapabilitiesForThisVersion()
	caps.Builtins = slices.DeleteFunc(caps.Builtins, func(b *ast.Builtin) bool {
		_, drop := ioBuiltins[b.Name]
		return drop
	})
	caps.AllowNet = []string{}
	return caps
}

// newCompiler is the one compiler every bundle module goes through:
// decisions, tests, `policy check|test`, start and reload.
func newCompiler() *ast.Compiler {
	return ast.NewCompiler().WithDefaultRegoVersion(ast.RegoV1).WithCapabilities(capabilities())
}
