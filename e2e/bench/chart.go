package main

import (
	"fmt"
	"image/color"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// palette gives every target the same colour in every panel.
var palette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xff, 0x7f, 0x0e, 0xff},
	color.RGBA{0x2c, 0xa0, 0x2c, 0xff}, color.RGBA{0xd6, 0x27, 0x28, 0xff},
	color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	color.RGBA{0xe3, 0x77, 0xc2, 0xff}, color.RGBA{0x7f, 0x7f, 0x7f, 0xff},
}

// writeChart draws, side by side, the throughput of every target of the
// workload chartWorkload picks and that workload's latency distribution
// (median over rounds of each percentile), and saves them as a PNG.
func writeChart(path string, r *Results) error {
	wl := chartWorkload(r)
	if wl == nil {
		return fmt.Errorf("chart: no workload with figures")
	}
	var names []string
	var rates plotter.Values
	for _, t := range wl.Targets {
		if t.ok() {
			names = append(names, t.Name)
			rates = append(rates, t.rate())
		}
	}
	colour := func(name string) color.Color {
		return palette[indexOfString(names, name)%len(palette)]
	}

	bars := plot.New()
	bars.Title.Text = wl.Title
	bars.Y.Label.Text = wl.Unit
	bars.Y.Min = 0
	for i, n := range names {
		// One bar chart per target, so each keeps its colour.
		v := make(plotter.Values, len(names))
		v[i] = rates[i]
		bc, err := plotter.NewBarChart(v, vg.Points(28))
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		bc.Color = colour(n)
		bc.LineStyle.Width = 0
		bars.Add(bc)
	}
	bars.NominalX(names...)

	lat := plot.New()
	lat.Title.Text = "latency distribution, " + wl.Title
	lat.X.Label.Text = "percentile"
	lat.Y.Label.Text = "ms"
	lat.Y.Min = 0
	lat.Legend.Top, lat.Legend.Left = true, true
	// Percentiles on a "nines" scale: 90, 99, 99.9 equally spaced.
	nines := func(q float64) float64 { return -math.Log10(1 - q/100) }
	var ticks []plot.Tick
	for _, q := range latencyQuantiles {
		ticks = append(ticks, plot.Tick{Value: nines(q), Label: fmt.Sprintf("p%g", q)})
	}
	lat.X.Tick.Marker = plot.ConstantTicks(ticks)
	if wl.Latency {
		for _, t := range wl.Targets {
			if !t.ok() {
				continue
			}
			pts := make(plotter.XYs, len(latencyQuantiles))
			for i, q := range latencyQuantiles {
				pts[i] = plotter.XY{X: nines(q), Y: t.latency(i)}
			}
			l, p, err := plotter.NewLinePoints(pts)
			if err != nil {
				return fmt.Errorf("chart: %w", err)
			}
			l.Color, p.Color = colour(t.Name), colour(t.Name)
			l.Width = vg.Points(1.5)
			lat.Add(l, p)
			lat.Legend.Add(t.Name, l, p)
		}
	}

	const w, h = 12 * vg.Inch, 4.5 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{{bars, lat}}, tiles, dc)
	bars.Draw(canvases[0][0])
	lat.Draw(canvases[0][1])
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("chart: write %s: %w", path, err)
	}
	return f.Close()
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

func indexOfString(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return 0
}
