package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/fleet"
	"github.com/shareq/shareq/internal/member"
)

// StatusTopicDefault is the topic a worker publishes its status to unless
// [StatusTopic] names another: what "shareq workers" and the console's
// Workers page read.
const StatusTopicDefault = fleet.TopicDefault

// StatusEveryDefault is the default of [StatusEvery].
const StatusEveryDefault = fleet.EveryDefault

// statusConfig is what StatusTopic and StatusEvery set.
type statusConfig struct {
	topic    string
	topicSet bool
	every    time.Duration
	recheck  time.Duration // 0: fleet.RecheckEvery; tests shorten it
}

// StatusTopic names the compacted topic the worker publishes its status
// to (default [StatusTopicDefault]); "" turns publishing off. While it
// runs, the worker writes its name, host, version, group, topics,
// concurrency, jobs running, held, waiting and snoozed, open breakers,
// dependencies down and topics paused there every [StatusEvery] and within a second of a
// change, keyed by its instance, and a tombstone when it stops: "shareq
// workers" and the console list the workers from it. A worker never
// creates the topic ("shareq topics create -workers" does): when it is
// missing or not writable, the worker logs one line saying what to run
// or grant and runs its jobs as ever (docs/operating.md, "Workers").
func StatusTopic(name string) Option {
	return optionFunc(func(c *config) { c.status.topic, c.status.topicSet = name, true })
}

// StatusEvery sets how often the worker publishes a status that has not
// changed (default [StatusEveryDefault], from 1s to 1m). A worker that
// crashed leaves the list when its last status is 3 intervals old.
func StatusEvery(d time.Duration) Option {
	return optionFunc(func(c *config) { c.status.every = d })
}

func (c *config) checkStatus(bad func(format string, args ...any)) {
	if !c.status.topicSet {
		c.status.topic = StatusTopicDefault
	}
	if c.status.every == 0 {
		c.status.every = StatusEveryDefault
	}
	if c.status.topic != "" {
		if why := badTopic(c.status.topic); why != "" {
			bad("StatusTopic(%q): %s", c.status.topic, why)
		}
	}
	if c.status.every < fleet.EveryMin || c.status.every > fleet.EveryMax {
		bad("StatusEvery(%v): must be from %v to %v", c.status.every, fleet.EveryMin, fleet.EveryMax)
	}
}

// publishStatus publishes the worker's status through cl until ctx is
// done, then its tombstone; it returns at once when StatusTopic is "".
func (w *Worker) publishStatus(ctx context.Context, cl *kgo.Client, m *member.Member, x *executor, clientID string, log *slog.Logger) {
	if w.cfg.status.topic == "" {
		return
	}
	host, _ := os.Hostname()
	seeds := strings.Join(w.seeds(cl), ",")
	if seeds == "" {
		seeds = w.bootstrap()
	}
	base := fleet.Status{
		Instance: newInstance(), Name: clientID, Host: host, PID: os.Getpid(), Version: fleet.Version(),
		Group: w.cfg.group, Topics: w.Topics(), Concurrency: w.cfg.concurrency, StartedAt: time.Now(),
	}
	fleet.Publish(ctx, fleet.PublisherConfig{
		Client: cl, Topic: w.cfg.status.topic, Every: w.cfg.status.every, Recheck: w.cfg.status.recheck, Logger: log,
		CreateHint: "shareq topics create -workers" + w.statusTopicFlag() + " -brokers " + seeds,
		Bootstrap:  strings.Split(seeds, ",")[0],
		Snapshot: func() fleet.Status {
			s := base
			ms := memberStats(m.Stats(), x, clientID)
			s.MemberID, s.State = ms.MemberID, ms.State
			s.Running, s.Buffered, s.Held, s.Waiting, s.Snoozed, s.BreakersOpen = ms.Running, ms.Buffered, ms.Held, ms.Waiting, ms.Snoozed, ms.BreakersOpen
			s.RateTopic, s.RateLimit, s.RateShare = ms.RateTopic, ms.RateLimit, ms.RateShare
			s.DependenciesDown = w.DependenciesDown()
			for _, p := range w.PausedTopics() {
				s.Paused = append(s.Paused, fleet.PausedTopic{Topic: p.Topic, Reason: p.Reason, By: p.By, Since: p.Since})
			}
			return s
		},
	})
}

// statusTopicFlag is the -workers-topic flag of the create hint when the
// topic is not the default.
func (w *Worker) statusTopicFlag() string {
	if w.cfg.status.topic == StatusTopicDefault {
		return ""
	}
	return " -workers-topic " + w.cfg.status.topic
}

// newInstance returns a random ID for one run of a worker.
func newInstance() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
