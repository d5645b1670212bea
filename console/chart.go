package console

import (
	"bytes"
	"html"
	"html/template"
	"math"
	"strconv"
	"time"
)

// The charts are drawn here, on the server, as inline SVG: the console
// runs no script (its Content-Security-Policy allows none), and an SVG
// element needs no request of its own. Colours are presentation
// attributes, not style attributes, which that policy would block.

// chart is one chart: series over a time range, drawn by svg as lines
// (values sampled at points in time) or stacked bars (counts per step).
type chart struct {
	ID       string // the figure's id, for links and tests
	Title    string // the caption and the SVG's accessible name
	From, To time.Time
	Bars     bool          // stacked bars, each Step wide; else lines
	Step     time.Duration // the time a point covers: a bar's width, the longest gap a line bridges
	Integer  bool          // the values are counts: the y axis reaches at least 2, so its labels are whole
	Format   func(float64) string
	Series   []series
	Empty    string // shown in the plot when no series has a point
	Note     string // a line under the chart, "" for none
}

// series is one named line or one layer of the bars.
type series struct {
	Name   string
	Color  string // a CSS colour
	Points []point
}

// point is a value at a time (a bar's start).
type point struct {
	At time.Time
	V  float64
}

// The chart's geometry, in SVG user units; the SVG scales to its box.
const (
	chartW      = 720
	chartH      = 220
	plotLeft    = 58
	plotRight   = chartW - 20
	plotTop     = 30
	plotBottom  = chartH - 26
	chartLegend = 14 // the legend's baseline
)

// Colours of the series: readable on white, told apart without hue
// alone by their legend's order and names.
const (
	colorBlue  = "#2458c6"
	colorGreen = "#1f7a3d"
	colorAmber = "#b87400"
	colorRed   = "#b3261e"
)

// html returns the chart as a figure holding its SVG.
func (c *chart) html() template.HTML {
	var b bytes.Buffer
	b.Grow(4096)
	c.svg(&b)
	return template.HTML(b.String()) // every text in it went through esc
}

// svg writes the chart as a <figure> with a caption, the SVG and the note.
func (c *chart) svg(b *bytes.Buffer) {
	n, last := c.pointCount()
	ymax := niceCeil(c.maxValue(), c.Integer)
	esc := html.EscapeString
	b.WriteString(`<figure class="chart" id="`)
	b.WriteString(esc(c.ID))
	b.WriteString(`"><figcaption>`)
	b.WriteString(esc(c.Title))
	b.WriteString(`</figcaption><svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 `)
	b.WriteString(strconv.Itoa(chartW) + " " + strconv.Itoa(chartH))
	b.WriteString(`" role="img" aria-labelledby="`)
	b.WriteString(esc(c.ID))
	b.WriteString(`-title" data-points="`)
	b.WriteString(strconv.Itoa(n))
	b.WriteString(`" data-last="`)
	b.WriteString(esc(last))
	b.WriteString(`" data-ymax="`)
	b.WriteString(esc(c.format(ymax)))
	b.WriteString(`"><title id="`)
	b.WriteString(esc(c.ID))
	b.WriteString(`-title">`)
	b.WriteString(esc(c.Title))
	b.WriteString(", ")
	b.WriteString(esc(fmtClock(c.From)))
	b.WriteString(" to ")
	b.WriteString(esc(fmtClock(c.To)))
	b.WriteString(" UTC")
	if n > 0 {
		b.WriteString("; latest ")
		b.WriteString(esc(last))
	}
	b.WriteString("</title>")
	c.axes(b, ymax)
	c.legend(b)
	if n == 0 {
		b.WriteString(`<text class="empty" x="`)
		b.WriteString(strconv.Itoa((plotLeft + plotRight) / 2))
		b.WriteString(`" y="`)
		b.WriteString(strconv.Itoa((plotTop + plotBottom) / 2))
		b.WriteString(`" text-anchor="middle" fill="#5d6675" font-size="13">`)
		b.WriteString(esc(c.Empty))
		b.WriteString("</text>")
	} else if c.Bars {
		c.bars(b, ymax)
	} else {
		c.lines(b, ymax)
	}
	b.WriteString("</svg>")
	if c.Note != "" {
		b.WriteString(`<p class="note">`)
		b.WriteString(esc(c.Note))
		b.WriteString("</p>")
	}
	b.WriteString("</figure>")
}

// pointCount returns the points of all series and the latest value, as
// the y axis labels it ("" when there is none). For bars the latest is
// the newest step's stacked sum.
func (c *chart) pointCount() (n int, last string) {
	var at time.Time
	var v float64
	for _, s := range c.Series {
		n += len(s.Points)
		for _, p := range s.Points {
			switch {
			case p.At.After(at):
				at, v = p.At, p.V
			case p.At.Equal(at) && c.Bars:
				v += p.V
			}
		}
	}
	if n == 0 {
		return 0, ""
	}
	return n, c.format(v)
}

