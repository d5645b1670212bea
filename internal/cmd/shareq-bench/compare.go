package main

// The compare subcommand: the figures of several runs of two or more
// builds, side by side, as medians and ranges, and each build's median
// against the first's. On this kind of machine one run tells a 10 %
// change from noise only by luck; runs in turns (scripts/bench-ab.sh)
// and their medians can.
//
//	shareq-bench compare old=DIR,DIR,DIR new=DIR,DIR,DIR

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
)

// compareCmd is the subcommand's name.
const compareCmd = "compare"

// runSet is one build's runs: the -out directories of its runs.
type runSet struct {
	label string
	dirs  []string
}

// parseRunSets reads LABEL=DIR[,DIR...] arguments.
func parseRunSets(args []string) ([]runSet, error) {
	if len(args) < 2 {
		return nil, errors.New("compare: want two or more LABEL=DIR[,DIR...] arguments (the first is the baseline)")
	}
	var sets []runSet
	for _, a := range args {
		label, dirs, ok := strings.Cut(a, "=")
		if !ok || label == "" || dirs == "" {
			return nil, fmt.Errorf("compare: %q: want LABEL=DIR[,DIR...]", a)
		}
		sets = append(sets, runSet{label: label, dirs: strings.Split(dirs, ",")})
	}
	return sets, nil
}

// metricKey names one figure across runs.
type metricKey struct{ backend, scenario, variant, metric, unit string }

// runCompare prints the figures of sets side by side.
func runCompare(args []string, w io.Writer) error {
	sets, err := parseRunSets(args)
	if err != nil {
		return err
	}
	values := make([]map[metricKey][]float64, len(sets))
	var order []metricKey
	seen := map[metricKey]bool{}
	for i, s := range sets {
		values[i] = map[metricKey][]float64{}
		for _, dir := range s.dirs {
			rows, err := readResults(filepath.Join(dir, "results.csv"))
			if err != nil {
				return err
			}
			for _, r := range rows {
				if r.Scenario == "env" {
					continue
				}
				k := metricKey{r.Backend, r.Scenario, r.Variant, r.Metric, r.Unit}
				values[i][k] = append(values[i][k], r.Value)
				if !seen[k] {
					seen[k] = true
					order = append(order, k)
				}
			}
		}
	}
	return writeComparison(w, sets, values, order)
}

// readResults reads one run's results.csv.
func readResults(path string) ([]row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	defer f.Close()
	rows, err := readCSV(f)
	if err != nil {
		return nil, fmt.Errorf("compare: %s: %w", path, err)
	}
	return rows, nil
}

// writeComparison prints one line per figure, in the order first seen:
// each set's median with its range and run count, and each later set's
// median over the first's.
func writeComparison(w io.Writer, sets []runSet, values []map[metricKey][]float64, order []metricKey) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{"figure"}
	for i, s := range sets {
		head = append(head, s.label+" median (min–max, runs)")
		if i > 0 {
			head = append(head, s.label+"/"+sets[0].label)
		}
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	last := ""
	for _, k := range order {
		if g := k.backend + ": " + k.scenario; g != last {
			fmt.Fprintf(tw, "== %s\n", g)
			last = g
		}
		cells := []string{k.variant + " " + k.metric + unitSuffix(k.unit)}
		base, hasBase := median(values[0][k])
		for i := range sets {
			vs := values[i][k]
			m, ok := median(vs)
			if !ok {
				cells = append(cells, "-")
			} else {
				cells = append(cells, fmt.Sprintf("%s (%s–%s, %d)", humanValue(m), humanValue(slices.Min(vs)), humanValue(slices.Max(vs)), len(vs)))
			}
			if i == 0 {
				continue
			}
			if ok && hasBase && base != 0 {
				cells = append(cells, fmt.Sprintf("%.2f", m/base))
			} else {
				cells = append(cells, "-")
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

func unitSuffix(u string) string {
	if u == "" {
		return ""
	}
	return " (" + u + ")"
}

// median returns the median of vs; false when vs is empty.
func median(vs []float64) (float64, bool) {
	if len(vs) == 0 {
		return 0, false
	}
	s := slices.Sorted(slices.Values(vs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2], true
	}
	return (s[n/2-1] + s[n/2]) / 2, true
}
