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
	// The source's record, by Kind. An EventEnqueued without Row is
	// read from a DLQ record (Parked): its EnqueuedAt, the timestamp of
	// the job's record, which a relay sets to the outbox row's insert.
	Row    *OutboxRow
	Run    *pgjoblog.Run
	Parked *dlq.Parked
	Replay *dlq.ReplayMark

	// key and rank order the events: the times of different sources
	// are not comparable everywhere (see Timeline).
	key  time.Time
	rank int
}

// Timeline puts the job's events from every source together, oldest
// first: its outbox rows (enqueued, due; once a relay produced the job and
// deleted its row, the enqueue a DLQ record of it tells), its produce,
// its claim, its runs and its DLQ records parked with their replays. now
// is the time the future is after.
//
// A run is at its start, which the job log keeps as its end less the
// handler's duration: the parking of a run happens after the handler
// returned, but can be earlier than that start. So a DLQ record follows
// the run of its source record that parked it, its replays follow it, and
// the runs of a replayed record follow the replay.
func Timeline(j *Job, parked []dlq.Parked, now time.Time) []Event {
	var ev []Event
	for i := range j.Outbox {
		r := &j.Outbox[i]
		ev = append(ev, Event{At: r.Created, Kind: EventEnqueued, Row: r})
		if r.Due.InfinityModifier == pgtype.Finite && r.Due.Time.After(r.Created) {
			ev = append(ev, Event{At: r.Due.Time, Kind: EventDue, Row: r, Future: r.DueIn > 0})
		}
	}
	if e, ok := enqueuedFromDLQ(parked); ok && len(j.Outbox) == 0 {
		ev = append(ev, e)
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
		ev[i].key = ev[i].At
		if ev[i].At.After(now) {
			ev[i].Future = true
		}
	}
	order(ev)
	slices.SortStableFunc(ev, func(a, b Event) int {
		if c := a.key.Compare(b.key); c != 0 {
			return c
		}
		return cmp.Compare(a.rank, b.rank)
	})
	return ev
}

// enqueuedFromDLQ is the enqueue of a job its DLQ records tell: the
// earliest EnqueuedAt of a record parked by a worker.
func enqueuedFromDLQ(parked []dlq.Parked) (Event, bool) {
	var e Event
	for i := range parked {
		p := &parked[i]
		if !p.EnqueuedAt.IsZero() && (e.Parked == nil || p.EnqueuedAt.Before(e.At)) {
			e = Event{At: p.EnqueuedAt, Kind: EventEnqueued, Parked: p}
		}
	}
	return e, e.Parked != nil
}

// order sets the keys of the events that follow another: a DLQ record
// after the run that parked it (rank 1), a replay after its record (rank
// 2), a run of a replayed record after the replay (rank 3). Twice, for a
// replayed job parked again.
func order(ev []Event) {
	for range 2 {
		for i := range ev {
			e := &ev[i]
			switch e.Kind {
			case EventParked:
				for k := range ev {
					if r := ev[k].Run; r != nil && r.Outcome == "parked" && r.Topic == e.Parked.SourceTopic && r.Partition == e.Parked.SourcePartition &&
						r.Offset == e.Parked.SourceOffset && (e.Parked.DeliveryCount == 0 || r.DeliveryCount == e.Parked.DeliveryCount) {
						after(e, &ev[k], 1)
					}
				}
			case EventReplayed:
				for k := range ev {
					if ev[k].Kind == EventParked && ev[k].Parked == e.Parked {
						after(e, &ev[k], 2)
					}
				}
			case EventRun:
				for k := range ev {
					if m := ev[k].Replay; m != nil && m.Topic == e.Run.Topic && m.Partition == e.Run.Partition && m.Offset == e.Run.Offset {
						after(e, &ev[k], 3)
					}
				}
			}
		}
	}
}

// after moves e after prev, if it is not after it already.
func after(e, prev *Event, rank int) {
	if e.key.Before(prev.key) || (e.key.Equal(prev.key) && e.rank <= prev.rank) {
		e.key, e.rank = prev.key, max(rank, prev.rank+1)
	}
}
