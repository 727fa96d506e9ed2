package export

import (
	"fmt"
	"strings"

	"github.com/egressd/egressd/audit"
)

// maxChains bounds how many replicas' chains one verification tracks: a
// hostile file must not name a million chains (each chain's memory grows
// with its records, up to audit.StreamVerifier's replay window).
const maxChains = 4096

// Delivered is one exported event read back from a file: the record line
// it embeds and what it claims beside the line.
type Delivered struct {
	// Where locates the event in the file ("line 12", "line 3 log 5").
	Where string
	// Line is the embedded record line.
	Line []byte
	// Replica, Chain, Seq, Prev and Hash are the event's own claims.
	Replica, Chain string
	Seq            uint64
	Prev, Hash     string
	// Mapped checks the event's mapped fields against the record parsed
	// from Line; it returns the fields that differ.
	Mapped func(r *audit.Record) []string
}

// ChainReport is what Verify found for one replica's chain.
type ChainReport struct {
	Replica, Chain string
	// Records counts distinct records; Repeats exact re-deliveries.
	Records, Repeats int
	// Head is the last intact record's seq.
	Head uint64
	// Err is the first break, nil if the stream is intact.
	Err error
}

// Verifier checks exported streams of any number of replicas: events are
// grouped by (replica, chain) and each group's lines must form that chain
// from seq 1, in order, each line matching its hash and its event's
// mapped fields. Feed it events with Add, then read Reports.
type Verifier struct {
	chains map[[2]string]*chainState
	order  [][2]string
	// Err is a problem with the stream as a whole (too many chains).
	Err error
	// Accepted, if set, is called with each distinct record line a chain
	// accepted, in seq order (fuzz oracles replay them through
	// audit.Verifier).
	Accepted func(replica, chain string, line []byte)
}

type chainState struct {
	v   audit.StreamVerifier
	rep ChainReport
	rec audit.Record
}

// NewVerifier returns an empty Verifier.
func NewVerifier() *Verifier {
	return &Verifier{chains: map[[2]string]*chainState{}}
}

// Add checks the next delivered event of its chain. Once a chain has
// broken, its later events are not checked: the first break is the one
// to investigate.
func (v *Verifier) Add(d *Delivered) {
	k := [2]string{d.Replica, d.Chain}
	c := v.chains[k]
	if c == nil {
		if len(v.chains) >= maxChains {
			if v.Err == nil {
				v.Err = fmt.Errorf("%s: more than %d replica chains in one stream", d.Where, maxChains)
			}
			return
		}
		c = &chainState{rep: ChainReport{Replica: d.Replica, Chain: d.Chain}}
		v.chains[k] = c
		v.order = append(v.order, k)
	}
	if c.rep.Err != nil {
		return
	}
	before := c.v.Records
	if err := c.check(d); err != nil {
		c.rep.Err = fmt.Errorf("%s: %w", d.Where, err)
	} else if v.Accepted != nil && c.v.Records > before {
		v.Accepted(d.Replica, d.Chain, d.Line)
	}
	c.rep.Records, c.rep.Repeats = c.v.Records, c.v.Repeats
	c.rep.Head, _ = c.v.Head()
}

func (c *chainState) check(d *Delivered) error {
	r := &c.rec
	if err := c.v.Line(d.Line, r); err != nil {
		return fmt.Errorf("seq %d: %w", d.Seq, err)
	}
	var bad []string
	if d.Seq != r.Seq {
		bad = append(bad, "seq")
	}
	if d.Prev != r.Prev {
		bad = append(bad, "prev")
	}
	if d.Hash != r.Hash {
		bad = append(bad, "hash")
	}
	if d.Mapped != nil {
		bad = append(bad, d.Mapped(r)...)
	}
	if len(bad) > 0 {
		return fmt.Errorf("seq %d: the event's %s differ from its embedded record line: the event was edited",
			r.Seq, strings.Join(bad, ", "))
	}
	if c.v.First != "" && d.Chain != c.v.First {
		return fmt.Errorf("seq %d: the event names chain %s, but the chain's first record has hash %s", r.Seq, d.Chain, c.v.First)
	}
	return nil
}

// Reports returns each chain's report, in order of first appearance.
func (v *Verifier) Reports() []ChainReport {
	out := make([]ChainReport, 0, len(v.order))
	for _, k := range v.order {
		out = append(out, v.chains[k].rep)
	}
	return out
}

// Ok reports whether every chain is intact.
func (v *Verifier) Ok() bool {
	if v.Err != nil || len(v.order) == 0 {
		return false
	}
	for _, k := range v.order {
		if v.chains[k].rep.Err != nil {
			return false
		}
	}
	return true
}
