package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
)

// report is the outcome of one phase.
type report struct {
	phase      string
	brokers    string
	lock       time.Duration
	limit      int
	parkAt     int // the delivery failing jobs are parked on
	groupLimit int
	workers    int
	commit     string

	planned     map[string]int // kind → jobs planned
	produced    int
	produceErrs int

	effectsOnce     int      // non-poison jobs with exactly one effect row
	lost            []string // jobs with neither an effect nor a DLQ record
	doubles         []string // jobs with more than one effect row
	poisonOnce      int      // poison jobs parked exactly once
	poisonExtra     map[string]int
	poisonBadReason []string
	poisonEffects   []string          // poison jobs with an effect row (a rollback leaked)
	healthyParked   map[string]string // non-poison jobs parked and not run (ID → reason: error)
	replayedOnce    map[string]string // non-poison jobs parked, replayed, run once
	replayErr       error
	strict          bool
	effectAndParked []string
	unknownEffects  int
	claimNoEffect   []string
	effectNoClaim   []string
	redactionLeaks  int
	dlqMalformed    int
	dlqRecords      int
	brokerRecords   int             // of dlqRecords, written by the broker (Kafka 4.4+)
	byBroker        map[string]bool // job IDs with a record written by the broker
	brokerDLQ       string          // the group's dead-letter topic, "" before 4.4
	stalls          stallReport     // the workers' stall checks and heals

	dupsAbsorbed int
	dupJobs      int
	finishes     map[string]int
	deliveries   map[string]int // kind → deliveries that ended in a worker
	renewOK      int
	renewFail    int
	ackFails     int
	unexpected   int
	startRetries int
	pauses       map[string]int           // dependency → worker pauses
	resumes      map[string]int           // dependency → pauses that ended with it back
	longest      map[string]time.Duration // dependency → the longest pause

	killedParking string
	addedParts    string // the partitions-added fault's count, "" without it
	drainStop     string
	// waiting describes, when jobs are lost, the job topic's partitions
	// that the group still has records of (waitingPartitions).
	waiting []string

	faults      []faultRecord
	timings     map[string]time.Duration
	complete    bool
	interrupted bool
	kept        string
	sections    []reportSection // the sampler's and the overload phase's (sampler.go)
}

