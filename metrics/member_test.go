package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shareq/shareq/worker"
)

func TestMemberStats(t *testing.T) {
	t.Parallel()
	reg, m := setup(t)
	m.MemberStats(worker.MemberStats{State: "joining"})
	m.MemberStats(worker.MemberStats{
		State: "joined", Partitions: 6, Held: 30, Buffered: 4, FetchRTT: 5 * time.Millisecond,
		Fetches: 10, Fetched: 100, SessionsOpened: 1,
		Acks: map[worker.Ack]int64{worker.AckAccept: 60, worker.AckRelease: 10},
	})
	// Counters add what grew since the last snapshot; gauges take the
	// latest value.
	m.MemberStats(worker.MemberStats{
		State: "fenced", Partitions: 6, Held: 20, HeldBytes: 20 << 10, Buffered: 0, FetchRTT: 7 * time.Millisecond,
		Fetches: 12, Fetched: 130, SessionsOpened: 2, SessionsReset: 1, Rejoins: 1, LostRecords: 3,
		Acks: map[worker.Ack]int64{worker.AckAccept: 100, worker.AckRelease: 10, worker.AckReject: 2},
	})

	err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP shareq_member_state 1 for the state the worker's share-group member is in (joining, joined, fenced, left), 0 for the others.
# TYPE shareq_member_state gauge
shareq_member_state{state="fenced"} 1
shareq_member_state{state="joined"} 0
shareq_member_state{state="joining"} 0
shareq_member_state{state="left"} 0
# HELP shareq_member_partitions Partitions assigned to the worker's share-group member.
# TYPE shareq_member_partitions gauge
shareq_member_partitions 6
# HELP shareq_records_held Records the worker holds: acquired and not yet acknowledged (running, buffered, or held for a retry backoff).
# TYPE shareq_records_held gauge
shareq_records_held 20
# HELP shareq_records_held_bytes Bytes (keys, values and headers) of the records whose jobs have not ended; worker.MaxBytesInHand bounds them.
# TYPE shareq_records_held_bytes gauge
shareq_records_held_bytes 20480
# HELP shareq_records_buffered Records fetched ahead of free handler slots, waiting for one.
# TYPE shareq_records_buffered gauge
shareq_records_buffered 0
# HELP shareq_fetch_rtt_seconds Round trip of share fetches that returned records, in seconds (moving average).
# TYPE shareq_fetch_rtt_seconds gauge
shareq_fetch_rtt_seconds 0.007
# HELP shareq_fetches_total Share fetches the brokers answered.
# TYPE shareq_fetches_total counter
shareq_fetches_total 12
# HELP shareq_records_fetched_total Records acquired by share fetches.
# TYPE shareq_records_fetched_total counter
shareq_records_fetched_total 130
# HELP shareq_records_lost_total Held records whose lock was lost (share session or connection gone); another member may run them.
# TYPE shareq_records_lost_total counter
shareq_records_lost_total 3
# HELP shareq_sessions_opened_total Share sessions opened with a broker, the first ones included.
# TYPE shareq_sessions_opened_total counter
shareq_sessions_opened_total 2
# HELP shareq_sessions_reset_total Share sessions reopened after an error.
# TYPE shareq_sessions_reset_total counter
shareq_sessions_reset_total 1
# HELP shareq_member_rejoins_total Times the member rejoined the share group after the coordinator fenced it.
# TYPE shareq_member_rejoins_total counter
shareq_member_rejoins_total 1
# HELP shareq_acks_total Acknowledgements the broker applied, by type (accept, release, reject).
# TYPE shareq_acks_total counter
shareq_acks_total{ack="accept"} 100
shareq_acks_total{ack="reject"} 2
shareq_acks_total{ack="release"} 10
`), "shareq_member_state", "shareq_member_partitions", "shareq_records_held", "shareq_records_held_bytes", "shareq_records_buffered",
		"shareq_fetch_rtt_seconds", "shareq_fetches_total", "shareq_records_fetched_total", "shareq_records_lost_total",
		"shareq_sessions_opened_total", "shareq_sessions_reset_total", "shareq_member_rejoins_total", "shareq_acks_total")
	if err != nil {
		t.Error(err)
	}
}

func TestMemberStatsOfANewRunStartFromZero(t *testing.T) {
	t.Parallel()
	reg, m := setup(t)
	m.MemberStats(worker.MemberStats{State: "left", Fetches: 50, Fetched: 500, SessionsOpened: 1})
	// A second Run of a new worker on the same Metrics reports its own
	// totals, from zero: they add to the counters rather than being lost.
	m.MemberStats(worker.MemberStats{State: "joined", Fetches: 5, Fetched: 40, SessionsOpened: 1})
	if got := value(t, scrape(t, reg), "shareq_records_fetched_total"); got != 540 {
		t.Errorf("records_fetched_total = %v, want 540", got)
	}
}

// A worker with a TopicRate has its limit and share as gauges by topic;
// one without has none.
func TestMemberStatsRate(t *testing.T) {
	t.Parallel()
	reg, m := setup(t)
	m.MemberStats(worker.MemberStats{State: "joined"})
	if n, err := testutil.GatherAndCount(reg, "shareq_rate_limit_jobs_per_second", "shareq_rate_share_jobs_per_second"); err != nil || n != 0 {
		t.Errorf("without a rate limit: %d series (%v), want none", n, err)
	}
	m.MemberStats(worker.MemberStats{State: "joined", RateTopic: "emails", RateLimit: 14})
	m.MemberStats(worker.MemberStats{State: "joined", RateTopic: "emails", RateLimit: 14, RateShare: 7})
	err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP shareq_rate_limit_jobs_per_second The topic's rate limit (worker.TopicRate) for the whole share group, in jobs per second.
# TYPE shareq_rate_limit_jobs_per_second gauge
shareq_rate_limit_jobs_per_second{topic="emails"} 14
# HELP shareq_rate_share_jobs_per_second This worker's share of the topic's rate limit, in jobs per second (0 while it waits to be counted).
# TYPE shareq_rate_share_jobs_per_second gauge
shareq_rate_share_jobs_per_second{topic="emails"} 7
`), "shareq_rate_limit_jobs_per_second", "shareq_rate_share_jobs_per_second")
	if err != nil {
		t.Error(err)
	}
}