// maxValue is the largest value the plot must show: a point's, or for
// bars a step's stacked sum.
func (c *chart) maxValue() float64 {
	var m float64
	if !c.Bars {
		for _, s := range c.Series {
			for _, p := range s.Points {
				m = max(m, p.V)
			}
		}
		return m
	}
	sums := map[int64]float64{}
	for _, s := range c.Series {
		for _, p := range s.Points {
			k := p.At.UnixNano()
			sums[k] += p.V
			m = max(m, sums[k])
		}
	}
	return m
}

// niceCeil rounds v up to 1, 2, 4, 6 or 8 times a power of ten, so that
// the axis's middle label is round too; integer axes reach at least 2.
func niceCeil(v float64, integer bool) float64 {
	if integer {
		v = max(v, 2)
	}
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	exp := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 4, 6, 8, 10} {
		if m*exp >= v*(1-1e-12) {
			return m * exp
		}
	}
	return 10 * exp
}

func (c *chart) format(v float64) string {
	if c.Format != nil {
		return c.Format(v)
	}
	return fmtCount(v)
}

// x maps a time to the plot's x coordinate.
func (c *chart) x(t time.Time) float64 {
	span := c.To.Sub(c.From)
	if span <= 0 {
		return plotLeft
	}
	return plotLeft + float64(t.Sub(c.From))/float64(span)*(plotRight-plotLeft)
}

// y maps a value to the plot's y coordinate.
func y(v, ymax float64) float64 {
	return plotBottom - v/ymax*(plotBottom-plotTop)
}

// axes writes the grid lines with the y labels (0, half, max) and the
// time labels under the plot.
func (c *chart) axes(b *bytes.Buffer, ymax float64) {
	var scratch []byte
	b.WriteString(`<g class="axes" font-size="11" fill="#5d6675">`)
	for _, f := range []float64{0, 0.5, 1} {
		yy := y(ymax*f, ymax)
		b.WriteString(`<line x1="` + strconv.Itoa(plotLeft) + `" x2="` + strconv.Itoa(plotRight) + `" y1="`)
		b.Write(appendCoord(scratch[:0], yy))
		b.WriteString(`" y2="`)
		b.Write(appendCoord(scratch[:0], yy))
		if f == 0 {
			b.WriteString(`" stroke="#9aa3b0"/>`)
		} else {
			b.WriteString(`" stroke="#e3e6eb"/>`)
		}
		b.WriteString(`<text x="` + strconv.Itoa(plotLeft-6) + `" y="`)
		b.Write(appendCoord(scratch[:0], yy+4))
		b.WriteString(`" text-anchor="end">`)
		b.WriteString(html.EscapeString(c.format(ymax * f)))
		b.WriteString("</text>")
	}
	every := timeTick(c.To.Sub(c.From))
	for t := c.From.UTC().Truncate(every); !t.After(c.To); t = t.Add(every) {
		if t.Before(c.From) {
			continue
		}
		xx := c.x(t)
		b.WriteString(`<line y1="` + strconv.Itoa(plotBottom) + `" y2="` + strconv.Itoa(plotBottom+4) + `" x1="`)
		b.Write(appendCoord(scratch[:0], xx))
		b.WriteString(`" x2="`)
		b.Write(appendCoord(scratch[:0], xx))
		b.WriteString(`" stroke="#9aa3b0"/>`)
		label := t.Format("15:04")
		if every < time.Minute {
			label = t.Format("15:04:05")
		}
		if xx+3.4*float64(len(label)) > chartW { // it would be cut at the edge
			continue
		}
		b.WriteString(`<text y="` + strconv.Itoa(chartH-8) + `" text-anchor="middle" x="`)
		b.Write(appendCoord(scratch[:0], xx))
		b.WriteString(`">`)
		b.WriteString(label)
		b.WriteString("</text>")
	}
	b.WriteString(`<text x="` + strconv.Itoa(plotRight) + `" y="` + strconv.Itoa(chartLegend) + `" text-anchor="end">UTC</text></g>`)
}

// timeTick is the step of the time labels for a span: at most 8
// labels; 10 minutes for an hour, 3 hours for a day.
func timeTick(span time.Duration) time.Duration {
	for _, d := range []time.Duration{10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 10 * time.Minute, 30 * time.Minute, time.Hour, 3 * time.Hour, 6 * time.Hour} {
		if span/d <= 8 {
			return d
		}
	}
	return 24 * time.Hour
}

// legend writes a swatch and the name of each series, left to right
// above the plot.
func (c *chart) legend(b *bytes.Buffer) {
	b.WriteString(`<g class="legend" font-size="12" fill="#1d2330">`)
	x := plotLeft
	for _, s := range c.Series {
		b.WriteString(`<rect x="` + strconv.Itoa(x) + `" y="` + strconv.Itoa(chartLegend-9) + `" width="10" height="10" fill="`)
		b.WriteString(html.EscapeString(s.Color))
		b.WriteString(`"/><text x="` + strconv.Itoa(x+14) + `" y="` + strconv.Itoa(chartLegend) + `">`)
		b.WriteString(html.EscapeString(s.Name))
		b.WriteString("</text>")
		x += 14 + 13*len([]rune(s.Name))/2 + 16
	}
	b.WriteString("</g>")
}

