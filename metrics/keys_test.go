package metrics_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shareq/shareq/metrics"
	"github.com/shareq/shareq/worker"
)

// The three key gauges follow the member snapshots; they have no labels
// but the const ones, so they exist at zero from the start.
func TestMemberStatsKeyGauges(t *testing.T) {
	t.Parallel()
	reg, m := setup(t)
	const want = `
# HELP shareq_jobs_waiting_for_keys Jobs waiting for their keys' limits or open breakers (worker.KeyLimit), without a handler slot and spending no delivery.
# TYPE shareq_jobs_waiting_for_keys gauge
shareq_jobs_waiting_for_keys %d
# HELP shareq_jobs_snoozed_held Snoozed jobs the worker holds until they are due, without a handler slot and spending no delivery.
# TYPE shareq_jobs_snoozed_held gauge
shareq_jobs_snoozed_held %d
# HELP shareq_key_breakers_open Keys whose breaker is open in the worker: their jobs wait while one probes the key now and then.
# TYPE shareq_key_breakers_open gauge
shareq_key_breakers_open %d
`
	names := []string{"shareq_jobs_waiting_for_keys", "shareq_jobs_snoozed_held", "shareq_key_breakers_open"}
	for _, c := range []struct {
		name                   string
		s                      *worker.MemberStats
		waiting, snoozed, open int
	}{
		{"before any snapshot", nil, 0, 0, 0},
		{"keys down", &worker.MemberStats{State: "joined", Waiting: 40, Snoozed: 3, BreakersOpen: 2}, 40, 3, 2},
		{"keys back", &worker.MemberStats{State: "joined", Waiting: 1}, 1, 0, 0},
	} {
		if c.s != nil {
			m.MemberStats(*c.s)
		}
		exp := strings.NewReader(fmt.Sprintf(want, c.waiting, c.snoozed, c.open))
		if err := testutil.GatherAndCompare(reg, exp, names...); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// Breakers count by topic, never by key: a key's breaker opening and
// closing adds to its topic's counters, and the time it was open to the
// topic's seconds.
func TestKeyBreakerEvents(t *testing.T) {
	t.Parallel()
	reg, m := setup(t, metrics.Topics("webhooks"))
	mfs := scrape(t, reg)
	for _, name := range []string{"shareq_key_breakers_opened_total", "shareq_key_breakers_closed_total", "shareq_key_breakers_open_seconds_total"} {
		if got := value(t, mfs, name, "topic", "webhooks"); got != 0 {
			t.Errorf("%s before any breaker = %v, want 0", name, got)
		}
	}
	m.KeyDown("webhooks", "a.example", errors.New("503 Service Unavailable"))
	m.KeyDown("webhooks", "b.example", errors.New("connection refused"))
	m.KeyBack("webhooks", "a.example", 90*time.Second)
	m.KeyDown("emails", "ses", errors.New("throttled"))
	err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP shareq_key_breakers_opened_total Times a key's breaker opened (handler.KeyUnavailable, or Keys.BreakAfter failures in a row), by topic.
# TYPE shareq_key_breakers_opened_total counter
shareq_key_breakers_opened_total{topic="emails"} 1
shareq_key_breakers_opened_total{topic="webhooks"} 2
# HELP shareq_key_breakers_closed_total Times a key's breaker closed because a probe got through, by topic.
# TYPE shareq_key_breakers_closed_total counter
shareq_key_breakers_closed_total{topic="webhooks"} 1
# HELP shareq_key_breakers_open_seconds_total Seconds keys' breakers stayed open, counted when each closes, by topic.
# TYPE shareq_key_breakers_open_seconds_total counter
shareq_key_breakers_open_seconds_total{topic="webhooks"} 90
`), "shareq_key_breakers_opened_total", "shareq_key_breakers_closed_total", "shareq_key_breakers_open_seconds_total")
	if err != nil {
		t.Error(err)
	}
}

// Every outcome the worker reports has its shareq_jobs_total series at
// zero for a topic given with Topics, so that rate() sees its first job:
// an outcome added to the worker and not to the metrics fails here.
func TestTopicsCreateASeriesPerOutcome(t *testing.T) {
	t.Parallel()
	reg, _ := setup(t, metrics.Topics("emails"))
	mfs := scrape(t, reg)
	for _, o := range worker.Outcomes() {
		if series(mfs, "shareq_jobs_total", "topic", "emails", "outcome", o.String()) == nil {
			t.Errorf("no shareq_jobs_total{outcome=%q} series before the first job", o)
		}
	}
}

// A snoozed job is accepted and counted as snoozed, not as a success. One
// whose handler ran (handler.Snooze past what the worker holds) ends its
// run like any other; one that waited for its key until MaxHold did not
// run and is not an expired lock.
func TestJobFinishedSnoozed(t *testing.T) {
	t.Parallel()
	reg, m := setup(t, metrics.Topics("emails"))
	ran := job("emails", 1)
	m.JobStarted(ran)
	m.JobFinished(ran, worker.Result{Outcome: worker.OutcomeSnoozed, Ack: worker.AckAccept, Ran: true, Duration: 20 * time.Millisecond, Final: true, LockLeft: 20 * time.Second})
	waited := job("emails", 1)
	m.JobFinished(waited, worker.Result{Outcome: worker.OutcomeSnoozed, Ack: worker.AckAccept, Final: true, LockLeft: 20 * time.Second})

	mfs := scrape(t, reg)
	if got := value(t, mfs, "shareq_jobs_total", "topic", "emails", "outcome", "snoozed", "ack", "accept"); got != 2 {
		t.Errorf("jobs_total{outcome=snoozed,ack=accept} = %v, want 2", got)
	}
	if got := value(t, mfs, "shareq_jobs_total", "topic", "emails", "outcome", "succeeded"); got != 0 {
		t.Errorf("jobs_total{outcome=succeeded} = %v, want 0: a snooze is no success", got)
	}
	if got := value(t, mfs, "shareq_jobs_expired_total", "topic", "emails"); got != 0 {
		t.Errorf("jobs_expired_total = %v, want 0: the job that waited for its key was snoozed, its lock did not run out", got)
	}
	if got := value(t, mfs, "shareq_jobs_in_flight", "topic", "emails"); got != 0 {
		t.Errorf("jobs_in_flight = %v, want 0", got)
	}
	if d := histogram(t, mfs, "shareq_job_duration_seconds", "topic", "emails"); d.count != 1 {
		t.Errorf("job_duration count = %d, want 1 (the run that snoozed)", d.count)
	}
}