// verify reads the final state from Postgres and the DLQ topic and checks
// it against the plan.
func (p *phase) verify(ctx context.Context) (*report, error) {
	r := &report{
		phase: p.name, brokers: strings.Join(p.seeds, ","), lock: p.lock, limit: p.limit, workers: p.o.workers,
		parkAt: p.parkAt(), groupLimit: p.groupLimit, commit: p.o.commit,
		planned:       map[string]int{},
		poisonExtra:   map[string]int{},
		byBroker:      map[string]bool{},
		healthyParked: map[string]string{},
		replayedOnce:  map[string]string{},
		replayErr:     p.replayErr,
		strict:        p.o.strictParking,
		killedParking: p.killedParking,
		drainStop:     p.drainStop,
		deliveries:    map[string]int{},
		produced:      int(p.produced.Load()),
		produceErrs:   int(p.produceErrs.Load()),
	}
	for _, j := range p.jobs {
		r.planned[j.kind]++
	}

	// Effects and claims.
	rows, err := p.db.Query(ctx, "SELECT job_id, count(*) FROM soak_effects GROUP BY job_id")
	if err != nil {
		return nil, err
	}
	effects := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		effects[id] = n
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = p.db.Query(ctx, "SELECT key FROM shareq_processed_jobs")
	if err != nil {
		return nil, err
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	prefix := p.group + "/" + p.topic + "/"
	claims := map[string]bool{}
	for _, k := range keys {
		claims[strings.TrimPrefix(k, prefix)] = true
	}

	// The DLQ, read with dlq.List through a client that consumes nothing.
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.seeds...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	parked, err := p.listDLQ(ctx, cl)
	if err != nil {
		return nil, err
	}
	r.dlqRecords = len(parked)
	r.brokerDLQ = p.brokerDLQ
	inDLQ := map[string][]dlq.Parked{}
	for _, pk := range parked {
		if pk.Err != nil {
			r.dlqMalformed++
			continue
		}
		if pk.Broker {
			r.brokerRecords++
			r.byBroker[p.dlqJobID(&pk)] = true
		}
		if strings.Contains(pk.Error, poisonSecret) {
			r.redactionLeaks++
		}
		id := p.dlqJobID(&pk)
		inDLQ[id] = append(inDLQ[id], pk)
	}

	for _, j := range p.jobs {
		if _, ok := p.producedIDs.Load(j.id); !ok {
			continue
		}
		n, pks := effects[j.id], inDLQ[j.id]
		if n > 1 {
			r.doubles = append(r.doubles, fmt.Sprintf("%s (%s): %d effects", j.id, j.kind, n))
		}
		if j.kind == kindPoison {
			if n > 0 {
				r.poisonEffects = append(r.poisonEffects, j.id)
			}
			switch {
			case len(pks) == 0:
				r.lost = append(r.lost, j.id+" (poison, not in the DLQ)")
			case len(pks) == 1:
				r.poisonOnce++
			default:
				r.poisonExtra[j.id] = len(pks)
			}
			for _, pk := range pks {
				if pk.Reason != handler.ReasonDeliveryLimit || int(pk.DeliveryCount) < r.parkAt {
					r.poisonBadReason = append(r.poisonBadReason, fmt.Sprintf("%s: reason %q at delivery %d", j.id, pk.Reason, pk.DeliveryCount))
				}
			}
			continue
		}
		switch {
		case n == 0 && len(pks) == 0:
			r.lost = append(r.lost, fmt.Sprintf("%s (%s)", j.id, j.kind))
		case n == 0:
			r.healthyParked[j.id] = pks[0].Reason + ": " + pks[0].Error
		case n == 1:
			r.effectsOnce++
		}
		switch {
		case n == 1 && len(pks) > 0 && p.replayed[j.id]:
			r.replayedOnce[j.id] = pks[0].Reason + ": " + pks[0].Error
		case n > 0 && len(pks) > 0:
			r.effectAndParked = append(r.effectAndParked, j.id)
		}
		if n > 0 && !claims[j.id] {
			r.effectNoClaim = append(r.effectNoClaim, j.id)
		}
	}
	r.addedParts = p.addedPartitionsLine(r.lost)
	for id := range effects {
		if _, ok := p.byID[id]; !ok {
			r.unknownEffects++
		}
	}
	for id := range claims {
		if effects[id] == 0 {
			r.claimNoEffect = append(r.claimNoEffect, id)
		}
	}

	p.ev.mu.Lock()
	r.dupsAbsorbed, r.dupJobs = sumMap(p.ev.dups), len(p.ev.dups)
	r.finishes = maps.Clone(p.ev.finishes)
	for id, n := range p.ev.runs {
		if j, ok := p.byID[id]; ok {
			r.deliveries[j.kind] += n
		}
	}
	r.renewOK, r.renewFail, r.ackFails = p.ev.renewOK, p.ev.renewFail, p.ev.ackFails
	r.startRetries = p.ev.startRetry
	r.stalls = p.ev.stalls.report()
	r.pauses, r.resumes, r.longest = maps.Clone(p.ev.pauses), maps.Clone(p.ev.resumes), maps.Clone(p.ev.longest)
	p.ev.mu.Unlock()
	r.unexpected = p.fleet.crashes()
	p.faultMu.Lock()
	r.faults = slices.Clone(p.faults)
	p.faultMu.Unlock()
	if len(r.lost) > 0 {
		r.waiting = p.waitingPartitions(ctx)
	}
	return r, nil
}

// problems lists what makes the phase fail.
func (r *report) problems() []string {
	var out []string
	add := func(cond bool, format string, args ...any) {
		if cond {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	add(r.interrupted, "interrupted")
	add(!r.complete, "not every job was accounted for: %s", r.drainStop)
	add(r.produceErrs > 0, "%d jobs could not be produced", r.produceErrs)
	add(len(r.lost) > 0, "%d jobs LOST", len(r.lost))
	add(len(r.doubles) > 0, "%d jobs with a DOUBLE effect", len(r.doubles))
	add(len(r.poisonEffects) > 0, "%d poison jobs left an effect row (a rolled-back write leaked)", len(r.poisonEffects))
	add(len(r.poisonBadReason) > 0, "%d poison DLQ records without reason delivery-limit at the parking delivery", len(r.poisonBadReason))
	add(len(r.healthyParked) > 0, "%d healthy jobs parked in the DLQ and not run, even after a replay", len(r.healthyParked))
	add(r.replayErr != nil, "replay of parked healthy jobs failed: %v", r.replayErr)
	add(r.strict && len(r.replayedOnce) > 0, "%d healthy jobs were parked by an outage (-strict-parking)", len(r.replayedOnce))
	add(len(r.effectAndParked) > 0, "%d jobs both ran and were parked", len(r.effectAndParked))
	add(r.unknownEffects > 0, "%d effect rows for jobs the soak did not produce", r.unknownEffects)
	add(len(r.claimNoEffect) > 0, "%d claims without an effect", len(r.claimNoEffect))
	add(len(r.effectNoClaim) > 0, "%d effects without a claim", len(r.effectNoClaim))
	add(r.redactionLeaks > 0, "%d DLQ records hold the unredacted secret", r.redactionLeaks)
	add(r.dlqMalformed > 0, "%d DLQ records do not parse", r.dlqMalformed)
	add(r.unexpected > 0, "%d worker processes exited without being asked to", r.unexpected)
	for _, f := range r.faults {
		add(f.err != nil, "fault %s failed: %v", f.kind, f.err)
	}
	for _, s := range r.sections {
		out = append(out, s.problems()...)
	}
	return out
}

func (r *report) ok() bool { return len(r.problems()) == 0 }

func (r *report) print(w io.Writer) {
	pf := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	pf("")
	pf("--- report: phase %s, brokers %s, %d worker processes, lock %v, delivery limit %d (parked on delivery %d), code %s", r.phase, r.brokers, r.workers, r.lock, r.groupLimit, r.parkAt, r.commit)
	pf("jobs produced            %d of %d (quick %d, slow %d, poison %d); produce errors %d",
		r.produced, r.planned[kindQuick]+r.planned[kindSlow]+r.planned[kindPoison],
		r.planned[kindQuick], r.planned[kindSlow], r.planned[kindPoison], r.produceErrs)
	healthy := r.planned[kindQuick] + r.planned[kindSlow]
	pf("effects exactly once     %d of %d non-poison jobs", r.effectsOnce, healthy)
	pf("lost                     %d", len(r.lost))
	for _, w := range r.waiting {
		pf("  waiting in             %s", w)
	}
	pf("double effects           %d", len(r.doubles))
	if r.addedParts != "" {
		pf("partitions added         %s", r.addedParts)
	}
	pf("poison parked once       %d of %d (reason delivery-limit, at delivery >= %d)", r.poisonOnce, r.planned[kindPoison], r.parkAt)
	pf("poison parked twice+     %d (at-least-once parking: a crash between the DLQ produce and the ACCEPT re-parks)", len(r.poisonExtra))
	pf("healthy jobs parked      %d by an outage, replayed with dlq.Replay and then run once; %d still parked", len(r.replayedOnce), len(r.healthyParked))
	pf("DLQ records              %d (malformed %d, unredacted secret %d)", r.dlqRecords, r.dlqMalformed, r.redactionLeaks)
	if r.brokerDLQ != "" {
		pf("  by the broker          %d in %s (archived records: a job's last delivery cut short, by a crash or an outage)", r.brokerRecords, r.brokerDLQ)
	} else {
		pf("  by the broker          none: no share-group dead-letter topic before Kafka 4.4")
	}
	pf("duplicates absorbed      %d deliveries of %d jobs found their claim and were ACCEPTed without running", r.dupsAbsorbed, r.dupJobs)
	if per := r.dupsPerBrokerRestart(); len(per) > 0 {
		pf("  per broker restart     %s (from each restart to the next, or the end; the worker faults between add a few)", strings.Join(per, ", "))
	}
	pf("deliveries ended         quick %d, slow %d, poison %d", r.deliveries[kindQuick], r.deliveries[kindSlow], r.deliveries[kindPoison])
	pf("acks                     %s", fmtCounts(r.finishes))
	pf("lock renewals            %d ok, %d failed; ack failures reported %d", r.renewOK, r.renewFail, r.ackFails)
	pf("worker restarts          start-up retries %d; unexpected exits %d", r.startRetries, r.unexpected)
	for _, l := range r.stalls.lines() {
		pf("%s", l)
	}
	if len(r.pauses) == 0 {
		pf("pauses (dependency down) none")
	}
	for _, d := range slices.Sorted(maps.Keys(r.pauses)) {
		pf("pauses (dependency down) %s: %d by the workers, %d resumed with it back, longest %v", d, r.pauses[d], r.resumes[d], r.longest[d])
	}
	kinds := map[string]int{}
	for _, f := range r.faults {
		kinds[f.kind]++
	}
	pf("faults injected          %s", fmtCounts(kinds))
	for _, f := range r.faults {
		status := f.detail
		if f.err != nil {
			status = "FAILED: " + f.err.Error()
		}
		pf("  +%5.1fs %-17s %s", f.at.Seconds(), f.kind, status)
	}
	var ts []string
	for _, k := range []string{"services", "produce+faults", "drain", "run", "phase"} {
		if d, ok := r.timings[k]; ok {
			ts = append(ts, fmt.Sprintf("%s %v", k, d.Round(100*time.Millisecond)))
		}
	}
	pf("timings                  %s", strings.Join(ts, ", "))
	show := func(title string, ids []string) {
		if len(ids) == 0 {
			return
		}
		slices.Sort(ids)
		if len(ids) > 20 {
			ids = append(ids[:20:20], fmt.Sprintf("... and %d more", len(ids)-20))
		}
		pf("%s:", title)
		for _, id := range ids {
			pf("  %s", id)
		}
	}
	show("LOST", r.lost)
	if r.killedParking != "" {
		pf("the poison job whose parking delivery was SIGKILLed, %s: %s", r.killedParking, r.fate(r.killedParking))
	}
	show("DOUBLE", r.doubles)
	show("poison parked more than once", mapLines(r.poisonExtra, func(k string, v int) string { return fmt.Sprintf("%s: %d records", k, v) }))
	show("poison with a wrong DLQ envelope", r.poisonBadReason)
	show("poison with an effect row", r.poisonEffects)
	show("healthy jobs parked, not run", mapLines(r.healthyParked, func(k, v string) string { return k + ": " + v }))
	show("healthy jobs parked by an outage, then replayed", mapLines(r.replayedOnce, func(k, v string) string { return k + ": " + v }))
	show("both ran and parked", r.effectAndParked)
	show("claims without an effect", r.claimNoEffect)
	show("effects without a claim", r.effectNoClaim)
	for _, s := range r.sections {
		s.printTo(w)
	}
	if r.kept != "" {
		pf("%s", r.kept)
	}
	if probs := r.problems(); len(probs) > 0 {
		pf("RESULT: FAIL")
		for _, s := range probs {
			pf("  - %s", s)
		}
	} else {
		pf("RESULT: PASS")
	}
	if len(r.replayedOnce) > 0 && !r.strict {
		pf("WARNING: %d healthy jobs used up their deliveries during an outage and were parked; they ran once after a replay (see RELIABILITY.md, \"Outages burn deliveries\")", len(r.replayedOnce))
	}
}

// fate describes what became of poison job id.
func (r *report) fate(id string) string {
	switch {
	case slices.ContainsFunc(r.lost, func(s string) bool { return strings.HasPrefix(s, id+" ") }):
		return "LOST (archived by the broker at its delivery limit, never parked)"
	case r.poisonExtra[id] > 0:
		return fmt.Sprintf("parked %d times", r.poisonExtra[id])
	case r.byBroker[id]:
		return "dead-lettered once, by the broker (the share group's dead-letter topic)"
	}
	return "parked once"
}

func fmtCounts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func mapLines[V any](m map[string]V, f func(string, V) string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, f(k, m[k]))
	}
	return out
}

// waitingPartitions describes the job topic's partitions that the group
// still has records of, as the broker says at the end (start offset, lag,
// log end), and names Kafka's stalled share partition where it fits:
// the records from the start offset reach the in-flight limit
// (share.partition.max.record.locks, Kafka's default, which the soak does
// not change), so the broker acquires no more of them
// (RELIABILITY.md, "A partition the broker stops serving").
func (p *phase) waitingPartitions(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	offs, err := p.adm.DescribeShareGroupOffsets(ctx, p.group)
	if err != nil {
		return []string{"(the group's offsets could not be read: " + err.Error() + ")"}
	}
	g := offs[p.group]
	ends, err := p.adm.ListEndOffsets(ctx, p.topic)
	if err != nil {
		return []string{"(the topic's end offsets could not be read: " + err.Error() + ")"}
	}
	var out []string
	for _, o := range g.Offsets.Sorted() {
		if o.Topic != p.topic || o.Err != nil || o.Lag <= 0 {
			continue
		}
		end, _ := ends.Lookup(o.Topic, o.Partition)
		line := fmt.Sprintf("partition %d: start offset %d, lag %d, log end %d", o.Partition, o.StartOffset, o.Lag, end.Offset)
		if o.StartOffset >= 0 && end.Offset-o.StartOffset >= soakRecordLocks {
			line += fmt.Sprintf(": %d records from the start offset, past the broker's in-flight limit (%d): Kafka's stalled share partition, seen on 4.3.1 and 4.4.0 (RELIABILITY.md; make soak-broker-probe reproduces it)", end.Offset-o.StartOffset, soakRecordLocks)
		}
		out = append(out, line)
	}
	return out
}

// soakRecordLocks is Kafka's share.partition.max.record.locks default,
// which the soak's groups keep.
const soakRecordLocks = 2000

// dupsPerBrokerRestart is, for each broker restart, the duplicates
// absorbed from its start to the next one's (or the end of the phase):
// mostly deliveries of done jobs the broker's share state brought back
// (docs/upstream/share-state-rollback.md).
func (r *report) dupsPerBrokerRestart() []string {
	var at []int
	for _, f := range r.faults {
		if f.kind == faultBrokerRestart || f.kind == faultPausedBrokerRestart {
			at = append(at, f.dupsBefore)
		}
	}
	out := make([]string, len(at))
	for i, before := range at {
		next := r.dupsAbsorbed
		if i+1 < len(at) {
			next = at[i+1]
		}
		out[i] = strconv.Itoa(next - before)
	}
	return out
}
