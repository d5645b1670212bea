package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The partitions-added fault (-partitions-added N): N partitions are added
// to the job topic while the workers run, and the producer goes on writing
// to every partition, the new ones included. The workers' members take the
// new partitions up from the group's next assignment; the phase fails on
// any job lost, on the new partitions as anywhere.
//
// KAFKA-20742 (Kafka before 4.4: an added partition starts at
// share.auto.offset.reset) loses jobs only in a group at latest; the
// soak's group is at earliest, so it loses none on 4.3.1 either. The
// worker's own check of what a group at latest skipped is pinned by
// worker.TestPartitionsAddedMidRun.

// addedPartitions is what the fault did, for verify.
type addedPartitions struct {
	n atomic.Int32 // partitions added to the job topic
}

// addPartitions is the partitions-added fault.
func (p *phase) addPartitions(ctx context.Context) (string, error) {
	busy := p.waitBusy(ctx)
	before := partitions + int(p.added.n.Load())
	p.hit()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := p.adm.CreatePartitions(cctx, p.o.partitionsAdded, p.topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return "", fmt.Errorf("add %d partitions to %s: %w", p.o.partitionsAdded, p.topic, err)
	}
	start := time.Now()
	p.added.n.Add(int32(p.o.partitionsAdded))
	// The producer learns of them from its metadata; wait for a job
	// written to one of them. A refresh right after the creation may be
	// answered by a broker that has not heard of them yet (on the 3-node
	// cluster the producer then kept the old count until an outage made
	// it refresh again, past the 30 s), so it is asked again each second.
	p.cl.ForceMetadataRefresh()
	refresh := time.Now()
	for p.jobsOnAdded() == 0 {
		if time.Since(refresh) >= time.Second {
			p.cl.ForceMetadataRefresh()
			refresh = time.Now()
		}
		if int(p.produced.Load())+int(p.produceErrs.Load()) == len(p.jobs) {
			// Every job was handed to the producer before the partitions
			// were added (a broker outage before this fault lets the
			// producer catch up at once): nothing is left to write.
			return fmt.Sprintf("%d partitions added to %s (%d → %d) with %d jobs in hand, after the last job was produced: none written to them",
				p.o.partitionsAdded, p.topic, before, before+p.o.partitionsAdded, busy), nil
		}
		select {
		case <-cctx.Done():
			return "", fmt.Errorf("%d partitions added to %s, but no job was written to them within 30 s", p.o.partitionsAdded, p.topic)
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Sprintf("%d partitions added to %s (%d → %d) with %d jobs in hand; the producer wrote to them after %v",
		p.o.partitionsAdded, p.topic, before, before+p.o.partitionsAdded, busy, time.Since(start).Round(time.Millisecond)), nil
}

// jobsOnAdded counts the jobs written so far to the added partitions.
func (p *phase) jobsOnAdded() int {
	n := 0
	p.eachOnAdded(func(string) { n++ })
	return n
}

// eachOnAdded calls f with the ID of each job written to an added
// partition.
func (p *phase) eachOnAdded(f func(id string)) {
	if p.added.n.Load() == 0 {
		return
	}
	prefix := p.topic + "/"
	p.locID.Range(func(k, v any) bool {
		loc, ok := strings.CutPrefix(k.(string), prefix)
		if !ok {
			return true
		}
		part, _, _ := strings.Cut(loc, "/")
		if n, err := strconv.Atoi(part); err == nil && n >= partitions {
			f(v.(string))
		}
		return true
	})
}

// addedPartitionsLine says, for the report, how many jobs went to the
// added partitions and how many of them are among lost; "" without the
// fault.
func (p *phase) addedPartitionsLine(lost []string) string {
	if p.added.n.Load() == 0 {
		return ""
	}
	isLost := map[string]bool{}
	for _, l := range lost {
		id, _, _ := strings.Cut(l, " ")
		isLost[id] = true
	}
	written, lostThere := 0, 0
	p.eachOnAdded(func(id string) {
		written++
		if isLost[id] {
			lostThere++
		}
	})
	return fmt.Sprintf("%d added; %d jobs written to them, %d of them lost (counted in lost above)", p.added.n.Load(), written, lostThere)
}
