package sharegroup

import (
	"testing"
)

func TestLagTexts(t *testing.T) {
	t.Parallel()
	n := func(v int64) *int64 { return &v }
	started := func(p int32, start, lag, hw int64) Partition {
		return Partition{Topic: "jobs", Partition: p, StartOffset: n(start), Lag: n(lag), HighWatermark: n(hw)}
	}
	notStarted := func(p int32, logStart, hw int64) Partition {
		return Partition{Topic: "jobs", Partition: p, LogStartOffset: n(logStart), HighWatermark: n(hw)}
	}
	failed := Partition{Topic: "jobs", Partition: 9, Error: "NOT_LEADER_FOR_PARTITION"}
	for _, tc := range []struct {
		name       string
		parts      []Partition
		reset      string
		resetErr   string
		lag        string
		total      *int64
		atLeast    int64
		notStarted string
		errors     string
	}{
		{name: "all known", parts: []Partition{started(0, 5, 3, 8), started(1, 2, 0, 2)},
			lag: "3", total: n(3), atLeast: 3},
		{name: "all known and done", parts: []Partition{started(0, 8, 0, 8)},
			lag: "0", total: n(0)},
		{name: "no partitions", lag: "unknown"},
		{name: "none started, earliest", reset: "earliest",
			parts: []Partition{notStarted(0, 0, 50), notStarted(1, 10, 60)},
			lag:   "≥ 100", atLeast: 100,
			notStarted: "2 of 2 partitions have no start offset yet (the group has not fetched from them, or the broker has not written their state yet), so their lag is unknown; 100 records in their logs, all waiting for the group (share.auto.offset.reset=earliest)"},
		{name: "one of two started, earliest", reset: "earliest",
			parts: []Partition{started(0, 40, 10, 50), notStarted(1, 0, 1)},
			lag:   "≥ 11", atLeast: 11,
			notStarted: "1 of 2 partitions has no start offset yet (the group has not fetched from it, or the broker has not written its state yet), so its lag is unknown; 1 record in its log, all waiting for the group (share.auto.offset.reset=earliest)"},
		{name: "none started, latest", reset: "latest",
			parts:      []Partition{notStarted(0, 0, 50)},
			lag:        "unknown",
			notStarted: "1 of 1 partition has no start offset yet (the group has not fetched from it, or the broker has not written its state yet), so its lag is unknown; 50 records in its log, not delivered unless the group fetched from it already (share.auto.offset.reset=latest: a first fetch starts at the end of the log)"},
		{name: "one of two started, latest: at least the known lag", reset: "latest",
			parts: []Partition{started(0, 40, 10, 50), notStarted(1, 0, 7)},
			lag:   "≥ 10", atLeast: 10,
			notStarted: "1 of 2 partitions has no start offset yet (the group has not fetched from it, or the broker has not written its state yet), so its lag is unknown; 7 records in its log, not delivered unless the group fetched from it already (share.auto.offset.reset=latest: a first fetch starts at the end of the log)"},
		{name: "by duration", reset: "by_duration:PT1H",
			parts:      []Partition{notStarted(0, 0, 50)},
			lag:        "unknown",
			notStarted: "1 of 1 partition has no start offset yet (the group has not fetched from it, or the broker has not written its state yet), so its lag is unknown; 50 records in its log, of which a first fetch delivers those of the last PT1H (share.auto.offset.reset=by_duration:PT1H)"},
		{name: "reset unreadable", resetErr: "GROUP_AUTHORIZATION_FAILED",
			parts:      []Partition{notStarted(0, 0, 50)},
			lag:        "unknown",
			notStarted: "1 of 1 partition has no start offset yet (the group has not fetched from it, or the broker has not written its state yet), so its lag is unknown; 50 records in its log (share.auto.offset.reset unknown: GROUP_AUTHORIZATION_FAILED)"},
		{name: "a failed partition", parts: []Partition{started(0, 5, 3, 8), failed},
			lag: "≥ 3", atLeast: 3,
			errors: "1 of 2 partitions could not be read, so its lag is unknown (the error is on the partition)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := &Status{Partitions: tc.parts, AutoOffsetReset: tc.reset, AutoOffsetResetError: tc.resetErr}
			st.total()
			if got := st.LagText(); got != tc.lag {
				t.Errorf("LagText() = %q, want %q", got, tc.lag)
			}
			if (st.TotalLag == nil) != (tc.total == nil) || st.TotalLag != nil && *st.TotalLag != *tc.total || st.LagAtLeast != tc.atLeast {
				t.Errorf("TotalLag %v, LagAtLeast %d; want %v, %d", st.TotalLag, st.LagAtLeast, tc.total, tc.atLeast)
			}
			if got := st.NotStartedText(); got != tc.notStarted {
				t.Errorf("NotStartedText() =\n%q\nwant\n%q", got, tc.notStarted)
			}
			if got := st.ErrorsText(); got != tc.errors {
				t.Errorf("ErrorsText() = %q, want %q", got, tc.errors)
			}
		})
	}
}
