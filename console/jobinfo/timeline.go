package jobinfo

import (
	"cmp"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/joblog/pgjoblog"
)

// EventKind names what happened to a job in an [Event].
type EventKind string

// The kinds of events.
const (
	EventEnqueued  EventKind = "enqueued"  // a row went into the outbox (Row)
	EventDue       EventKind = "due"       // the row is, or was, due (Row); enqueued for later only
	EventProduced  EventKind = "produced"  // a relay produced the job to Kafka
	EventCancelled EventKind = "cancelled" // shareq jobs cancel, pgoutbox.Cancel marked its claim cancelled
	EventClaimed   EventKind = "claimed"   // a run committed the job's idempotency claim
	EventRun       EventKind = "run"       // a worker finished a delivery (Run)
	EventParked    EventKind = "parked"    // a worker or the broker parked it in a DLQ topic (Parked)
	EventReplayed  EventKind = "replayed"  // a replay re-produced the parked job (Parked, Replay)
)

// Event is one thing that happened to a job, from one of its sources.
type Event struct {
	At   time.Time
	Kind EventKind
	// Future reports an event still to come (a due time after now).
	Future bool
	// The source's record, by Kind.
	Row    *OutboxRow
	Run    *pgjoblog.Run
	Parked *dlq.Parked
	Replay *dlq.ReplayMark
}

// Timeline puts the job's events from every source together, oldest
// first: its outbox rows (enqueued, due), its produce, its claim, its
// runs (each at its start) and its DLQ records parked (each at its
// parking) with their replays. now is the time the future is after.
func Timeline(j *Job, parked []dlq.Parked, now time.Time) []Event {
	var ev []Event
	for i := range j.Outbox {
		r := &j.Outbox[i]
		ev = append(ev, Event{At: r.Created, Kind: EventEnqueued, Row: r})
		if r.Due.InfinityModifier == pgtype.Finite && r.Due.Time.After(r.Created) {
			ev = append(ev, Event{At: r.Due.Time, Kind: EventDue, Row: r, Future: r.DueIn > 0})
		}
	}
	if j.ProducedAt != nil {
		ev = append(ev, Event{At: *j.ProducedAt, Kind: EventProduced})
	}
	switch j.Claim.State {
	case ClaimCancelled:
		ev = append(ev, Event{At: j.Claim.At, Kind: EventCancelled})
	case ClaimRan:
		ev = append(ev, Event{At: j.Claim.At, Kind: EventClaimed})
	}
	for i := range j.Runs {
		ev = append(ev, Event{At: j.Runs[i].Started, Kind: EventRun, Run: &j.Runs[i]})
	}
	for i := range parked {
		p := &parked[i]
		at := p.ParkedAt
		if at.IsZero() {
			at = p.Timestamp
		}
		ev = append(ev, Event{At: at, Kind: EventParked, Parked: p})
		for k := range p.Replays {
			ev = append(ev, Event{At: p.Replays[k].At, Kind: EventReplayed, Parked: p, Replay: &p.Replays[k]})
		}
	}
	for i := range ev {
		if ev[i].At.After(now) {
			ev[i].Future = true
		}
	}
	slices.SortStableFunc(ev, func(a, b Event) int { return cmp.Compare(a.At.UnixNano(), b.At.UnixNano()) })
	return ev
}
