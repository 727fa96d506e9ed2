package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/egressd/egressd/policy"
)

// checkKind is one `egressd check <kind>`. The DNS and SQL kinds register
// themselves from their own files (check_dns.go, check_sql.go) in init.
type checkKind struct {
	// args is the synopsis of the positional arguments, e.g. "METHOD URL".
	args string
	// nargs is how many positional arguments the kind takes.
	nargs int
	// about and argHelp are the kind's -h text (see helpText).
	about   string
	argHelp [][2]string
	// prepare, if set, checks the positional arguments (count already
	// checked) before any load, and may read standard input for one; a
	// usage error exits 2.
	prepare func(args []string, stdin io.Reader) ([]string, error)
	// setup registers kind-specific flags on fs and returns the function
	// that, once the flags are parsed, fills a request from them and the
	// positional arguments.
	setup func(fs *flag.FlagSet) requestFunc
	// decide parses a request of this kind into facts and decides them, for
	// env.identity. A parse refusal is not an error: it is returned as a
	// deny in the output, with the facts nil.
	decide func(ctx context.Context, env *decideEnv, req *checkRequest) checkOutput
}

// requestFunc fills req from a kind's parsed flags and positional
// arguments.
type requestFunc func(args []string, req *checkRequest)

// checkKinds is the table of kinds; see checkKind.
var checkKinds = map[string]checkKind{
	"http":    checkHTTP,
	"connect": checkConnect,
}

// checkOutput is the one JSON object a check prints.
type checkOutput struct {
	Kind     string        `json:"kind"`
	Identity string        `json:"identity"`
	Allow    bool          `json:"allow"`
	Reason   policy.Reason `json:"reason"`
	// Via is the check's --via when not the proxy listener.
	Via string `json:"via,omitempty"`
	// Class is a refusal's reason class (policy.Class: "policy",
	// "malformed", "identity", …), so that a caller tells "the policy
	// said no" from "the request could not be read"; set by MarshalJSON
	// on every deny, empty on an allow.
	Class  string `json:"class,omitempty"`
	Rule   string `json:"rule"`
	Policy string `json:"policy"`
	// TLS is set on an allowed CONNECT whose tunnel must carry TLS.
	TLS bool `json:"tls,omitempty"`
	// Credentials are the credential actions of the allowing rule: which
	// secret would be added where (never a value).
	Credentials []checkCredential `json:"credentials,omitempty"`
	// Inspect is set on an allowed CONNECT that the proxy would terminate
	// (its rule asks for inspection).
	Inspect bool `json:"inspect,omitempty"`
	// Inspected says an https:// request was decided as the proxy would
	// decide it inside an inspected tunnel.
	Inspected bool `json:"inspected,omitempty"`
	// WouldDeny is set on an allow that an observe mode lets through:
	// the reason it would be denied with and whose mode ("rule",
	// "identity", "bundle").
	WouldDeny *policy.Observed `json:"would_deny,omitempty"`
	// Grant is set when a time-bound grant decided (Rule "grant:ID"):
	// until when, by whom, from which request.
	Grant *checkGrant `json:"grant,omitempty"`
	// Detail explains a refusal found before Rego (a malformed URL).
	Detail string `json:"detail,omitempty"`
	// Assumes states what the answer takes for granted that the gate
	// would know (check sql without an upstream: built-ins only).
	Assumes string `json:"assumes,omitempty"`
	Facts   any    `json:"facts"`
	// Input is, with --input, every input object the policy evaluated, in
	// order (sql: the connect, then each statement): a []any, empty when
	// the request was refused before the policy; nil without --input.
	Input any `json:"input,omitempty"`
	// Explain is, with --explain=json, the explanation of every decision
	// the check asked for, in order, then of a refusal made before the
	// policy.
	Explain []policy.Explanation `json:"explain,omitempty"`
	// refused is the refusal made before the policy, for --explain; nil
	// when the policy decided.
	refused *refusal
}

