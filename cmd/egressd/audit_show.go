package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/egressd/egressd/audit"
)

// showFilter selects records for `audit show`; empty fields match all.
type showFilter struct {
	identity, reason, request, rule string
	decision                        audit.Decision
	kind                            audit.Kind
	since, until                    time.Time
	// wouldDeny keeps only allows an observe mode let through.
	wouldDeny bool
	// host is a lower-case name without a trailing dot, matching a
	// record's host or DNS name; "*.example.com" matches its subdomains.
	host string
	// client matches a record's client address; zero matches all.
	client netip.Prefix
}

// match reports whether r passes f. A reason matches a record's reason,
// or the reason an observed allow would have been denied with.
func (f *showFilter) match(r *audit.Record) bool {
	return (f.identity == "" || r.Identity == f.identity) &&
		(f.decision == "" || r.Decision == f.decision) &&
		(f.kind == "" || r.Kind == f.kind) &&
		(f.reason == "" || r.Reason == f.reason || r.WouldDeny == f.reason) &&
		(!f.wouldDeny || r.WouldDeny != "") &&
		(f.since.IsZero() || !r.TS.Before(f.since)) &&
		(f.until.IsZero() || r.TS.Before(f.until)) &&
		(f.request == "" || r.Request == f.request) &&
		(f.rule == "" || r.Rule == f.rule) &&
		(f.host == "" || f.matchHost(r.Host) || f.matchHost(r.Name)) &&
		(!f.client.IsValid() || f.matchClient(r.Client))
}

func (f *showFilter) matchHost(h string) bool {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if sfx, ok := strings.CutPrefix(f.host, "*"); ok {
		return strings.HasSuffix(h, sfx)
	}
	return h == f.host
}

func (f *showFilter) matchClient(c string) bool {
	a, err := netip.ParseAddr(c)
	return err == nil && f.client.Contains(a.Unmap())
}

// showOptions is a parsed `audit show` command line.
type showOptions struct {
	filter showFilter
	json   bool
	follow bool
	paths  []string
}

func runAuditShow(args []string, stdout, stderr io.Writer) error {
	o, err := parseShow(args, stdout, stderr, time.Now())
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return showAudit(ctx, o, stdout)
}

func parseShow(args []string, stdout, stderr io.Writer, now time.Time) (*showOptions, error) {
	fs := flag.NewFlagSet("audit show", flag.ContinueOnError)
	auditActions["show"].install(fs)
	var o showOptions
	fs.StringVar(&o.filter.identity, "identity", "", "only records of this sandbox identity")
	fs.StringVar((*string)(&o.filter.decision), "decision", "", "only records with this decision (allow or deny)")
	fs.StringVar((*string)(&o.filter.kind), "kind", "", "only records of this kind: "+kindList())
	fs.StringVar(&o.filter.request, "request", "", "only records of this request `ID` (its decision, completion and any redirects)")
	host := fs.String("host", "", "only records whose host or DNS name is `HOST` (*.example.com: its subdomains)")
	fs.StringVar(&o.filter.rule, "rule", "", "only records decided by this rule `ID` (grant:ID for a grant)")
	client := fs.String("client", "", "only records from this client `ADDR` (an IP address or a CIDR prefix)")
	fs.StringVar(&o.filter.reason, "reason", "", "only records with this reason (or allows an observe mode let through that would have been denied with it)")
	fs.BoolVar(&o.filter.wouldDeny, "would-deny", false, "only allows an observe mode let through: what would be denied in enforce mode (would_deny)")
	since := fs.String("since", "", "only records at or after `T`: "+whenForms)
	until := fs.String("until", "", "only records before `T`, in the forms --since takes")
	asJSON := fs.Bool("json", false, "print records as JSON lines, exactly as logged (the default when stdout is not a terminal)")
	asTable := fs.Bool("table", false, "print an aligned table (the default on a terminal)")
	fs.BoolVar(&o.follow, "f", false, "follow the log: keep printing new records, across segment rotations, until interrupted")
	cfgPath := fs.String("config", "", "config `FILE` whose audit.dir is the default PATH")
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return nil, err
	}
	if o.filter.since, err = parseWhen(*since, now); err != nil {
		return nil, usageErrorf("--since: %v", err)
	}
	if o.filter.until, err = parseWhen(*until, now); err != nil {
		return nil, usageErrorf("--until: %v", err)
	}
	if k := o.filter.kind; k != "" && !slices.Contains(audit.Kinds(), k) {
		return nil, usageErrorf("--kind %q is not a record kind; kinds are %s", k, kindList())
	}
	if o.filter.host, err = parseHostFilter(*host); err != nil {
		return nil, usageErrorf("--host: %v", err)
	}
	if o.filter.client, err = parseClientFilter(*client); err != nil {
		return nil, usageErrorf("--client: %v", err)
	}
	if d := o.filter.decision; d != "" && d != audit.DecisionAllow && d != audit.DecisionDeny {
		return nil, usageErrorf("--decision must be allow or deny, got %q", d)
	}
	if *asJSON && *asTable {
		return nil, usageErrorf("--json and --table exclude each other")
	}
	o.json = *asJSON
	if !*asJSON && !*asTable {
		o.json = !isTerminal(os.Stdout)
	}
	if o.paths, err = auditPaths(pos, *cfgPath); err != nil {
		return nil, err
	}
	if o.follow {
		if fi, err := os.Stat(o.paths[0]); len(o.paths) != 1 || err != nil || !fi.IsDir() {
			return nil, usageErrorf("-f follows one audit directory")
		}
	}
	return &o, nil
}

