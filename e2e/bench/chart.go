package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// series groups targets across workloads for colours and the relative
// panel's legend: every egressd mode is egressd, every Squid mode Squid,
// both bare relays the relay.
func series(t *Target) string {
	switch {
	case t.Name == "goproxy":
		return "goproxy"
	case t.Kind == kindCeiling:
		return "bare relay"
	case t.Kind == kindDirect:
		return "direct"
	case strings.HasPrefix(t.Name, "egressd"):
		return "egressd"
	case strings.HasPrefix(t.Name, "squid"):
		return "squid"
	case strings.HasPrefix(t.Name, "pgbouncer"):
		return "pgbouncer"
	}
	return t.Name
}

// colours are fixed per series, so a proxy keeps its colour in every panel
// and every report.
var colours = map[string]color.Color{
	"egressd":     color.RGBA{0xff, 0x7f, 0x0e, 0xff},
	"squid":       color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	"tinyproxy":   color.RGBA{0xd6, 0x27, 0x28, 0xff},
	"smokescreen": color.RGBA{0x94, 0x67, 0xbd, 0xff},
	"pgbouncer":   color.RGBA{0x17, 0xbe, 0xcf, 0xff},
	"bare relay":  color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	"direct":      color.RGBA{0x1f, 0x77, 0xb4, 0xff},
	"goproxy":     color.RGBA{0xe3, 0x77, 0xc2, 0xff},
}

func colour(t *Target) color.Color {
	if c, ok := colours[series(t)]; ok {
		return c
	}
	return color.Gray{0x7f}
}

// shortIDs label the relative panel's groups.
var shortIDs = map[string]string{
	"connect-tls": "conn TLS", "pgbench-S": "pg -S", "pgbench-S-extended": "pg ext", "pgbench-tpcb": "pg TPC-B",
	"get-unpinned": "get unpin", "get-paced": "get paced", "get-equal": "get equal", "leaf-hit": "leaf hit", "leaf-mint": "leaf mint",
}

// writeChart draws three panels and saves them as one PNG: the throughput
// of every proxy in the workload chartWorkload picks, that workload's
// latency distribution (median over rounds of each percentile), and every
// workload's figures relative to its best peer.
func writeChart(path string, r *Results) error {
	wl := chartWorkload(r)
	if wl == nil {
		return fmt.Errorf("chart: no workload with figures")
	}
	bars, err := throughputPlot(wl)
	if err != nil {
		return err
	}
	lat, err := latencyPlot(wl)
	if err != nil {
		return err
	}
	rel, err := relativePlot(r)
	if err != nil {
		return err
	}
	const w, h = 18 * vg.Inch, 5 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 3, PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2}
	ps := [][]*plot.Plot{{bars, lat, rel}}
	canvases := plot.Align(ps, tiles, dc)
	for i, p := range ps[0] {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close() //nolint:errcheck // the write already failed; that error is returned
		return fmt.Errorf("chart: write %s: %w", path, err)
	}
	return f.Close()
}

// throughputPlot: one bar per proxy (the direct path is in the title: its
// bar would dwarf the others).
func throughputPlot(wl *Workload) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = wl.Title
	if d := wl.first(kindDirect); d != nil && d.ok() {
		p.Title.Text += fmt.Sprintf(" (direct: %s %s)", num(d.rate()), wl.Unit)
	}
	p.Y.Label.Text = wl.Unit
	p.Y.Min = 0
	p.Y.Tick.Marker = plainTicks{}
	var names []string
	for _, t := range wl.Targets {
		if t.ok() && t.Kind != kindDirect {
			names = append(names, t.Name)
		}
	}
	for i, n := range names {
		// One bar chart per target, so that each keeps its colour.
		v := make(plotter.Values, len(names))
		v[i] = wl.target(n, "").rate()
		bc, err := plotter.NewBarChart(v, vg.Points(28))
		if err != nil {
			return nil, fmt.Errorf("chart: %w", err)
		}
		bc.Color = colour(wl.target(n, ""))
		bc.LineStyle.Width = 0
		p.Add(bc)
	}
	if len(names) > 0 { // NominalX panics on none
		p.NominalX(names...)
	}
	return p, nil
}

