package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
	"sigs.k8s.io/yaml"
)

// maxBundleFile bounds one bundle file: a bundle is operator input, but a
// stray multi-gigabyte file must not take the process down on reload.
const maxBundleFile = 16 << 20

// source is one bundle file the loader uses.
type source struct {
	name string // slash path relative to the bundle root
	data []byte
}

// readBundle collects the .rego modules and data.json/data.yaml files of
// fsys in sorted path order. Other files are ignored.
func readBundle(fsys fs.FS) ([]source, error) {
	var srcs []source
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != "." && strings.HasPrefix(d.Name(), ".") {
				return fs.SkipDir
			}
			return nil
		}
		if !isModule(p) && !isData(p) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() > maxBundleFile {
			return fmt.Errorf("%s: larger than %d bytes", p, maxBundleFile)
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		srcs = append(srcs, source{name: p, data: b})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read bundle: %w", err)
	}
	sort.Slice(srcs, func(i, j int) bool { return srcs[i].name < srcs[j].name })
	return srcs, nil
}

func isModule(p string) bool { return strings.HasSuffix(p, ".rego") }

func isTestModule(p string) bool { return strings.HasSuffix(p, "_test.rego") }

func isData(p string) bool {
	b := path.Base(p)
	return b == "data.json" || b == "data.yaml"
}

