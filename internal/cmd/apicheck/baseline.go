package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
)

// header opens the baseline file; readBaseline skips it, like every
// line starting with "#".
const header = `# The exported API of shareq's published packages, one feature a line, in
# the format of Go's api/go1.*.txt files. Written by make api
# (internal/cmd/apicheck); make test fails when a line here is no longer
# true of the code. See docs/development.md, "The API baseline".
`

// formatBaseline returns the baseline file for the sorted features.
func formatBaseline(lines []string) []byte {
	var b bytes.Buffer
	b.WriteString(header)
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	return b.Bytes()
}

// readBaseline returns the features of a baseline file: its lines but
// blank ones and comments.
func readBaseline(r io.Reader) ([]string, error) {
	var lines []string
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		lines = append(lines, l)
	}
	return lines, sc.Err()
}

// A diff is the current API against the baseline.
type diff struct {
	removed []string // baseline features the code no longer has: a break
	added   []string // features of the code the baseline lacks: new API
}

// compare returns the features of baseline missing from current and
// those of current missing from baseline, each in its input's order.
// A changed feature is both.
func compare(baseline, current []string) diff {
	var d diff
	d.removed = missing(baseline, current)
	d.added = missing(current, baseline)
	return d
}

// missing returns the lines of a that b lacks.
func missing(a, b []string) []string {
	in := make(map[string]bool, len(b))
	for _, l := range b {
		in[l] = true
	}
	var out []string
	for _, l := range a {
		if !in[l] {
			out = append(out, l)
		}
	}
	return out
}

// errBreak is check's error when a baseline feature is gone.
var errBreak = errors.New("an incompatible API change")

// check compares current with the baseline file's features and writes
// what differs: new API as a note on out, a removed or changed feature
// (a break) on errOut, with errBreak.
func check(file string, baseline, current []string, out, errOut io.Writer) error {
	d := compare(baseline, current)
	if len(d.added) > 0 {
		fmt.Fprintf(out, "apicheck: note: new API not in the baseline (%s): run make api to record it\n", file)
		for _, l := range d.added {
			fmt.Fprintf(out, "+ %s\n", l)
		}
	}
	if len(d.removed) == 0 {
		fmt.Fprintf(out, "apicheck: every feature of %s is in the code (%d features)\n", file, len(current))
		return nil
	}
	fmt.Fprintf(errOut, "apicheck: features of the baseline %s that are no longer in the code (removed or changed): %d\n", file, len(d.removed))
	for _, l := range d.removed {
		fmt.Fprintf(errOut, "- %s\n", l)
	}
	fmt.Fprintf(errOut, "apicheck: this is an incompatible API change: if it is intended, run `make api` and say so in CHANGELOG.md\n")
	return errBreak
}
