package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestCSVRoundTrip(t *testing.T) {
	t.Parallel()
	rows := []row{
		{"kfake", "hol", "shareq concurrency=24", "makespan", 5.8125, "s", ""},
		{"kafka", "overhead", "raw share loop, with a comma", "jobs_per_s", 123456, "jobs/s", `note with "quotes"`},
		{"kafka", "eos", "shareq vs River", "rate_ratio", 0.4, "x", "line\nbreak"},
	}
	var buf bytes.Buffer
	if err := writeCSV(&buf, rows); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(buf.String(), "\n"); first != "backend,scenario,variant,metric,value,unit,note" {
		t.Fatalf("header %q", first)
	}
	got, err := readCSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rows) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, rows)
	}
}

func TestCSVValuesArePlainNumbers(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := writeCSV(&buf, []row{{Value: 200000}, {Value: 0.000125}}); err != nil {
		t.Fatal(err)
	}
	if s := buf.String(); !strings.Contains(s, ",200000,") || !strings.Contains(s, ",0.000125,") || strings.Contains(s, "e+") {
		t.Fatalf("values not plain: %q", s)
	}
}

func TestReadCSVRejectsWrongHeader(t *testing.T) {
	t.Parallel()
	if _, err := readCSV(strings.NewReader("a,b\n1,2\n")); err == nil {
		t.Fatal("accepted a wrong header")
	}
}

func TestWriteTableGroupsByBackendAndScenario(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	err := writeTable(&buf, []row{
		{Backend: "-", Scenario: "env", Variant: "machine", Metric: "nproc", Value: 2},
		{Backend: "kfake", Scenario: "hol", Variant: "classic", Metric: "makespan", Value: 11.21, Unit: "s"},
		{Backend: "kfake", Scenario: "hol", Variant: "classic", Metric: "vs_ideal", Value: 1.98, Unit: "x", Note: "makespan / ideal"},
		{Backend: "kfake", Scenario: "overhead", Variant: "raw", Metric: "jobs_per_s", Value: 250605.4, Unit: "jobs/s"},
		{Backend: "kfake", Scenario: "hol", Variant: "ideal", Metric: "makespan", Value: 5.66, Unit: "s"},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"== kfake: hol", "== kfake: overhead", "11.21 s", "1.98 x  (makespan / ideal)", "250605 jobs/s"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "== kfake: hol") != 1 || strings.Index(out, "ideal") > strings.Index(out, "== kfake: overhead") {
		t.Errorf("hol rows not kept together:\n%s", out)
	}
	if strings.Contains(out, "nproc") {
		t.Errorf("table shows env rows:\n%s", out)
	}
}

func TestSeriesCSV(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	err := writeSeriesCSV(&buf, []seriesPoint{{"kfake", "ideal", 250 * time.Millisecond, 300}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "backend,variant,bucket_start_s,completed\nkfake,ideal,0.25,300\n"; buf.String() != want {
		t.Fatalf("got %q, want %q", buf.String(), want)
	}
}

func TestOverheadRecordsOutnumberSlots(t *testing.T) {
	t.Parallel()
	// A worker can hold about as many records as it has handler slots; at
	// a twentieth of the records or more, the first fetches would take a
	// large part of the topic at once and the rate would not be steady.
	for _, quick := range []bool{true, false} {
		n := sizesFor(quick).noopRecords
		for _, conc := range overheadConcurrency {
			if conc*20 > n {
				t.Errorf("quick=%v: Concurrency %d holds more than a twentieth of %d records", quick, conc, n)
			}
		}
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"-broker", "both", "-scenarios", "hol, eos,burst", "-quick", "-database", "postgres://x"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.backends) != 2 || o.backends[0] != "kfake" || !o.quick || o.database != "postgres://x" ||
		!o.scenarios["hol"] || !o.scenarios["eos"] || !o.scenarios["burst"] || o.scenarios["overhead"] {
		t.Fatalf("options %+v", o)
	}
	if o.scaleRows != nil {
		t.Fatalf("scale rows %v without -scale-rows, want nil (all)", o.scaleRows)
	}
	o, err = parseFlags([]string{"-scenarios", "scale", "-scale-rows", "brokers, start"}, &bytes.Buffer{})
	if err != nil || len(o.scaleRows) != 2 || !o.scaleRows["brokers"] || !o.scaleRows["start"] {
		t.Fatalf("-scale-rows brokers,start: %v, %v", o.scaleRows, err)
	}
	for _, bad := range [][]string{{"-scenarios", "hol,nope"}, {"-scenarios", "stall"}, {"-broker", ""}, {"extra"}, {"-scale-rows", "brokers,nodes"}} {
		if _, err := parseFlags(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
}

func TestWriteMarkdown(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	err := writeMarkdown(&buf, []row{
		{Backend: "-", Scenario: "env", Variant: "machine", Metric: "nproc", Value: 2, Unit: "cores", Note: "Some CPU"},
		{Backend: "kfake", Scenario: "hol", Variant: "a|b", Metric: "makespan", Value: 5.68, Unit: "s"},
		{Backend: "kfake", Scenario: "eos", Variant: "River", Metric: "jobs_per_s", Value: 808.7, Unit: "jobs/s"},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"- - machine nproc: 2 cores Some CPU", "**kfake: hol**", "| a\\|b | makespan | 5.68 s |  |", "**kfake: eos**", "808.7 jobs/s"} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
}