// lines writes each series as a path, broken where samples are missing
// (two points more than 1.5 steps apart).
func (c *chart) lines(b *bytes.Buffer, ymax float64) {
	var scratch []byte
	for _, s := range c.Series {
		b.WriteString(`<g class="series" data-series="`)
		b.WriteString(html.EscapeString(s.Name))
		b.WriteString(`" data-points="` + strconv.Itoa(len(s.Points)) + `"><title>`)
		b.WriteString(html.EscapeString(s.Name))
		b.WriteString(`</title><path fill="none" stroke-width="1.6" stroke-linejoin="round" stroke="`)
		b.WriteString(html.EscapeString(s.Color))
		b.WriteString(`" d="`)
		var prev time.Time
		for i, p := range s.Points {
			if i == 0 || p.At.Sub(prev) > c.Step*3/2 {
				b.WriteByte('M')
			} else {
				b.WriteByte('L')
			}
			prev = p.At
			scratch = appendCoord(scratch[:0], c.x(p.At))
			scratch = append(scratch, ',')
			scratch = appendCoord(scratch, y(p.V, ymax))
			b.Write(scratch)
		}
		b.WriteString(`"/>`)
		if len(s.Points) == 1 { // a lone point draws no line: mark it
			p := s.Points[0]
			b.WriteString(`<circle r="2.5" fill="`)
			b.WriteString(html.EscapeString(s.Color))
			b.WriteString(`" cx="`)
			b.Write(appendCoord(scratch[:0], c.x(p.At)))
			b.WriteString(`" cy="`)
			b.Write(appendCoord(scratch[:0], y(p.V, ymax)))
			b.WriteString(`"/>`)
		}
		b.WriteString("</g>")
	}
}

// bars writes the series as stacked bars, the first series at the
// bottom; each bar is Step wide less a gap.
func (c *chart) bars(b *bytes.Buffer, ymax float64) {
	var scratch []byte
	base := map[int64]float64{}
	width := c.x(c.From.Add(c.Step)) - c.x(c.From)
	gap := min(1, width/4)
	for _, s := range c.Series {
		b.WriteString(`<g class="series" data-series="`)
		b.WriteString(html.EscapeString(s.Name))
		b.WriteString(`" data-points="` + strconv.Itoa(len(s.Points)) + `" fill="`)
		b.WriteString(html.EscapeString(s.Color))
		b.WriteString(`"><title>`)
		b.WriteString(html.EscapeString(s.Name))
		b.WriteString("</title>")
		for _, p := range s.Points {
			k := p.At.UnixNano()
			top, bottom := y(base[k]+p.V, ymax), y(base[k], ymax)
			base[k] += p.V
			scratch = append(scratch[:0], `<rect x="`...)
			scratch = appendCoord(scratch, c.x(p.At)+gap/2)
			scratch = append(scratch, `" y="`...)
			scratch = appendCoord(scratch, top)
			scratch = append(scratch, `" width="`...)
			scratch = appendCoord(scratch, width-gap)
			scratch = append(scratch, `" height="`...)
			scratch = appendCoord(scratch, bottom-top)
			scratch = append(scratch, `"/>`...)
			b.Write(scratch)
		}
		b.WriteString("</g>")
	}
}

// appendCoord appends v rounded to a tenth, without a trailing ".0"
// (integer arithmetic: a day's line has thousands of coordinates).
func appendCoord(dst []byte, v float64) []byte {
	tenths := int64(math.Round(v * 10))
	if tenths < 0 {
		dst, tenths = append(dst, '-'), -tenths
	}
	dst = strconv.AppendInt(dst, tenths/10, 10)
	if d := tenths % 10; d != 0 {
		dst = append(dst, '.', byte('0'+d))
	}
	return dst
}

// fmtClock is t's UTC time of day, with the date when it is not today's
// (for the title).
func fmtClock(t time.Time) string {
	return t.UTC().Format("2006-01-02 15:04")
}

// fmtCount writes a count short: 950, 1.2k, 3.4M.
func fmtCount(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return strconv.FormatFloat(math.Round(v/1e5)/10, 'f', -1, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(math.Round(v/1e3), 'f', -1, 64) + "k"
	case a >= 1e3:
		return strconv.FormatFloat(math.Round(v/100)/10, 'f', -1, 64) + "k"
	case a == math.Trunc(a):
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// fmtAge writes seconds as a short duration: 45s, 12m, 3.5h.
func fmtAge(sec float64) string {
	switch {
	case sec >= 2*3600:
		return strconv.FormatFloat(math.Round(sec/360)/10, 'f', -1, 64) + "h"
	case sec >= 120:
		return strconv.FormatFloat(math.Round(sec/6)/10, 'f', -1, 64) + "m"
	}
	return strconv.FormatFloat(math.Round(sec*10)/10, 'f', -1, 64) + "s"
}
