package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// A row is one figure of a run. Ratios compare figures of the same run
// and backend only.
type row struct {
	Backend  string // "kfake" or "kafka"
	Scenario string // "hol", "overhead", "eos", "renew", "env"
	Variant  string // what ran: "classic", "shareq concurrency=24", "ideal"…
	Metric   string // "makespan", "jobs_per_s", "vs_ideal"…
	Value    float64
	Unit     string // "s", "jobs/s", "x", "count"…
	Note     string
}

var csvHeader = []string{"backend", "scenario", "variant", "metric", "value", "unit", "note"}

// writeCSV writes rows with a header line.
func writeCSV(w io.Writer, rows []row) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	for _, r := range rows {
		rec := []string{r.Backend, r.Scenario, r.Variant, r.Metric, formatValue(r.Value), r.Unit, r.Note}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// readCSV reads what writeCSV wrote.
func readCSV(r io.Reader) ([]row, error) {
	recs, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 || strings.Join(recs[0], ",") != strings.Join(csvHeader, ",") {
		return nil, fmt.Errorf("results csv: missing or wrong header")
	}
	out := make([]row, 0, len(recs)-1)
	for i, rec := range recs[1:] {
		if len(rec) != len(csvHeader) {
			return nil, fmt.Errorf("results csv: line %d: %d fields, want %d", i+2, len(rec), len(csvHeader))
		}
		v, err := strconv.ParseFloat(rec[4], 64)
		if err != nil {
			return nil, fmt.Errorf("results csv: line %d: value: %w", i+2, err)
		}
		out = append(out, row{rec[0], rec[1], rec[2], rec[3], v, rec[5], rec[6]})
	}
	return out, nil
}

// formatValue prints v with enough digits for the CSV, without exponent
// noise for whole numbers.
func formatValue(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// writeTable prints rows grouped by backend and scenario, groups in the
// order of their first row, rows in the order they were recorded.
func writeTable(w io.Writer, rows []row) error {
	rank := map[string]int{}
	for _, r := range rows {
		if _, ok := rank[r.Backend+"/"+r.Scenario]; !ok {
			rank[r.Backend+"/"+r.Scenario] = len(rank)
		}
	}
	rows = slices.Clone(rows)
	slices.SortStableFunc(rows, func(a, b row) int {
		return rank[a.Backend+"/"+a.Scenario] - rank[b.Backend+"/"+b.Scenario]
	})
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	last := ""
	for _, r := range rows {
		if r.Scenario == "env" {
			continue
		}
		if h := r.Backend + "/" + r.Scenario; h != last {
			if last != "" {
				fmt.Fprintln(tw)
			}
			fmt.Fprintf(tw, "== %s: %s\t\t\t\n", r.Backend, r.Scenario)
			last = h
		}
		note := ""
		if r.Note != "" {
			note = "  (" + r.Note + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s %s%s\n", r.Variant, r.Metric, humanValue(r.Value), r.Unit, note)
	}
	return tw.Flush()
}

// writeMarkdown prints the rows as one Markdown table per backend and
// scenario, for BENCHMARKS.md, preceded by the env rows as a list.
func writeMarkdown(w io.Writer, rows []row) error {
	var b strings.Builder
	for _, r := range rows {
		if r.Scenario == "env" {
			fmt.Fprintf(&b, "- %s %s %s: %s %s %s\n", r.Backend, r.Variant, r.Metric, humanValue(r.Value), r.Unit, r.Note)
		}
	}
	rank := map[string]int{}
	var order []string
	for _, r := range rows {
		k := r.Backend + ": " + r.Scenario
		if _, ok := rank[k]; !ok && r.Scenario != "env" {
			rank[k] = len(order)
			order = append(order, k)
		}
	}
	for _, k := range order {
		fmt.Fprintf(&b, "\n**%s**\n\n| variant | metric | value | note |\n|---|---|---|---|\n", k)
		for _, r := range rows {
			if r.Backend+": "+r.Scenario != k {
				continue
			}
			cell := strings.NewReplacer("|", "\\|", "\n", " ").Replace
			fmt.Fprintf(&b, "| %s | %s | %s %s | %s |\n", cell(r.Variant), r.Metric, humanValue(r.Value), r.Unit, cell(r.Note))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// humanValue prints v with three significant digits, or as an integer
// when large.
func humanValue(v float64) string {
	switch a := abs(v); {
	case a >= 1000 || a == float64(int64(a)) && a >= 1:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

// seriesPoint is one bucket of a throughput-over-time series.
type seriesPoint struct {
	Backend string
	Variant string
	Start   time.Duration // bucket start, from the run's t0
	Count   int
}

// writeSeriesCSV writes throughput series, one line per bucket.
func writeSeriesCSV(w io.Writer, pts []seriesPoint) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"backend", "variant", "bucket_start_s", "completed"}); err != nil {
		return err
	}
	for _, p := range pts {
		if err := cw.Write([]string{p.Backend, p.Variant, formatValue(p.Start.Seconds()), strconv.Itoa(p.Count)}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
