package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	lineF = "pkg example.com/p, func F() error"
	lineG = "pkg example.com/p, func G(int)"
	lineH = "pkg example.com/p, func H() string"
)

// breakMessage is what a break must say to do.
const breakMessage = "an incompatible API change: if it is intended, run `make api` and say so in CHANGELOG.md"

func TestCompare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name               string
		baseline, current  []string
		removed, addedWant []string
	}{
		{"unchanged", []string{lineF, lineG}, []string{lineF, lineG}, nil, nil},
		{"a feature removed is a break", []string{lineF, lineG}, []string{lineF}, []string{lineG}, nil},
		{"a feature added is new API", []string{lineF}, []string{lineF, lineH}, nil, []string{lineH}},
		{"a feature changed is both", []string{lineF, lineG}, []string{lineF, "pkg example.com/p, func G(int64)"},
			[]string{lineG}, []string{"pkg example.com/p, func G(int64)"}},
		{"an empty baseline: all new", nil, []string{lineF}, nil, []string{lineF}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := compare(tt.baseline, tt.current)
			if !slices.Equal(d.removed, tt.removed) || !slices.Equal(d.added, tt.addedWant) {
				t.Errorf("compare: removed %q, added %q; want removed %q, added %q", d.removed, d.added, tt.removed, tt.addedWant)
			}
		})
	}
}

func TestCheckBreak(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	err := check("api/x.txt", []string{lineF, lineG}, []string{lineF, lineH}, &out, &errOut)
	if !errors.Is(err, errBreak) {
		t.Fatalf("check with a removed feature: %v, want errBreak", err)
	}
	for _, want := range []string{"- " + lineG + "\n", breakMessage, "api/x.txt"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("check's errors lack %q:\n%s", want, errOut.String())
		}
	}
	if strings.Contains(errOut.String(), lineF) {
		t.Errorf("check's errors name a feature still there (%s):\n%s", lineF, errOut.String())
	}
	if !strings.Contains(out.String(), "+ "+lineH+"\n") {
		t.Errorf("check's output lacks the new feature %s:\n%s", lineH, out.String())
	}
}

func TestCheckAdded(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if err := check("api/x.txt", []string{lineF}, []string{lineF, lineH}, &out, &errOut); err != nil {
		t.Fatalf("check with a new feature only: %v, want nil", err)
	}
	for _, want := range []string{"new API not in the baseline", "run make api", "+ " + lineH + "\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check's output lacks %q:\n%s", want, out.String())
		}
	}
	if errOut.Len() > 0 {
		t.Errorf("check wrote errors for new API alone:\n%s", errOut.String())
	}
}

func TestBaselineRoundTrip(t *testing.T) {
	t.Parallel()
	lines := []string{lineF, lineG, lineH}
	data := formatBaseline(lines)
	if !bytes.HasPrefix(data, []byte("# ")) {
		t.Errorf("the baseline does not open with its header:\n%s", data)
	}
	got, err := readBaseline(bytes.NewReader(append(data, "\n  \n"...)))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, lines) {
		t.Errorf("readBaseline(formatBaseline(%q)) = %q", lines, got)
	}
}

// TestRun runs the command's three modes on testdata/ws from one of its
// subdirectories: -w writes the baseline that printing shows, -check
// passes on it, then fails once a feature is gone from the code (here:
// a line in the baseline that the code never had).
func TestRun(t *testing.T) {
	t.Setenv("GOWORK", "")
	file := filepath.Join(t.TempDir(), "api.txt")
	t.Chdir("testdata/ws/sub")

	var printed, out, errOut bytes.Buffer
	if err := run(nil, &printed, &errOut); err != nil {
		t.Fatalf("apicheck: %v\n%s", err, errOut.String())
	}
	if err := run([]string{"-w", file}, &out, &errOut); err != nil {
		t.Fatalf("apicheck -w: %v\n%s", err, errOut.String())
	}
	written, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(written, printed.Bytes()) || !bytes.Equal(written, formatBaseline(wsAPI)) {
		t.Errorf("apicheck -w wrote:\n%s\nprinted:\n%s\nwant:\n%s", written, printed.Bytes(), formatBaseline(wsAPI))
	}

	out.Reset()
	if err := run([]string{"-check", file}, &out, &errOut); err != nil {
		t.Fatalf("apicheck -check on the baseline just written: %v\n%s", err, errOut.String())
	}
	if strings.Contains(out.String(), "new API") {
		t.Errorf("apicheck -check on the baseline just written notes new API:\n%s", out.String())
	}

	gone := "pkg example.com/ws/lib, func Goodbye() string"
	if err := os.WriteFile(file, append(written, gone+"\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	errOut.Reset()
	if err := run([]string{"-check", file}, &out, &errOut); !errors.Is(err, errBreak) {
		t.Fatalf("apicheck -check with a feature gone: %v, want errBreak", err)
	}
	if !strings.Contains(errOut.String(), "- "+gone) || !strings.Contains(errOut.String(), breakMessage) {
		t.Errorf("apicheck -check's errors:\n%s\nwant the line gone and %q", errOut.String(), breakMessage)
	}
}

func TestRunNoBaseline(t *testing.T) {
	t.Setenv("GOWORK", "")
	t.Chdir("testdata/ws")
	var out, errOut bytes.Buffer
	err := run([]string{"-check", "api/missing.txt"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "make api") {
		t.Errorf("apicheck -check without a baseline: %v, want an error saying to run make api", err)
	}
}
