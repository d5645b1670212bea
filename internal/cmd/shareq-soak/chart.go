package main

import (
	"fmt"
	"image/color"
	"os"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// palette is the colour-blind-safe set (Okabe–Ito) internal/cmd/shareq-bench's
// charts use; a worker slot keeps its colour across its restarts.
var palette = []color.Color{
	color.RGBA{0, 114, 178, 255},   // blue
	color.RGBA{213, 94, 0, 255},    // vermillion
	color.RGBA{0, 158, 115, 255},   // green
	color.RGBA{204, 121, 167, 255}, // purple
	color.RGBA{230, 159, 0, 255},   // orange
	color.RGBA{86, 180, 233, 255},  // sky
	color.RGBA{0, 0, 0, 255},       // black
}

// drawSamples draws the sampler's series into one PNG of six panels:
// RSS, goroutines, heap, file descriptors and TCP connections per worker
// process (one line per process, coloured by slot), and the group's lag.
func drawSamples(path, phase string, samples []sample) error {
	if len(samples) == 0 {
		return nil
	}
	unit, per := "s", 1.0
	if last := samples[len(samples)-1].at; last.Minutes() > 20 {
		unit, per = "min", 60
	}
	xlab := fmt.Sprintf("%s since the phase's workers started", unit)
	panels := []struct {
		title, y string
		v        func(sample) float64
		ok       func(sample) bool
	}{
		{"RSS (VmRSS)", "MiB", func(s sample) float64 { return float64(s.rss) / (1 << 20) }, nil},
		{"goroutines", "", func(s sample) float64 { return float64(s.goroutines) }, func(s sample) bool { return s.goroutines >= 0 }},
		{"Go heap in use", "MiB", func(s sample) float64 { return float64(s.heap) / (1 << 20) }, func(s sample) bool { return s.goroutines >= 0 }},
		{"open file descriptors", "", func(s sample) float64 { return float64(s.fds) }, nil},
		{"established TCP connections", "", func(s sample) float64 { return float64(s.tcp) }, nil},
	}
	var slots []string
	for _, s := range samples {
		if !slices.Contains(slots, s.slot) {
			slots = append(slots, s.slot)
		}
	}
	slices.Sort(slots)
	var plots []*plot.Plot
	for _, pn := range panels {
		p := newPlot(fmt.Sprintf("%s: %s per worker process", phase, pn.title), xlab, pn.y)
		for _, name := range procNames(samples) {
			ss := series(samples, name)
			var pts plotter.XYs
			for _, s := range ss {
				if pn.ok == nil || pn.ok(s) {
					pts = append(pts, plotter.XY{X: s.at.Seconds() / per, Y: pn.v(s)})
				}
			}
			if len(pts) == 0 {
				continue
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color = palette[slices.Index(slots, ss[0].slot)%len(palette)]
			l.Width = vg.Points(1.2)
			p.Add(l)
		}
		p.Y.Min = 0
		plots = append(plots, p)
	}
	// The lag, once per sampling moment.
	lag := newPlot(fmt.Sprintf("%s: share-group lag (records)", phase), xlab, "records")
	var pts plotter.XYs
	var last float64 = -1
	for _, s := range samples {
		if t := s.at.Seconds() / per; s.lag >= 0 && t != last {
			pts = append(pts, plotter.XY{X: t, Y: float64(s.lag)})
			last = t
		}
	}
	if len(pts) > 0 {
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = palette[6]
		l.Width = vg.Points(1.2)
		lag.Add(l)
	}
	lag.Y.Min = 0
	plots = append(plots, lag)
	// A legend of the slots on the first panel.
	for i, sl := range slots {
		l, _ := plotter.NewLine(plotter.XYs{})
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(2)
		plots[0].Legend.Add(sl, l)
	}
	plots[0].Legend.Top, plots[0].Legend.Left = false, true
	return writeGrid(path, plots, 3, 12*vg.Centimeter, 8*vg.Centimeter)
}

// writeGrid draws plots into a PNG, cols to a row.
func writeGrid(path string, plots []*plot.Plot, cols int, w, h vg.Length) error {
	rows := (len(plots) + cols - 1) / cols
	img := vgimg.NewWith(vgimg.UseWH(w*vg.Length(cols), h*vg.Length(rows)), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 6, PadTop: vg.Millimeter * 2,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
		for j := range cols {
			if k := i*cols + j; k < len(plots) {
				grid[i][j] = plots[k]
			}
		}
	}
	canvases := plot.Align(grid, tiles, dc)
	for i := range grid {
		for j, p := range grid[i] {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
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
	p.Add(plotter.NewGrid())
	return p
}
