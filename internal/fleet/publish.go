package fleet

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/acl"
)

// tombstoneWait bounds the tombstone a stopping worker writes.
const tombstoneWait = 5 * time.Second

// PublisherConfig is what [Publish] needs.
type PublisherConfig struct {
	// Client produces the statuses; Publish does not close it.
	Client *kgo.Client
	Topic  string
	// Every is the interval between two statuses that say the same
	// (EveryMin to EveryMax); a status that changed (its state, its
	// counts of jobs, its dependencies down) is published within a
	// second, at most once a second.
	Every time.Duration
	// Snapshot returns the worker's status now; Publish sets its
	// LastSeen and Every.
	Snapshot func() Status
	// CreateHint is the command that creates the topic, for the line
	// logged when it is missing.
	CreateHint string
	// Bootstrap is the brokers' address for the kafka-acls.sh line
	// logged when a right is missing.
	Bootstrap string
	Logger    *slog.Logger
	// Recheck is how often a missing or unwritable topic is looked at
	// again; 0: RecheckEvery.
	Recheck time.Duration
}

// Publish publishes cfg.Snapshot's statuses until ctx is done, then a
// tombstone. It never fails: a missing or unwritable topic is logged once
// and looked at again every RecheckEvery.
func Publish(ctx context.Context, cfg PublisherConfig) {
	if cfg.Recheck <= 0 {
		cfg.Recheck = RecheckEvery
	}
	p := &publisher{cfg: cfg}
	// A change is published within a second: look once a second.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		p.step(ctx, time.Now())
		select {
		case <-ctx.Done():
			p.leave(ctx)
			return
		case <-tick.C:
		}
	}
}

// publisher's fields are owned by Publish's goroutine.
type publisher struct {
	cfg PublisherConfig

	ready     bool      // the topic was found and the last write went through
	checked   time.Time // when the topic was last looked for
	problem   string    // the last problem logged; "" when none
	last      Status    // the last status published
	published time.Time // when it was
}

// step publishes a status when one is due: the interval passed, or the
// status changed.
func (p *publisher) step(ctx context.Context, now time.Time) {
	if !p.ready {
		if !p.checked.IsZero() && now.Sub(p.checked) < p.cfg.Recheck {
			return
		}
		p.checked = now
		if !p.findTopic(ctx) {
			return
		}
	}
	s := p.cfg.Snapshot()
	if now.Sub(p.published) < p.cfg.Every && sameState(&s, &p.last) {
		return
	}
	s.LastSeen, s.Every = now, p.cfg.Every
	if err := p.write(ctx, &s); err != nil {
		return
	}
	p.last, p.published = s, now
}

// findTopic reports whether the status topic exists and can be described,
// and logs the first problem.
func (p *publisher) findTopic(ctx context.Context) bool {
	md, err := kadm.NewClient(p.cfg.Client).ListTopics(ctx, p.cfg.Topic)
	if err == nil {
		if d, ok := md[p.cfg.Topic]; !ok {
			err = kerr.UnknownTopicOrPartition
		} else {
			err = d.Err
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			p.report("Describe", err)
		}
		return false
	}
	p.ready = true
	return true
}

func (p *publisher) write(ctx context.Context, s *Status) error {
	v, err := encode(s)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, p.cfg.Every)
	defer cancel()
	err = p.cfg.Client.ProduceSync(wctx, &kgo.Record{Topic: p.cfg.Topic, Key: []byte(s.Instance), Value: v}).FirstErr()
	if err != nil {
		if ctx.Err() == nil {
			p.ready = false
			p.checked = time.Now()
			p.report("Write", err)
		}
		return err
	}
	if p.problem != "" {
		p.problem = ""
		p.cfg.Logger.Info("publishing this worker's status", "topic", p.cfg.Topic)
	}
	return nil
}

// report logs err, met asking for op on the topic, once: the same
// problem again is not logged.
func (p *publisher) report(op string, err error) {
	var msg string
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		msg = "status topic " + p.cfg.Topic + " does not exist: this worker runs on but is not listed by shareq workers or the console; create the topic with: " + p.cfg.CreateHint
	case acl.Denied(err):
		msg = "status topic " + p.cfg.Topic + ": this worker runs on but is not listed by shareq workers or the console: " +
			acl.Missing(acl.Right{Op: op, Resource: acl.Topic, Name: p.cfg.Topic}, p.cfg.Bootstrap, err)
	default:
		msg = "status topic " + p.cfg.Topic + ": cannot publish this worker's status (" + err.Error() + "); it runs on, and tries again"
	}
	if msg == p.problem {
		return
	}
	p.problem = msg
	p.cfg.Logger.Info(msg, "looks_again_every", p.cfg.Recheck)
}

// leave writes the tombstone that takes the worker off the list at once.
func (p *publisher) leave(ctx context.Context) {
	if !p.ready || p.last.Instance == "" {
		return // nothing published: nothing to take back
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tombstoneWait)
	defer cancel()
	key := []byte(p.last.Instance)
	if err := p.cfg.Client.ProduceSync(wctx, &kgo.Record{Topic: p.cfg.Topic, Key: key}).FirstErr(); err != nil {
		p.cfg.Logger.Info("status topic "+p.cfg.Topic+": cannot write this worker's tombstone: it leaves the list once its last status is stale",
			"error", err, "stale_after", StaleAfter*p.cfg.Every)
	}
}

// sameState reports whether a and b say the same but for when they
// were published.
func sameState(a, b *Status) bool {
	x, y := *a, *b
	x.LastSeen, x.Every, y.LastSeen, y.Every = time.Time{}, 0, time.Time{}, 0
	return reflect.DeepEqual(x, y)
}
