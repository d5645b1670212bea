package console

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var chartT0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// svgNode is an element of a rendered chart, parsed back with
// encoding/xml: the tests check the structure, not the bytes.
type svgNode struct {
	XMLName  xml.Name
	Attrs    []xml.Attr `xml:",any,attr"`
	Text     string     `xml:",chardata"`
	Children []svgNode  `xml:",any"`
}

func (n *svgNode) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// all returns the elements named local under n, depth first.
func (n *svgNode) all(local string) []*svgNode {
	var out []*svgNode
	for i := range n.Children {
		c := &n.Children[i]
		if c.XMLName.Local == local {
			out = append(out, c)
		}
		out = append(out, c.all(local)...)
	}
	return out
}

// parseChart renders c and parses it as XML: a chart that is not
// well-formed (an unescaped name) fails here.
func parseChart(t *testing.T, c *chart) *svgNode {
	t.Helper()
	out := string(c.html())
	var root svgNode
	d := xml.NewDecoder(strings.NewReader(out))
	d.Strict = true
	if err := d.Decode(&root); err != nil {
		t.Fatalf("the chart is not well-formed XML: %v\n%s", err, out)
	}
	if _, err := d.Token(); err != io.EOF {
		t.Fatalf("more after the figure: %v", err)
	}
	return &root
}

// seriesGroups returns the chart's series groups by name.
func seriesGroups(root *svgNode) map[string]*svgNode {
	out := map[string]*svgNode{}
	for _, g := range root.all("g") {
		if g.attr("class") == "series" {
			out[g.attr("data-series")] = g
		}
	}
	return out
}

var pathPoint = regexp.MustCompile(`([ML])([0-9.]+),([0-9.]+)`)

// A line chart draws a path per series, with its points scaled into the
// plot: time across from From to To, values up from 0 to the rounded
// maximum.
func TestChartLinesScalePoints(t *testing.T) {
	t.Parallel()
	c := &chart{
		ID: "lag", Title: "Lag", From: chartT0, To: chartT0.Add(time.Hour), Step: 30 * time.Minute, Integer: true,
		Series: []series{
			{Name: "a", Color: colorBlue, Points: []point{{chartT0, 0}, {chartT0.Add(30 * time.Minute), 35}, {chartT0.Add(40 * time.Minute), 70}}},
			{Name: "b", Color: colorRed, Points: []point{{chartT0.Add(time.Hour), 10}}},
		},
	}
	root := parseChart(t, c)
	svg := root.all("svg")[0]
	if got := svg.attr("data-points"); got != "4" {
		t.Errorf("data-points %q, want 4", got)
	}
	if got := svg.attr("data-ymax"); got != "80" {
		t.Errorf("data-ymax %q, want 80 (70 rounded up to 8 × 10)", got)
	}
	if got := svg.attr("data-last"); got != "10" {
		t.Errorf("data-last %q, want 10 (the newest point)", got)
	}
	gs := seriesGroups(root)
	if len(gs) != 2 {
		t.Fatalf("%d series, want 2", len(gs))
	}
	d := gs["a"].all("path")[0].attr("d")
	ms := pathPoint.FindAllStringSubmatch(d, -1)
	if len(ms) != 3 {
		t.Fatalf("path %q: %d points, want 3", d, len(ms))
	}
	want := []struct {
		cmd  string
		x, y float64
	}{
		{"M", plotLeft, plotBottom},
		// 30 minutes is half way across; 35 of 80 is 7/16 up.
		{"L", plotLeft + (plotRight-plotLeft)/2.0, plotBottom - 35.0/80*(plotBottom-plotTop)},
		{"L", plotLeft + (plotRight-plotLeft)*2/3.0, plotBottom - 70.0/80*(plotBottom-plotTop)},
	}
	for i, m := range ms {
		x, _ := strconv.ParseFloat(m[2], 64)
		y, _ := strconv.ParseFloat(m[3], 64)
		if m[1] != want[i].cmd || math.Abs(x-want[i].x) > 0.06 || math.Abs(y-want[i].y) > 0.06 {
			t.Errorf("point %d: %s%v,%v, want %s%.1f,%.1f", i, m[1], x, y, want[i].cmd, want[i].x, want[i].y)
		}
	}
	if n := len(gs["b"].all("circle")); n != 1 {
		t.Errorf("a lone point: %d circles, want 1 (a path of one point draws nothing)", n)
	}
	if got := gs["a"].all("title")[0].Text; got != "a" {
		t.Errorf("series title %q, want a", got)
	}
	legend := ""
	for _, g := range root.all("g") {
		if g.attr("class") == "legend" {
			for _, tx := range g.all("text") {
				legend += tx.Text + ";"
			}
		}
	}
	if legend != "a;b;" {
		t.Errorf("legend %q, want a;b;", legend)
	}
}

