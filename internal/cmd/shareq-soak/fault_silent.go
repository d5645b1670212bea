package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/cutproxy"
	"github.com/shareq/shareq/worker"
)

// The silent-network faults: every worker slot of the single-broker
// phase reaches its broker and Postgres through proxies of its own
// (internal/cutproxy), and the fault silences one slot's proxy (no byte
// passes either way, nothing is closed, new connections are accepted and
// held) for longer than the record lock and the session timeout, then
// lets it speak again. The worker must notice within its request
// timeouts, say so, and recover; the soak's checks say whether anything
// was lost or run twice.
const (
	faultSilentBroker   = "silent-broker"
	faultSilentPostgres = "silent-postgres"
)

// silentRoutes are the proxies of the slots, by slot index.
type silentRoutes struct {
	kafka, pg []*cutproxy.Proxy
}

// silentKinds returns the silent faults the phase throws: in the full
// soak's single-broker phase, as the flags say.
func (p *phase) silentKinds() []string {
	if p.o.short || p.name == phaseCluster3 || p.name == phaseOverload || len(p.seeds) != 1 {
		return nil
	}
	var kinds []string
	if p.o.silentBroker {
		kinds = append(kinds, faultSilentBroker)
	}
	if p.o.silentPostgres {
		kinds = append(kinds, faultSilentPostgres)
	}
	return kinds
}

// routeSilent puts a proxy to the broker and one to Postgres in front of
// every slot of the fleet, when the phase throws a silent fault; close
// stops them.
func (p *phase) routeSilent() (close func(), err error) {
	close = func() {}
	if len(p.silentKinds()) == 0 {
		return close, nil
	}
	pgu, err := url.Parse(p.pgURL)
	if err != nil {
		return close, fmt.Errorf("postgres url: %w", err)
	}
	r := &silentRoutes{}
	close = func() {
		for _, px := range append(r.kafka, r.pg...) {
			px.Close()
		}
	}
	for _, s := range p.fleet.slots {
		kpx, err := cutproxy.Start(p.seeds[0])
		if err != nil {
			return close, err
		}
		r.kafka = append(r.kafka, kpx)
		ppx, err := cutproxy.Start(pgu.Host)
		if err != nil {
			return close, err
		}
		r.pg = append(r.pg, ppx)
		u := *pgu
		u.Host = ppx.Addr()
		s.extra = []string{"-kafka-via", kpx.Addr(), "-pg", u.String()}
		if smp := p.ext.smp; smp != nil {
			// The slot's connections end at its proxies: count them as
			// the broker's and Postgres's (the sampler runs after this).
			smp.addPort(smp.kafkaPorts, kpx.Addr())
			smp.addPort(smp.pgPorts, ppx.Addr())
		}
	}
	p.silent = r
	return close, nil
}

// silentFor is how long a silent fault lasts: longer than the record lock
// and the worker's session timeout, and than franz-go's request timeout
// (10 s), so that the worker's locks expire, the group fences it, and it
// has noticed before the network comes back.
func (p *phase) silentFor() time.Duration {
	return p.lock + worker.SessionTimeoutDefault + 10*time.Second + 5*time.Second
}

// silentFault silences the network between one busy worker and its
// broker (or Postgres), and reports when the worker said it noticed and
// when it said it recovered, from its log.
func (p *phase) silentFault(ctx context.Context, kind string) (string, error) {
	if p.silent == nil {
		return "", errors.New("the workers are not routed through proxies")
	}
	i, busy, err := p.pickWorker(ctx)
	if err != nil {
		return "", err
	}
	px, what := p.silent.kafka[i], "broker"
	noticed, back := "member: no answer from broker", "answering again"
	if kind == faultSilentPostgres {
		px, what = p.silent.pg[i], "Postgres"
		noticed, back = "dependency down; the worker paused", "dependency back; the worker resumed"
	}
	slot := p.fleet.slots[i]
	logPath := filepath.Join(p.logDir, slot.name+".log")
	from := fileSize(logPath)
	proc := p.fleet.running()[i]
	d := p.silentFor()
	p.hit()
	// A worker already paused for Postgres (an earlier fault's restart
	// just before) logs no second "dependency down": one line per outage.
	// The silence extends the outage it noticed already.
	already := kind == faultSilentPostgres && lastLineIs(logPath, from, noticed, back)
	start := time.Now()
	px.Silence()
	sawAt := start
	if !already {
		sawAt = waitLine(ctx, logPath, from, noticed, d)
	}
	if wait := time.Until(start.Add(d)); wait > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	px.Resume()
	resumed := time.Now()
	backAt := waitLine(ctx, logPath, from, back, time.Minute)
	if sawAt.IsZero() {
		return "", fmt.Errorf("worker %s (%d jobs in hand): %s silent for %v, and its log has no line %q", proc, busy, what, d, noticed)
	}
	detail := fmt.Sprintf("worker %s (%d jobs in hand): its %s connections silent for %v; it logged %q %v after the silence began",
		proc, busy, what, d.Round(100*time.Millisecond), noticed, sawAt.Sub(start).Round(100*time.Millisecond))
	if already {
		detail = fmt.Sprintf("worker %s (%d jobs in hand): its %s connections silent for %v while it was paused for %s already (an earlier fault's; its %q came before the silence)",
			proc, busy, what, d.Round(100*time.Millisecond), what, noticed)
	}
	if backAt.IsZero() {
		return "", fmt.Errorf("%s, and no line %q within 1m after the network came back", detail, back)
	}
	return fmt.Sprintf("%s and %q %v after the network came back (%d connections held while silent)",
		detail, back, backAt.Sub(resumed).Round(100*time.Millisecond), px.Held()), nil
}

// viaProxy returns the client options of a worker whose broker
// connections all go to addr (-kafka-via: the phase has one broker), or
// none.
func viaProxy(addr string) []kgo.Opt {
	if addr == "" {
		return nil
	}
	return []kgo.Opt{kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	})}
}

// lastLineIs reports whether, in the log at path up to offset to, the
// last line holding on or off holds on.
func lastLineIs(path string, to int64, on, off string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	b = b[:min(int64(len(b)), to)]
	return bytes.LastIndex(b, []byte(on)) > bytes.LastIndex(b, []byte(off))
}

// waitLine waits up to max for a line holding s in the log at path past
// offset from, and returns when it saw it (zero: it did not).
func waitLine(ctx context.Context, path string, from int64, s string, max time.Duration) time.Time {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if b, err := os.ReadFile(path); err == nil && int64(len(b)) > from && bytes.Contains(b[from:], []byte(s)) {
			return time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Time{}
}
