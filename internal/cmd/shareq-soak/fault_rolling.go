package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The rolling-restart fault (3-node phase): every node restarted in turn,
// as a rolling upgrade does, while the workers run: SIGTERM (a controlled
// shutdown, leadership moved away first), started again on its data, and
// the next node only once this one is back in the ISR of every partition
// of the phase's topics, so that no partition ever has fewer than two
// replicas in sync.

// isrWait bounds how long a restarted node may take to catch up.
const isrWait = 2 * time.Minute

// rollingRestart is the rolling-restart fault.
func (p *phase) rollingRestart(ctx context.Context) (string, error) {
	if p.kc == nil || p.kc.Nodes < 3 {
		return "", fmt.Errorf("a rolling restart needs the 3-node cluster")
	}
	busy := p.waitBusy(ctx)
	start := time.Now()
	p.hit()
	var steps []string
	for n := 1; n <= p.kc.Nodes; n++ {
		t0 := time.Now()
		if err := p.svc.stopNode(ctx, p.kc, n, false); err != nil {
			return "", fmt.Errorf("stop node %d: %w", n, err)
		}
		down := time.Since(t0)
		if err := p.svc.startNode(ctx, p.kc, n); err != nil {
			return "", fmt.Errorf("start node %d: %w", n, err)
		}
		up := time.Since(t0)
		if err := p.waitInISR(ctx, int32(n)); err != nil {
			return "", err
		}
		steps = append(steps, fmt.Sprintf("node %d stopped in %v, serving after %v, in every ISR after %v",
			n, down.Round(100*time.Millisecond), up.Round(100*time.Millisecond), time.Since(t0).Round(100*time.Millisecond)))
	}
	return fmt.Sprintf("%d jobs in hand; %s; all %d nodes restarted in %v",
		busy, strings.Join(steps, "; "), p.kc.Nodes, time.Since(start).Round(100*time.Millisecond)), nil
}

// waitInISR waits (up to isrWait) until node is in the ISR of every
// partition of the phase's topics.
func (p *phase) waitInISR(ctx context.Context, node int32) error {
	topics := append([]string{p.topic}, p.dlqTopics()...)
	deadline := time.Now().Add(isrWait)
	var missing []string
	for {
		missing = missing[:0]
		mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		md, err := p.adm.Metadata(mctx, topics...)
		cancel()
		if err == nil {
			for _, t := range topics {
				td, ok := md.Topics[t]
				if !ok || len(td.Partitions) == 0 {
					missing = append(missing, t)
					continue
				}
				for _, pd := range td.Partitions {
					if !slices.Contains(pd.ISR, node) {
						missing = append(missing, fmt.Sprintf("%s/%d", t, pd.Partition))
					}
				}
			}
			if len(missing) == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("node %d not back in the ISR of %v within %v (last error: %v)", node, missing, isrWait, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