// digestOf is SHA-256 over the sorted paths and contents, each
// length-prefixed so that no two bundles share an encoding.
func digestOf(srcs []source) string {
	h := sha256.New()
	var n [8]byte
	put := func(b []byte) {
		l := uint64(len(b))
		for i := range n {
			n[i] = byte(l >> (56 - 8*i))
		}
		h.Write(n[:])
		h.Write(b)
	}
	for _, s := range srcs {
		put([]byte(s.name))
		put(s.data)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// parsedBundle is a bundle's modules and data before compilation.
type parsedBundle struct {
	modules map[string]*ast.Module // all modules, tests included
	data    ast.Object             // data files merged, rule_index added
	views   *viewIndex             // the rule index's Go half (input.views)
	// sqlProfiles are the names in data.sql.profiles, sorted.
	sqlProfiles []string
	// credentialRules are the rules binding credentials; credentials are
	// their actions by rule id.
	credentialRules []CredentialRule
	credentials     map[string][]Credential
	// mode is data.mode, the bundle's own.
	mode Mode
}

// parseBundle parses every module (Rego v1) and data file and builds the
// rule index. Errors name file:line where the parser knows it, and the
// file and key of a data mistake.
func parseBundle(srcs []source, grants []Grant) (*parsedBundle, error) {
	pb := &parsedBundle{modules: make(map[string]*ast.Module)}
	root := map[string]any{}
	origin := origins{}
	var errs ast.Errors
	for _, s := range srcs {
		if isModule(s.name) {
			m, err := ast.ParseModuleWithOpts(s.name, string(s.data), ast.ParserOptions{RegoVersion: ast.RegoV1})
			if err != nil {
				var aerrs ast.Errors
				if errors.As(err, &aerrs) {
					errs = append(errs, aerrs...)
					continue
				}
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
			if m != nil {
				pb.modules[s.name] = m
			}
			continue
		}
		v, err := decodeData(s)
		if err != nil {
			return nil, err
		}
		if err := mount(root, path.Dir(s.name), v); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		origin.add(path.Dir(s.name), v, s.name)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	if err := checkEntryPoints(pb.modules); err != nil {
		return nil, err
	}
	if err := checkGrantPrefix(root); err != nil {
		return nil, fmt.Errorf("%s: %w", origin.of("rules"), err)
	}
	if err := appendGrants(root, grants); err != nil {
		return nil, err
	}
	if _, ok := root[indexKey]; ok {
		return nil, fmt.Errorf("%s: data.%s is reserved: egressd computes it from data.rules", origin.of(indexKey), indexKey)
	}
	idx, views, err := buildIndex(root["rules"])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", origin.of("rules"), err)
	}
	pb.views = views
	if pb.credentialRules, pb.credentials, err = parseCredentials(root["rules"]); err != nil {
		return nil, fmt.Errorf("%s: %w", origin.of("rules"), err)
	}
	if pb.sqlProfiles, err = sqlProfiles(root, origin); err != nil {
		return nil, err
	}
	if pb.mode, err = bundleMode(root, origin); err != nil {
		return nil, err
	}
	val, err := ast.InterfaceToValue(root)
	if err != nil {
		return nil, fmt.Errorf("convert data: %w", err)
	}
	pb.data = val.(ast.Object)
	pb.data.Insert(ast.StringTerm(indexKey), idx)
	return pb, nil
}

func decodeData(s source) (map[string]any, error) {
	b := s.data
	if strings.HasSuffix(s.name, ".yaml") {
		j, err := yaml.YAMLToJSON(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		b = j
	}
	v, err := decodeJSON(s.name, b)
	if err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: top level must be an object", s.name)
	}
	return obj, nil
}

// mount merges v into root at dir, the OPA loader convention: data in
// subdirectory x/ appears at data.x. A key defined twice is an error.
func mount(root map[string]any, dir string, v map[string]any) error {
	node := root
	if dir != "." {
		for _, seg := range strings.Split(dir, "/") {
			next, ok := node[seg]
			if !ok {
				m := map[string]any{}
				node[seg] = m
				node = m
				continue
			}
			m, ok := next.(map[string]any)
			if !ok {
				return fmt.Errorf("data.%s is not an object", seg)
			}
			node = m
		}
	}
	for k, val := range v {
		if _, dup := node[k]; dup {
			return fmt.Errorf("key %q defined twice", k)
		}
		node[k] = val
	}
	return nil
}

// compiled is a bundle ready to decide: immutable, swapped whole on reload.
type compiled struct {
	digest string
	// srcs are the files the bundle was built from, kept for Archive.
	srcs    []source
	queries [KindRedirect + 1]*rego.PreparedEvalQuery
	views   *viewIndex
	// sqlProfiles are the names in data.sql.profiles, sorted.
	sqlProfiles []string
	// credentials are the credential actions of each rule that binds any,
	// by rule id; see Decision.Credentials.
	credentialRules []CredentialRule
	credentials     map[string][]Credential
	identities      identityTerms
	cache           *lru
	// bodyScopes are where the bundle's Rego rules decide on bodies.
	bodyScopes scopeSet
	// mode is data.mode: ModeObserve lets every liftable deny through.
	mode Mode
	// comp and store are what the queries were prepared with, kept for
	// the ad-hoc queries of Explain.
	comp  *ast.Compiler
	store storage.Store
	// grantExpiry is when each grant's rule stops allowing, by rule id;
	// nil without grants.
	grantExpiry map[string]time.Time
}

// entryPoints maps each Kind to its Rego package.
var entryPoints = map[Kind]string{
	KindHTTP:    "http",
	KindConnect: "connect",
	KindDNS:     "dns",
	KindSQL:     "sql",
}

// testMode says what compileBundle does with the bundle's Rego tests.
type testMode int

const (
	// testsRun compiles the test modules and runs the tests: a bundle
	// whose tests fail is refused.
	testsRun testMode = iota
	// testsCompile compiles the test modules without running them, so
	// that `policy check` refuses every module a start would (a test
	// calling a removed built-in among them).
	testsCompile
	// testsPassed neither parses nor runs the test modules: a TestLedger
	// recorded that this bundle, byte for byte, passed them under this
	// build.
	testsPassed
)

// compileBundle compiles the production modules (tests excluded), prepares
// one query per entry point with grants appended to data.rules, then
// deals with the bundle's Rego tests as tests says. Any failure refuses
// the whole bundle.
func compileBundle(ctx context.Context, srcs []source, grants []Grant, cacheSize int, tests testMode) (*compiled, error) {
	// The digest and the archived sources cover the test modules whatever
	// tests says.
	all := srcs
	if tests == testsPassed {
		srcs = slices.DeleteFunc(slices.Clone(srcs), func(s source) bool { return isTestModule(s.name) })
	}
	pb, err := parseBundle(srcs, grants)
	if err != nil {
		return nil, err
	}
	c, store, err := prepare(ctx, pb, cacheSize)
	if err != nil {
		return nil, err
	}
	c.digest, c.srcs = digestOf(all), all
	if len(grants) > 0 {
		c.grantExpiry = make(map[string]time.Time, len(grants))
		for i := range grants {
			c.grantExpiry[grants[i].RuleID()] = grants[i].Expires
		}
	}
	switch tests {
	case testsRun:
		if _, err := testBundle(ctx, pb, store, false); err != nil {
			return nil, err
		}
	case testsCompile:
		comp := newCompiler()
		if comp.Compile(copyModules(pb.modules)); comp.Failed() {
			return nil, comp.Errors
		}
	}
	return c, nil
}

// copyModules copies every module: compiling rewrites them in place.
func copyModules(in map[string]*ast.Module) map[string]*ast.Module {
	out := make(map[string]*ast.Module, len(in))
	for name, m := range in {
		out[name] = m.Copy()
	}
	return out
}

// prepare compiles pb's production modules and prepares the queries
// against a store holding pb's data.
func prepare(ctx context.Context, pb *parsedBundle, cacheSize int) (*compiled, storage.Store, error) {
	prod := make(map[string]*ast.Module, len(pb.modules))
	for name, m := range pb.modules {
		if !isTestModule(name) {
			prod[name] = m.Copy()
		}
	}
	comp := newCompiler()
	if comp.Compile(prod); comp.Failed() {
		return nil, nil, comp.Errors
	}
	store := inmem.NewFromASTObject(pb.data)
	c := &compiled{views: pb.views, sqlProfiles: pb.sqlProfiles, cache: newLRU(cacheSize),
		credentialRules: pb.credentialRules, credentials: pb.credentials,
		bodyScopes: newScopeSet(bodyScopes(prod)), mode: pb.mode, comp: comp, store: store}
	for k, pkg := range entryPoints {
		pq, err := rego.New(
			rego.Query("data.egress."+pkg+".decision"),
			rego.Compiler(comp),
			rego.Capabilities(comp.Capabilities()),
			rego.Store(store),
		).PrepareForEval(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("prepare egress.%s: %w", pkg, err)
		}
		c.queries[k] = &pq
	}
	// A redirect is judged by the rules of the request it replaces.
	c.queries[KindRedirect] = c.queries[KindHTTP]
	return c, store, nil
}

// Check reads and compiles the bundle in fsys without running its tests,
// and returns its digest. Errors name file:line.
func Check(ctx context.Context, fsys fs.FS) (string, error) {
	srcs, err := readBundle(fsys)
	if err != nil {
		return "", err
	}
	c, err := compileBundle(ctx, srcs, nil, 0, testsCompile)
	if err != nil {
		return "", err
	}
	return c.digest, nil
}

// Test compiles the bundle in fsys and runs its Rego tests. It returns the
// number that passed; failures are a *TestError, each with the trace of
// the expressions that failed (TestFailure.Trace).
func Test(ctx context.Context, fsys fs.FS) (int, error) {
	srcs, err := readBundle(fsys)
	if err != nil {
		return 0, err
	}
	pb, err := parseBundle(srcs, nil)
	if err != nil {
		return 0, err
	}
	_, store, err := prepare(ctx, pb, 0)
	if err != nil {
		return 0, err
	}
	return testBundle(ctx, pb, store, true)
}

// TestFailure is one failed or erroring Rego test.
type TestFailure struct {
	Location string // file:line
	Name     string // package.rule
	Err      error  // nil for a plain failure
	// Trace is what evaluated and failed in the test, as `opa test -v`
	// shows it, at most maxTraceLines lines; "" unless Test ran it.
	Trace string
}

// TestError lists the failures of a bundle's Rego tests.
type TestError struct {
	Failures []TestFailure
	Passed   int
}

func (e *TestError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d rego test(s) failed", len(e.Failures))
	for _, f := range e.Failures {
		fmt.Fprintf(&b, "\n%s: %s", f.Location, f.Name)
		if f.Err != nil {
			fmt.Fprintf(&b, ": %v", f.Err)
		}
	}
	return b.String()
}

// testCaseTimeout bounds each Rego test of a bundle. OPA's default, 5 s,
// refused the shipped bundle's own tests (eval_cancel_error) on a loaded
// 2-core machine under the race detector: a start or reload must not
// refuse a good bundle because the machine was busy. A bundle's tests are
// the operator's, and a test that runs past this still fails.
const testCaseTimeout = 30 * time.Second

// testBundle runs the bundle's tests and returns how many passed; a
// failure is a *TestError, a compile error an ast.Errors. With trace,
// each failure carries its trace: for `policy test`, not for every load,
// which tracing would slow.
func testBundle(ctx context.Context, pb *parsedBundle, store storage.Store, trace bool) (int, error) {
	mods := copyModules(pb.modules)
	txn, err := store.NewTransaction(ctx)
	if err != nil {
		return 0, fmt.Errorf("open store: %w", err)
	}
	defer store.Abort(ctx, txn)
	ch, err := tester.NewRunner().
		SetCompiler(newCompiler()).
		SetDefaultRegoVersion(ast.RegoV1).
		SetStore(store).
		SetModules(mods).
		RaiseBuiltinErrors(true).
		EnableTracing(trace).
		SetTimeout(testCaseTimeout).
		RunTests(ctx, txn)
	if err != nil {
		return 0, fmt.Errorf("rego tests: %w", err)
	}
	te := &TestError{}
	for r := range ch {
		if r.Pass() {
			te.Passed++
			continue
		}
		if r.Skip {
			continue
		}
		loc, file := "?", ""
		if r.Location != nil {
			loc, file = fmt.Sprintf("%s:%d", r.Location.File, r.Location.Row), r.Location.File
		}
		te.Failures = append(te.Failures, TestFailure{Location: loc, Name: r.Package + "." + r.Name, Err: r.Error, Trace: failTrace(r.Trace, file)})
	}
	if len(te.Failures) > 0 {
		sort.Slice(te.Failures, func(i, j int) bool { return te.Failures[i].Location < te.Failures[j].Location })
		return te.Passed, te
	}
	return te.Passed, nil
}