// MarshalJSON is the output with Class filled from Reason, in every
// encoding of it (a check, a --batch line, the admin listener's
// /v1/check), so none can print a deny without its class.
func (o checkOutput) MarshalJSON() ([]byte, error) {
	type plain checkOutput
	o.Class = ""
	if !o.Allow {
		o.Class = o.Reason.Class().String()
	}
	return json.Marshal(plain(o))
}

// refusal is a refusal made before the policy: of a request of kind,
// whose facts were computed as far as facts (nil: it did not parse).
type refusal struct {
	kind  policy.Kind
	facts policy.Facts
	err   error
}

// checkGrant is the grant that decided, as a check prints it.
type checkGrant struct {
	ID          string    `json:"id"`
	Expires     time.Time `json:"expires"`
	GrantedBy   string    `json:"granted_by"`
	FromRequest string    `json:"from_request,omitempty"`
}

// decided fills the output from facts and a decision.
func decided(kind policy.Kind, env *decideEnv, facts any, d policy.Decision) checkOutput {
	out := checkOutput{
		Kind: kind.String(), Identity: env.identity.ID,
		Allow: d.Allow, Reason: d.Reason, Rule: d.Rule, Policy: d.Policy, TLS: d.TLS, Inspect: d.Inspect,
		Credentials: credentialsOf(d.Credentials),
		WouldDeny:   d.WouldDeny,
		Facts:       facts,
	}
	if g, ok := env.engine.GrantOf(d.Rule); ok {
		out.Grant = &checkGrant{ID: g.ID, Expires: g.Expires, GrantedBy: g.GrantedBy, FromRequest: g.FromRequest}
	}
	return out
}

// checkCredential is one credential action as a check prints it: the
// secret's name and its place ("header:Authorization", "query:key").
// Placeholder says the sandbox must send egressd:secret:NAME there;
// Require that it may send nothing else.
type checkCredential struct {
	Secret      string `json:"secret"`
	Place       string `json:"place"`
	Placeholder bool   `json:"placeholder,omitempty"`
	Require     bool   `json:"require,omitempty"`
}

func credentialsOf(cs []policy.Credential) []checkCredential {
	var out []checkCredential
	for i := range cs {
		kind, name := cs[i].Place()
		out = append(out, checkCredential{Secret: cs[i].Secret, Place: kind + ":" + name,
			Placeholder: !cs[i].Sets(), Require: cs[i].Require})
	}
	return out
}

// refusedBeforePolicy is the output for input that never reaches Rego.
func refusedBeforePolicy(kind policy.Kind, env *decideEnv, err error) checkOutput {
	out := checkOutput{Kind: kind.String(), Identity: env.identity.ID, Policy: env.engine.Digest(), Reason: policy.ReasonMalformedRequest,
		refused: &refusal{kind: kind, err: err}}
	var de *policy.DenyError
	if errors.As(err, &de) {
		out.Reason, out.Detail = de.Reason, de.Detail
	} else {
		out.Detail = err.Error()
	}
	return out
}

// checkExit is every check's exit status.
const checkExit = "0 allow, 1 deny (the decision is printed either way), 2 usage or load error"

func runCheck(args []string, stdout, stderr io.Writer) error {
	return runCheckFrom(os.Stdin, args, stdout, stderr)
}

