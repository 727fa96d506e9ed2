package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/egressd/egressd/audit"
)

// showFilter selects records for `audit show`; empty fields match all.
type showFilter struct {
	identity, reason string
	decision         audit.Decision
	kind             audit.Kind
	since, until     time.Time
	// wouldDeny keeps only allows an observe mode let through.
	wouldDeny bool
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
		(f.until.IsZero() || r.TS.Before(f.until))
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
	fs.StringVar((*string)(&o.filter.kind), "kind", "", "only records of this kind (http, connect, dns, sql, redirect, segment, …)")
	fs.StringVar(&o.filter.reason, "reason", "", "only records with this reason (or allows an observe mode let through that would have been denied with it)")
	fs.BoolVar(&o.filter.wouldDeny, "would-deny", false, "only allows an observe mode let through: what would be denied in enforce mode (would_deny)")
	since := fs.String("since", "", "only records at or after `T` (RFC 3339, or a duration such as 1h meaning that long ago)")
	until := fs.String("until", "", "only records before `T` (RFC 3339 or a duration ago)")
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

// parseWhen reads an RFC 3339 time or a duration before now.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("want RFC 3339 or a duration, got %q", s)
	}
	return t, nil
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

// The table has fixed minimum widths so rows line up while following.
var columns = []struct {
	name  string
	width int
}{{"TIME", 27}, {"SEQ", 8}, {"KIND", 10}, {"IDENTITY", 14}, {"DECISION", 8}, {"REASON", 22}, {"RULE", 14}, {"TARGET", 0}}

func writeHeader(w *bufio.Writer) {
	cells := make([]string, len(columns))
	for i, c := range columns {
		cells[i] = c.name
	}
	writeCells(w, cells)
}

func writeRow(w *bufio.Writer, r *audit.Record) {
	writeCells(w, []string{
		r.TS.UTC().Format("2006-01-02T15:04:05.000000Z"), strconv.FormatUint(r.Seq, 10), r.Kind.String(),
		dash(r.Identity), dash(r.Decision.String()), reasonCell(r), dash(r.Rule), target(r),
	})
}

// reasonCell is the reason column: an observed allow shows what it would
// have been denied with.
func reasonCell(r *audit.Record) string {
	if r.WouldDeny != "" {
		return "would_deny:" + r.WouldDeny
	}
	return dash(r.Reason)
}

func writeCells(w *bufio.Writer, cells []string) {
	for i, c := range cells {
		if i > 0 {
			w.WriteString("  ")
		}
		c = printable(c)
		w.WriteString(c)
		if i < len(cells)-1 {
			for n := len([]rune(c)); n < columns[i].width; n++ {
				w.WriteByte(' ')
			}
		}
	}
	w.WriteByte('\n')
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// target summarizes what a record is about, by kind.
func target(r *audit.Record) string {
	var b strings.Builder
	switch {
	case r.Method != "" || r.Path != "":
		fmt.Fprintf(&b, "%s %s://%s", r.Method, r.Scheme, hostPort(r))
		b.WriteString(r.Path)
		if r.Inspected {
			b.WriteString(" (inspected)")
		}
	case r.Host != "":
		b.WriteString(hostPort(r))
		if r.Inspected {
			b.WriteString(" (inspected)")
		}
	case r.Name != "":
		b.WriteString(r.Name)
		if r.QType != "" {
			b.WriteString(" " + r.QType)
		}
	case r.SQL != "":
		if r.Database != "" {
			b.WriteString(r.Database + ": ")
		}
		b.WriteString(r.SQL)
	case r.Count > 0:
		fmt.Fprintf(&b, "%d more refusals from %s, %s to %s", r.Count, dash(r.Client), r.Detail["first"], r.Detail["last"])
	case len(r.Detail) > 0:
		keys := make([]string, 0, len(r.Detail))
		for k := range r.Detail {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(k + "=" + r.Detail[k])
		}
	default:
		return "-"
	}
	if r.IP != "" {
		b.WriteString(" [" + r.IP + "]")
	}
	if len(r.Credentials) > 0 {
		// Names and places only: a record never holds a secret's value.
		keys := make([]string, 0, len(r.Credentials))
		for k := range r.Credentials {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString(" credentials:")
		for _, k := range keys {
			b.WriteString(" " + k + "=" + r.Credentials[k])
		}
	}
	return b.String()
}

// printable keeps client-supplied text (hosts, paths, SQL) from driving
// the terminal or disguising itself: control characters, format characters
// (bidi overrides and isolates U+202A–202E and U+2066–2069, zero-width
// characters, U+FEFF, tag characters), and the line and paragraph
// separators U+2028/2029 are shown as \uXXXX (\U0010XXXX beyond the BMP),
// and a backslash as \\, so an escape cannot be forged either.
func printable(s string) string {
	clean := true
	for _, c := range s {
		if c == '\\' || mustEscape(c) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, c := range s {
		switch {
		case c == '\\':
			b.WriteString(`\\`)
		case !mustEscape(c):
			b.WriteRune(c)
		case c > 0xffff:
			fmt.Fprintf(&b, `\U%08x`, c)
		default:
			fmt.Fprintf(&b, `\u%04x`, c)
		}
	}
	return b.String()
}

// mustEscape reports whether c may not reach the terminal as it is.
func mustEscape(c rune) bool {
	return c < 0x20 || (c >= 0x7f && c < 0xa0) || c == utf8.RuneError ||
		unicode.In(c, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Co, unicode.Cs)
}

func hostPort(r *audit.Record) string {
	if r.Port == 0 {
		return r.Host
	}
	if strings.Contains(r.Host, ":") {
		return "[" + r.Host + "]:" + strconv.Itoa(int(r.Port))
	}
	return r.Host + ":" + strconv.Itoa(int(r.Port))
}