// Samples missing for more than a step and a half break the line: the
// chart shows the gap instead of a straight line across it.
func TestChartLinesBreakAtGaps(t *testing.T) {
	t.Parallel()
	step := 10 * time.Second
	pts := []point{{chartT0, 1}, {chartT0.Add(step), 2}, {chartT0.Add(5 * step), 3}, {chartT0.Add(6 * step), 4}}
	c := &chart{ID: "g", Title: "G", From: chartT0, To: chartT0.Add(time.Minute), Step: step, Series: []series{{Name: "s", Color: colorBlue, Points: pts}}}
	d := seriesGroups(parseChart(t, c))["s"].all("path")[0].attr("d")
	var cmds string
	for _, m := range pathPoint.FindAllStringSubmatch(d, -1) {
		cmds += m[1]
	}
	if cmds != "MLML" {
		t.Errorf("path %q: commands %s, want MLML", d, cmds)
	}
}

// Bars stack the series per step, the first at the bottom, each bar a
// step wide less a gap; the y axis reaches the largest stack.
func TestChartBarsStack(t *testing.T) {
	t.Parallel()
	c := &chart{
		ID: "runs", Title: "Runs", From: chartT0, To: chartT0.Add(10 * time.Minute), Bars: true, Step: time.Minute, Integer: true,
		Series: []series{
			{Name: "done", Color: colorGreen, Points: []point{{chartT0, 3}, {chartT0.Add(9 * time.Minute), 1}}},
			{Name: "parked", Color: colorRed, Points: []point{{chartT0, 1}}},
		},
	}
	root := parseChart(t, c)
	if got := root.all("svg")[0].attr("data-ymax"); got != "4" {
		t.Errorf("data-ymax %q, want 4 (the stack of 3 and 1)", got)
	}
	if got := root.all("svg")[0].attr("data-last"); got != "1" {
		t.Errorf("data-last %q, want 1 (the newest step's sum)", got)
	}
	gs := seriesGroups(root)
	done, parked := gs["done"].all("rect"), gs["parked"].all("rect")
	if len(done) != 2 || len(parked) != 1 {
		t.Fatalf("%d done and %d parked bars, want 2 and 1", len(done), len(parked))
	}
	num := func(n *svgNode, a string) float64 { v, _ := strconv.ParseFloat(n.attr(a), 64); return v }
	full := float64(plotBottom - plotTop)
	if h := num(done[0], "height"); math.Abs(h-full*3/4) > 0.1 {
		t.Errorf("done bar height %v, want %v (3 of 4)", h, full*3/4)
	}
	if top, bottom := num(parked[0], "y")+num(parked[0], "height"), num(done[0], "y"); math.Abs(top-bottom) > 0.15 {
		t.Errorf("parked bar ends at %v, the done bar starts at %v: not stacked", top, bottom)
	}
	if w := num(done[0], "width"); w <= 0 || w > (plotRight-plotLeft)/10.0 {
		t.Errorf("bar width %v, want a tenth of the plot less a gap", w)
	}
	if x := num(done[1], "x"); x < plotLeft+(plotRight-plotLeft)*0.9 {
		t.Errorf("the 10th minute's bar at x %v, want in the last tenth", x)
	}
}

// Every name and text is escaped: a topic named with markup is text in
// the chart, not elements.
func TestChartEscapesNames(t *testing.T) {
	t.Parallel()
	evil := `jobs"><script>alert(1)</script>&<b>`
	c := &chart{
		ID: `x"y`, Title: "Runs of " + evil, From: chartT0, To: chartT0.Add(time.Hour), Step: time.Minute,
		Series: []series{{Name: evil, Color: `red" onload="x`, Points: []point{{chartT0, 1}}}},
		Note:   evil,
	}
	root := parseChart(t, c)
	if n := len(root.all("script")) + len(root.all("b")); n != 0 {
		t.Fatalf("%d script or b elements: a name was not escaped", n)
	}
	if got := root.all("figcaption")[0].Text; got != c.Title {
		t.Errorf("caption %q, want %q", got, c.Title)
	}
	if got := seriesGroups(root)[evil]; got == nil {
		t.Errorf("no series named %q", evil)
	}
	if title := root.all("title")[0].Text; !strings.HasPrefix(title, c.Title+", 2026-05-01 12:00 to 2026-05-01 13:00 UTC") {
		t.Errorf("svg title %q, want the caption and the range in UTC", title)
	}
}

