package main

import (
	"fmt"
	"image/color"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// palette is a colour-blind-safe set (Okabe–Ito).
var palette = []color.Color{
	color.RGBA{0, 114, 178, 255},   // blue
	color.RGBA{213, 94, 0, 255},    // vermillion
	color.RGBA{0, 158, 115, 255},   // green
	color.RGBA{204, 121, 167, 255}, // purple
	color.RGBA{230, 159, 0, 255},   // orange
	color.RGBA{86, 180, 233, 255},  // sky
	color.RGBA{0, 0, 0, 255},       // black
}

// writePanels draws plots side by side into one PNG.
func writePanels(path string, plots []*plot.Plot, w, h vg.Length) error {
	if len(plots) == 0 {
		return nil
	}
	img := vgimg.NewWith(vgimg.UseWH(w*vg.Length(len(plots)), h), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Millimeter * 6, PadTop: vg.Millimeter * 2,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := plot.Align([][]*plot.Plot{plots}, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p
}

// holPlot draws jobs completed per bucket against time for each run.
func holPlot(backend string, runs []holRun) (*plot.Plot, error) {
	p := newPlot(fmt.Sprintf("Head-of-line (%s): 2,000×20 ms + 5×4 s jobs, 24 workers", backend),
		"seconds since the jobs were produced", fmt.Sprintf("jobs completed per %v", holBucket))
	for i, r := range runs {
		bs := buckets(r.Times, holBucket)
		pts := make(plotter.XYs, 0, len(bs)+1)
		for k, n := range bs {
			pts = append(pts, plotter.XY{X: (float64(k) + 0.5) * holBucket.Seconds(), Y: float64(n)})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(1.6)
		if i == len(runs)-1 && len(runs) > 1 { // the ideal schedule, last
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s: %.1f s", r.Variant, r.Makespan.Seconds()), l)
	}
	p.Y.Min = 0
	p.Y.Max *= 1.25 // room for the legend
	p.Y.Tick.Marker = intTicks
	return p, nil
}

// intTicks is the default ticker with whole-number labels.
var intTicks = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for _, t := range (plot.DefaultTicks{}).Ticks(lo, hi) {
		if t.Label != "" {
			t.Label = strconv.FormatFloat(t.Value, 'f', 0, 64)
		}
		ts = append(ts, t)
	}
	return ts
})

// sweepPlot draws shareq's jobs/s against its Concurrency, with the raw
// loops as horizontal references. Both axes are logarithmic.
func sweepPlot(backend string, o overheadResult) (*plot.Plot, error) {
	p := newPlot(fmt.Sprintf("No-op throughput (%s): shareq by Concurrency vs raw franz-go", backend),
		"Concurrency (handler slots)", "jobs/s")
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker = plot.ConstantTicks(concurrencyTicks())
	p.Y.Tick.Marker = plot.ConstantTicks(decadeTicks(100, 10_000_000))
	lo, hi := float64(overheadConcurrency[0]), float64(overheadConcurrency[len(overheadConcurrency)-1])
	var pts plotter.XYs
	for _, s := range o.Sweep {
		if s.Rate > 0 {
			pts = append(pts, plotter.XY{X: float64(s.Concurrency), Y: s.Rate})
		}
	}
	if len(pts) > 0 {
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		l.Color, sc.Color = palette[0], palette[0]
		l.Width = vg.Points(1.6)
		sc.Shape = draw.CircleGlyph{}
		p.Add(l, sc)
		p.Legend.Add("shareq worker", l, sc)
	}
	for i, ref := range []struct {
		name string
		rate float64
	}{{"raw share loop (1 client, batch 500, prefetch)", o.RawShare}, {"raw consumer group (no per-record ack)", o.RawGroup}} {
		if ref.rate <= 0 {
			continue
		}
		l, err := plotter.NewLine(plotter.XYs{{X: lo, Y: ref.rate}, {X: hi, Y: ref.rate}})
		if err != nil {
			return nil, err
		}
		l.Color = palette[(1+i)%len(palette)]
		l.Width = vg.Points(1.4)
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s: %.0f/s", ref.name, ref.rate), l)
	}
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.YOffs = vg.Points(10)
	return p, nil
}

// decadeTicks labels the powers of ten from lo to hi: 100, 1k, 10k…
func decadeTicks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for v := lo; v <= hi; v *= 10 {
		label := strconv.FormatFloat(v, 'f', 0, 64)
		switch {
		case v >= 1e6:
			label = strconv.FormatFloat(v/1e6, 'f', 0, 64) + "M"
		case v >= 1e3:
			label = strconv.FormatFloat(v/1e3, 'f', 0, 64) + "k"
		}
		ts = append(ts, plot.Tick{Value: v, Label: label})
	}
	return ts
}

// concurrencyTicks labels the overhead scenario's Concurrency points.
func concurrencyTicks() []plot.Tick {
	ts := make([]plot.Tick, len(overheadConcurrency))
	for i, c := range overheadConcurrency {
		ts[i] = plot.Tick{Value: float64(c), Label: strconv.Itoa(c)}
	}
	return ts
}

// eosPlot draws jobs/s of shareq with pgstore and of River, one group of
// bars per backend.
func eosPlot(results map[string]eosResult, backends []string) (*plot.Plot, error) {
	slots := 0
	for _, r := range results {
		slots = r.Concurrency
	}
	p := newPlot(fmt.Sprintf("Exactly-once side effects: one INSERT per job, %d slots, same Postgres", slots), "", "jobs/s")
	var names []string
	type series struct {
		label string
		vals  plotter.Values
	}
	var ss []*series
	get := func(i int, label string) *series {
		for len(ss) <= i {
			ss = append(ss, &series{})
		}
		ss[i].label = label
		return ss[i]
	}
	for _, b := range backends {
		r, ok := results[b]
		if !ok {
			continue
		}
		names = append(names, b)
		s := get(0, fmt.Sprintf("shareq + pgstore, Concurrency %d", r.Concurrency))
		s.vals = append(s.vals, r.Shareq.Rate)
		s = get(1, fmt.Sprintf("River + JobCompleteTx, MaxWorkers %d", r.Concurrency))
		s.vals = append(s.vals, r.River)
	}
	if len(names) == 0 {
		return nil, nil
	}
	w := vg.Points(22)
	for i, s := range ss {
		if len(s.vals) != len(names) {
			continue
		}
		bc, err := plotter.NewBarChart(s.vals, w)
		if err != nil {
			return nil, err
		}
		bc.Color = palette[i%len(palette)]
		bc.LineStyle.Width = 0
		bc.Offset = w * vg.Length(2*i-len(ss)+1) / 2
		p.Add(bc)
		p.Legend.Add(s.label, bc)
	}
	p.NominalX(names...)
	p.Y.Min = 0
	p.Y.Max *= 1.3 // room for the legend
	p.Y.Tick.Marker = intTicks
	return p, nil
}