// kindList is every record kind, for help and errors.
func kindList() string {
	ks := audit.Kinds()
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = k.String()
	}
	return strings.Join(s, ", ")
}

// parseHostFilter reads --host: a name, or *. and a name, not a URL or
// host:port (the port is in the table; filter on the name).
func parseHostFilter(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	if strings.Contains(s, "/") || strings.Count(s, ":") == 1 {
		return "", fmt.Errorf("want a host name such as pypi.org or *.pypi.org, not a URL or host:port, got %q", s)
	}
	s = strings.ToLower(strings.TrimSuffix(strings.Trim(s, "[]"), "."))
	if rest, ok := strings.CutPrefix(s, "*."); ok && rest != "" {
		return "*." + rest, nil
	}
	if strings.Contains(s, "*") {
		return "", fmt.Errorf("a wildcard is a leading *. only, got %q", s)
	}
	return s, nil
}

// parseClientFilter reads --client: an IP address or a CIDR prefix.
func parseClientFilter(s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("want an IP address (10.0.0.7) or a CIDR prefix (10.0.0.0/24), got %q", s)
	}
	if p.Addr().Is4In6() {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// whenForms is what --since and --until take, for help and errors.
const whenForms = "an RFC 3339 time (2026-01-02T15:04:05Z), a UTC date (2026-01-02), or a duration ago (90m, 36h, 7d, 1d12h)"

// parseWhen reads an RFC 3339 time, a date (midnight UTC), or a duration
// before now, in Go's units or whole days ("7d", "1d12h").
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, ok := parseAgo(s); ok {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("want %s, got %q", whenForms, s)
}

// parseAgo reads a non-negative duration with an optional leading count
// of days. It is bounded: beyond about 290 years a duration overflows.
func parseAgo(s string) (time.Duration, bool) {
	var days time.Duration
	if n, rest, ok := strings.Cut(s, "d"); ok {
		v, err := strconv.ParseUint(n, 10, 32)
		if err != nil || v > 100000 {
			return 0, false
		}
		days, s = time.Duration(v)*24*time.Hour, rest
		if s == "" {
			return days, true
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, false
	}
	return days + d, true
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// followPoll is how often -f looks for new records.
const followPoll = 200 * time.Millisecond

// showAudit prints the matching records; with follow it keeps going until
// ctx ends.
func showAudit(ctx context.Context, o *showOptions, stdout io.Writer) (err error) {
	bw := bufio.NewWriter(stdout)
	defer func() {
		if ferr := bw.Flush(); err == nil {
			err = ferr
		}
	}()
	if !o.json {
		writeHeader(bw)
	}
	print := func(r *audit.Record, raw []byte) error {
		if !o.filter.match(r) {
			return nil
		}
		if o.json {
			bw.Write(raw)
			bw.WriteByte('\n')
		} else {
			writeRow(bw, r)
		}
		if o.follow {
			return bw.Flush()
		}
		return nil
	}
	if o.follow {
		return audit.Follow(ctx, o.paths[0], followPoll, print)
	}
	rd, err := audit.NewReader(o.paths)
	if err != nil {
		return fmt.Errorf("audit show: %w", err)
	}
	defer rd.Close()
	for {
		r, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("audit show: %w", err)
		}
		if err := print(r, rd.Raw); err != nil {
			return err
		}
	}
}