// A chart without points says why, and still draws its axes.
func TestChartEmptyState(t *testing.T) {
	t.Parallel()
	c := &chart{ID: "e", Title: "E", From: chartT0, To: chartT0.Add(24 * time.Hour), Step: time.Minute, Integer: true, Empty: "No samples yet.",
		Series: []series{{Name: "lag", Color: colorBlue}}}
	root := parseChart(t, c)
	var empty string
	for _, tx := range root.all("text") {
		if tx.attr("class") == "empty" {
			empty = tx.Text
		}
	}
	if empty != "No samples yet." {
		t.Errorf("empty text %q", empty)
	}
	if n := len(seriesGroups(root)); n != 0 {
		t.Errorf("%d series drawn, want none", n)
	}
	var labels []string
	for _, g := range root.all("g") {
		if g.attr("class") == "axes" {
			for _, tx := range g.all("text") {
				labels = append(labels, tx.Text)
			}
		}
	}
	// 0, 1 and 2 up the side; every 3 hours across a day, in UTC.
	want := "0 1 2 12:00 15:00 18:00 21:00 00:00 03:00 06:00 09:00 12:00 UTC"
	if got := strings.Join(labels, " "); got != want {
		t.Errorf("axis labels %q, want %q", got, want)
	}
}

func TestNiceCeil(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v       float64
		integer bool
		want    float64
	}{
		{0, false, 1}, {0, true, 2}, {1, true, 2}, {0.3, false, 0.4}, {3, false, 4}, {4.01, false, 6},
		{7, false, 8}, {9, false, 10}, {10, false, 10}, {11, false, 20}, {1234, false, 2000}, {95000, false, 100000},
		{math.NaN(), false, 1},
	} {
		if got := niceCeil(tc.v, tc.integer); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("niceCeil(%v, %v) = %v, want %v", tc.v, tc.integer, got, tc.want)
		}
	}
}

func TestFormats(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{0: "0", 7: "7", 2.5: "2.5", 1500: "1.5k", 20000: "20k", 1_250_000: "1.3M"} {
		if got := fmtCount(v); got != want {
			t.Errorf("fmtCount(%v) = %q, want %q", v, got, want)
		}
	}
	for v, want := range map[float64]string{0: "0s", 45: "45s", 150: "2.5m", 7200: "2h", 9000: "2.5h"} {
		if got := fmtAge(v); got != want {
			t.Errorf("fmtAge(%v) = %q, want %q", v, got, want)
		}
	}
}

// BenchmarkChartRender draws the charts a page holds at their largest:
// a day of samples at a minute (1,440 points) as a line, and a day of
// job counts in 10-minute steps (144 steps × 3 outcomes) as bars.
//
//	go test ./console -run '^$' -bench ChartRender -benchmem
func BenchmarkChartRender(b *testing.B) {
	line := &chart{ID: "lag", Title: "Lag", From: chartT0, To: chartT0.Add(24 * time.Hour), Step: time.Minute, Integer: true,
		Series: []series{{Name: "lag", Color: colorBlue}}}
	for i := range 1440 {
		line.Series[0].Points = append(line.Series[0].Points, point{chartT0.Add(time.Duration(i) * time.Minute), float64(i % 97 * 13)})
	}
	bars := &chart{ID: "runs", Title: "Runs", From: chartT0, To: chartT0.Add(24 * time.Hour), Bars: true, Step: 10 * time.Minute, Integer: true,
		Series: []series{{Name: "done", Color: colorGreen}, {Name: "failed", Color: colorAmber}, {Name: "parked", Color: colorRed}}}
	for i := range 144 {
		for s := range bars.Series {
			bars.Series[s].Points = append(bars.Series[s].Points, point{chartT0.Add(time.Duration(i) * 10 * time.Minute), float64(i*(s+1)%50 + 1)})
		}
	}
	for _, bc := range []struct {
		name string
		c    *chart
	}{{"line-1440", line}, {"bars-144x3", bars}} {
		b.Run(bc.name, func(b *testing.B) {
			var buf bytes.Buffer
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				bc.c.svg(&buf)
			}
			b.ReportMetric(float64(buf.Len()), "bytes/chart")
		})
	}
}