// latencyPlot: percentiles on a "nines" scale (p90, p99, p99.9 equally
// spaced), one line per target.
func latencyPlot(wl *Workload) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "latency distribution, " + wl.Title
	p.X.Label.Text = "percentile"
	p.Y.Label.Text = "ms"
	p.Y.Min = 0
	p.Legend.Top, p.Legend.Left = true, true
	nines := func(q float64) float64 { return -math.Log10(1 - q/100) }
	var ticks []plot.Tick
	for _, q := range latencyQuantiles {
		ticks = append(ticks, plot.Tick{Value: nines(q), Label: fmt.Sprintf("p%g", q)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	if !wl.Latency {
		return p, nil
	}
	for _, t := range wl.Targets {
		if !t.ok() {
			continue
		}
		pts := make(plotter.XYs, len(latencyQuantiles))
		for i, q := range latencyQuantiles {
			pts[i] = plotter.XY{X: nines(q), Y: t.latency(i)}
		}
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, fmt.Errorf("chart: %w", err)
		}
		l.Color, s.Color = colour(t), colour(t)
		l.Width = vg.Points(1.5)
		p.Add(l, s)
		p.Legend.Add(t.Name, l, s)
	}
	return p, nil
}

// relativePlot: for every workload with a best peer, the figures of
// egressd (the workload's subject), each peer and the bare relay divided by
// the best peer's (above 1 is better, whatever the unit), grouped by
// workload.
func relativePlot(r *Results) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "relative to the best peer (> 1: better)"
	p.Y.Min = 0
	p.Legend.Top = true
	var wls []*Workload
	for _, wl := range r.Workloads {
		if wl.bestPeer() != nil {
			wls = append(wls, wl)
		}
	}
	// Per series, its target in each workload.
	var names []string
	byName := map[string][]*Target{}
	var sample = map[string]*Target{}
	for j, wl := range wls {
		e := wl.first(kindEgressd)
		for _, t := range wl.Targets {
			if !t.ok() || t.Kind == kindDirect || t.Kind == kindEgressd && t != e {
				continue
			}
			n := series(t)
			if byName[n] == nil {
				names = append(names, n)
				byName[n] = make([]*Target, len(wls))
				sample[n] = t
			}
			byName[n][j] = t
		}
	}
	// The groups share the panel: bars of one group must not reach the
	// next, and the legend needs room above the tallest.
	width := vg.Points(36) / vg.Length(max(1, len(names)))
	top := 1.0
	for i, n := range names {
		v := make(plotter.Values, len(wls))
		for j, wl := range wls {
			if t := byName[n][j]; t != nil {
				if best := wl.bestPeer().rate(); wl.LowerIsBetter {
					v[j] = best / t.rate()
				} else {
					v[j] = t.rate() / best
				}
			}
		}
		for _, x := range v {
			top = max(top, x)
		}
		bc, err := plotter.NewBarChart(v, width)
		if err != nil {
			return nil, fmt.Errorf("chart: %w", err)
		}
		bc.Color = colour(sample[n])
		bc.LineStyle.Width = 0
		bc.Offset = width * vg.Length(float64(i)-float64(len(names)-1)/2)
		p.Add(bc)
		p.Legend.Add(n, bc)
	}
	p.Y.Max = top * 1.4
	var ids []string
	for _, wl := range wls {
		id := wl.ID
		if s, ok := shortIDs[id]; ok {
			id = s
		}
		ids = append(ids, id)
	}
	if len(ids) > 0 {
		p.NominalX(ids...)
	}
	return p, nil
}

// plainTicks labels an axis without decimals or exponents.
type plainTicks struct{}

func (plainTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = num(ts[i].Value)
		}
	}
	return ts
}

// chartWorkload is the pinned keep-alive GET workload if it has figures,
// else the first latency workload with figures, else any with figures.
func chartWorkload(r *Results) *Workload {
	var pick *Workload
	for _, wl := range r.Workloads {
		n := 0
		for _, t := range wl.Targets {
			if t.ok() {
				n++
			}
		}
		if n == 0 {
			continue
		}
		if wl.ID == "get" {
			return wl
		}
		if pick == nil || wl.Latency && !pick.Latency {
			pick = wl
		}
	}
	return pick
}
