package main

import (
	"log/slog"
	"testing"
	"time"
)

func TestScaleProcParsesReports(t *testing.T) {
	t.Parallel()
	p := &scaleProc{reqs: map[string]int64{}}
	for _, l := range []string{"checked 1500000", "fetch 2000000 3 1800000", "first 2500000", "n 7 1700000000000000000 42000000 ShareFetch=3 ShareGroupHeartbeat=2", "garbage", "n x"} {
		p.parse(l)
	}
	if p.checked != 1500*time.Microsecond || p.first != 2500*time.Microsecond || p.jobs != 7 || p.fetch != 2*time.Millisecond || p.beats != 3 || p.join != 1800*time.Microsecond ||
		!p.last.Equal(time.Unix(0, 1700000000000000000)) || p.cpu != 42*time.Millisecond || p.reqs["ShareFetch"] != 3 || p.reqs["ShareGroupHeartbeat"] != 2 {
		t.Fatalf("parsed %+v", p)
	}
}

// The scale scenario's worker processes (kfake, or SHAREQ_TEST_BROKERS):
// two worker processes run every record of a topic, and so does a raw
// share loop process, their CPU is read, and an idle worker's start-up
// and requests are reported. Rates are the benchmark's to report, not
// this test's.
func TestScaleWorkerProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes")
	}
	c, err := newCluster(t.Context(), testBroker())
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	log := slog.New(slog.DiscardHandler)
	sz := scaleSizes{limit: time.Minute, idle: 500 * time.Millisecond}

	topic, err := c.topic(t.Context(), "scale-test", 6)
	if err != nil {
		t.Fatal(err)
	}
	// Enough that the first worker cannot run them all before the second
	// joins and the group settles (20,000 could, on an idle machine).
	const records = 200000
	if err := produceNoop(t.Context(), c, []string{topic}, records); err != nil {
		t.Fatal(err)
	}
	// Within the minute of sz.limit, the run ends only once every
	// record has run.
	r, err := scaleRun(t.Context(), c, log, 2, []string{topic}, records, sz, false)
	if err != nil {
		t.Fatal(err)
	}
	if r.Jobs <= 0 || r.Jobs > records || r.Rate <= 0 || r.CPUPerJob <= 0 {
		t.Fatalf("%+v", r)
	}

	var topics []string
	for range 2 {
		tp, err := c.topic(t.Context(), "scale-test-idle", 3)
		if err != nil {
			t.Fatal(err)
		}
		topics = append(topics, tp)
	}
	if err := produceNoop(t.Context(), c, topics, len(topics)); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	add := func(variant, metric string, v float64, unit, note string) { got[variant+" "+metric] = v }
	raw, err := scaleRun(t.Context(), c, log, 1, []string{topic}, records, sz, true)
	if err != nil {
		t.Fatal(err)
	}
	if raw.Jobs <= 0 || raw.Jobs > records || raw.Rate <= 0 || raw.CPUPerJob <= 0 {
		t.Fatalf("raw: %+v", raw)
	}
	if err := scaleStartIdle(t.Context(), c, log, topics, sz, "two", add); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"start, two", "start, two, AssignmentInterval(0)"} {
		if got[v+" check"] <= 0 || got[v+" join"] < got[v+" check"] || got[v+" first_fetch"] < got[v+" join"] || got[v+" first_job"] < got[v+" first_fetch"] {
			t.Errorf("%s: %v", v, got)
		}
	}
	if got["idle, two requests_per_s"] <= 0 || got["idle, two cpu_per_s"] <= 0 {
		t.Fatalf("%v", got)
	}
}
