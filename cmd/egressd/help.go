package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// helpText is one subcommand's -h text. Every subcommand prints its help
// through it, so all share one shape: the synopsis, what it does, its
// arguments and standard input, its flags, its exit status.
type helpText struct {
	// synopsis lists the command lines it takes, without "egressd ".
	synopsis []string
	// summary is its line in its group's listing (`egressd policy -h`).
	summary string
	// about says what the command does, in a sentence or two.
	about string
	// actions lists a command's actions (`policy init`, …), each as
	// {name, what}, under actionsTitle (if empty, "actions").
	actions      [][2]string
	actionsTitle string
	// args describes the positional arguments and standard input, each
	// as {name, what}.
	args [][2]string
	// exit says what each exit status means.
	exit string
}

// install makes h the flag set's usage, so -h and --help print it.
func (h helpText) install(fs *flag.FlagSet) {
	fs.Usage = func() { h.write(fs.Output(), fs) }
}

// write prints h with the flags of fs (nil: none).
func (h helpText) write(w io.Writer, fs *flag.FlagSet) {
	var b strings.Builder
	for i, s := range h.synopsis {
		lead := "usage: "
		if i > 0 {
			lead = "       "
		}
		fmt.Fprintf(&b, "%segressd %s\n", lead, s)
	}
	fmt.Fprintf(&b, "\n%s\n", wrap(h.about, 78))
	if len(h.actions) > 0 {
		title := h.actionsTitle
		if title == "" {
			title = "actions"
		}
		fmt.Fprintf(&b, "\n%s:\n", title)
		writeColumns(&b, h.actions)
	}
	if len(h.args) > 0 {
		b.WriteString("\narguments:\n")
		writeColumns(&b, h.args)
	}
	if fs != nil {
		var rows [][2]string
		fs.VisitAll(func(f *flag.Flag) {
			name, usage := flag.UnquoteUsage(f)
			dash := "--"
			if len(f.Name) == 1 {
				dash = "-"
			}
			left := dash + f.Name
			if name != "" {
				left += " " + name
			}
			if def := f.DefValue; def != "" && def != "false" && def != "0" && def != "[]" {
				usage += fmt.Sprintf(" (default %s)", def)
			}
			rows = append(rows, [2]string{left, usage})
		})
		if len(rows) > 0 {
			b.WriteString("\nflags:\n")
			writeColumns(&b, rows)
		}
	}
	fmt.Fprintf(&b, "\nexit status: %s\n", h.exit)
	fmt.Fprint(w, b.String())
}

// writeColumns prints rows as two aligned columns indented by two spaces.
func writeColumns(b *strings.Builder, rows [][2]string) {
	width := 0
	for _, r := range rows {
		width = max(width, len(r[0]))
	}
	for _, r := range rows {
		fmt.Fprintf(b, "  %-*s  %s\n", width, r[0], r[1])
	}
}

// groupHelp is the -h text of a command with actions (`egressd policy`),
// in the same shape as an action's own.
func groupHelp(w io.Writer, name string, actions [][2]string, exit string) {
	helpText{
		synopsis: []string{name + " <action> [flags] [args]"},
		about:    fmt.Sprintf("Run 'egressd %s <action> -h' for an action's arguments, flags and exit status.", name),
		actions:  actions,
		exit:     exit,
	}.write(w, nil)
}

// groupAction reads the action of `egressd GROUP ACTION …` from args, one
// of actions. With no action, -h or an unknown one it prints the group's
// help (its actions' summaries; to stdout when asked for with -h, else to
// stderr) and returns the error to exit with:
// flag.ErrHelp, or a usage error saying what it wants (e.g. "init, check
// or test").
func groupAction(group string, actions map[string]helpText, want string, args []string, stdout, stderr io.Writer) (string, error) {
	help := func(w io.Writer) {
		groupHelp(w, group, table(actions, func(h helpText) string { return h.summary }),
			"the action's own (see its -h); 2 for a usage error")
	}
	switch {
	case len(args) == 0:
		help(stderr)
		return "", usageErrorf("%s: want %s", group, want)
	case args[0] == "-h" || args[0] == "--help":
		help(stdout)
		return "", flag.ErrHelp
	}
	if _, ok := actions[args[0]]; !ok {
		help(stderr)
		return "", usageErrorf("%s: unknown action %q; want %s", group, args[0], want)
	}
	return args[0], nil
}

// wrap breaks s into lines of at most width bytes at spaces (a longer
// word gets a line of its own).
func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(s) {
		if i > 0 && n+1+len(w) > width {
			b.WriteByte('\n')
			n = 0
		} else if i > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
