package main

import (
	"log/slog"
	"os"
	"testing"
)

// The producer scenario (kfake, or SHAREQ_TEST_BROKERS): without a
// database only the enqueue comparison runs; with one
// (SHAREQ_TEST_DATABASE_URL) the outbox comparison and the relay's
// latency too, every job relayed. Rates are the benchmark's to report,
// not this test's.
func TestProducerScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("relays a thousand jobs")
	}
	c, err := newCluster(t.Context(), testBroker())
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	log := slog.New(slog.DiscardHandler)
	database := os.Getenv("SHAREQ_TEST_DATABASE_URL")
	got := map[string]float64{}
	add := func(variant, metric string, v float64, unit, note string) {
		got[variant+": "+metric] = v
	}
	if err := runProducer(t.Context(), c, log, database, true, add, func(string) {}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"Enqueue against ProduceSync, serial: ratio", "Enqueue against ProduceSync, 4-at-once: ratio"} {
		if got[k] <= 0 {
			t.Errorf("%s: %v (all: %v)", k, got[k], got)
		}
	}
	if database == "" {
		if len(got) != 6 {
			t.Errorf("without a database: %v, want the enqueue comparison's 6 figures", got)
		}
		t.Skip("SHAREQ_TEST_DATABASE_URL not set: the outbox and the relay not run")
	}
	for _, k := range []string{"business row + EnqueueTx against the business row alone, serial: ratio",
		"business row + EnqueueTx against the business row alone, 4-at-once: ratio"} {
		if got[k] <= 0 {
			t.Errorf("%s: %v (all: %v)", k, got[k], got)
		}
	}
	relay := "relay, commit to a consumer's receipt, 1000 jobs/s: "
	p50, p99, maxLat := got[relay+"p50"], got[relay+"p99"], got[relay+"max"]
	if p50 <= 0 || p99 < p50 || maxLat < p99 {
		t.Errorf("relay latency p50 %v, p99 %v, max %v ms (all: %v)", p50, p99, maxLat, got)
	}
}