func runCheckFrom(stdin io.Reader, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "-h" && args[0] != "--help" {
		return runCheckFlagsFirst(stdin, args, stdout, stderr)
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 {
			checkUsage(stdout)
			return flag.ErrHelp
		}
		checkUsage(stderr)
		return usageErrorf("check: missing kind")
	}
	kind, ok := checkKinds[args[0]]
	if !ok {
		checkUsage(stderr)
		return usageErrorf("check: unknown kind %q", args[0])
	}
	fs := flag.NewFlagSet("check "+args[0], flag.ContinueOnError)
	var cf checkFlags
	cf.register(fs)
	showInput := fs.Bool("input", false, "also print the Rego input the policy evaluated (a list: sql has one per statement after the connect)")
	var explain explainMode
	fs.Var(&explain, "explain", "print why, as text instead of JSON: the facts, the refusal before any rule, each candidate rule and each of its conditions, the decision (same exit status); --explain=json adds it to the JSON output as \"explain\"")
	fill := kind.setup(fs)
	helpText{
		synopsis: []string{"check " + args[0] + " [flags] " + kind.args},
		about:    kind.about,
		args:     kind.argHelp,
		exit:     checkExit,
	}.install(fs)
	pos, err := parseFlags(fs, args[1:], stdout, stderr)
	if err != nil {
		return err
	}
	if len(pos) != kind.nargs {
		return usageErrorf("usage: egressd check %s [flags] %s (got %d argument(s); see egressd check %[1]s -h)", args[0], kind.args, len(pos))
	}
	if kind.prepare != nil {
		if pos, err = kind.prepare(pos, stdin); err != nil {
			return err
		}
	}
	req := &checkRequest{Identity: cf.identity, stdin: stdin}
	fill(pos, req)
	ctx := context.Background()
	if cf.server != "" {
		if *showInput || explain != explainOff {
			return usageErrorf("check --server: --input and --explain are local only: the server answers with the decision")
		}
		return checkRemote(ctx, &cf, req, stdout)
	}
	env, err := cf.load(ctx)
	if err != nil {
		return loadError(err)
	}
	var exp *explainRecorder
	if explain != explainOff {
		exp = &explainRecorder{checkEngine: env.engine}
		env.engine = exp
	}
	var rec *inputRecorder
	if *showInput {
		rec = &inputRecorder{checkEngine: env.engine, inputs: []any{}}
		env.engine = rec
	}
	out, err := decideRequest(ctx, env, "", req)
	if err != nil {
		return err
	}
	if rec != nil {
		out.Input = rec.inputs
	}
	if exp != nil && explain == explainJSON {
		out.Explain = exp.all(out)
	}
	if exp != nil && explain == explainText {
		if err := exp.write(stdout, out); err != nil {
			return err
		}
		if !out.Allow {
			return errDenied
		}
		return nil
	}
	b, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("encode decision: %w", err)
	}
	b = append(b, '\n')
	if _, err := stdout.Write(b); err != nil {
		return fmt.Errorf("write decision: %w", err)
	}
	if !out.Allow {
		return errDenied
	}
	return nil
}

// runCheckFlagsFirst is a check whose flags come before the kind: `check
// --batch [flags]`, or `check [flags] <kind> args`, which is `check <kind>
// [flags] args`.
func runCheckFlagsFirst(stdin io.Reader, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	var cf checkFlags
	cf.register(fs)
	batch := fs.Bool("batch", false, "decide every request of standard input, one JSON object a line, and print one decision a line, in order")
	checkHelp().install(fs)
	if err := parseOnce(fs, args, stdout, stderr); err != nil {
		return err
	}
	if *batch {
		if fs.NArg() > 0 {
			return usageErrorf("check --batch reads its requests from standard input and takes no arguments, got %q", fs.Args())
		}
		return runBatch(stdin, &cf, stdout)
	}
	if fs.NArg() == 0 {
		checkUsage(stderr)
		return usageErrorf("check: missing kind")
	}
	fwd := []string{fs.Arg(0)}
	fs.Visit(func(f *flag.Flag) { fwd = append(fwd, "--"+f.Name+"="+f.Value.String()) })
	return runCheckFrom(stdin, append(fwd, fs.Args()[1:]...), stdout, stderr)
}

func checkUsage(w io.Writer) { checkHelp().write(w, nil) }

func checkHelp() helpText {
	return helpText{
		synopsis: []string{"check <kind> [flags] args", "check --batch [flags] < requests.jsonl"},
		about: "Decide one request offline, with the code the listeners run, and print the decision and its facts as one JSON object; " +
			"with --explain, why, as text: each candidate rule and each of its conditions; with --batch, one decision a line for each request line of standard input; with --server URL, ask the running egressd instead. " +
			"Run 'egressd check <kind> -h' for a kind's arguments and flags.",
		actions:      table(checkKinds, func(k checkKind) string { return k.args }),
		actionsTitle: "kinds",
		exit:         checkExit + "; --batch: 2 if any line was not a request, else 1 if any was denied, else 0",
	}
}
