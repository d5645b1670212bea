package worker

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// topicWatchEvery is how often a running worker checks that its topics are
// still the ones it started on.
const topicWatchEvery = 10 * time.Second

// watchTopics checks, every topicWatchEvery until ctx is done, that each
// topic still exists with the ID it had when the worker started, and says
// so when it does not: a deleted topic is logged at Error level once (its
// jobs are gone), and a topic re-created under the same name is logged
// and reported to the TopicObserver. The share-group member itself takes
// up the new topic ID from its metadata and the group's assignment. A
// topic that gains partitions is checked for records the group skipped
// on them (growthCheck, KAFKA-20742).
func (w *Worker) watchTopics(ctx context.Context, cl *kgo.Client, log *slog.Logger) {
	adm := kadm.NewClient(cl)
	ids := maps.Clone(w.topicIDs)
	obs, ok := w.cfg.observer.(TopicObserver)
	if !ok {
		obs = nopTopicObserver{}
	}
	parts := maps.Clone(w.topicParts)
	grown := newGrowthCheck(w, adm, log)
	gone := map[string]bool{}
	tick := time.NewTicker(topicWatchEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		lctx, cancel := context.WithTimeout(ctx, topicWatchEvery)
		listed, err := adm.ListTopics(lctx, w.topics...)
		cancel()
		if err != nil {
			continue // brokers unreachable: the member logs its own errors
		}
		for _, name := range w.topics {
			d, ok := listed[name]
			deleted := !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition)
			if !deleted && d.Err != nil {
				continue // not authorized, or a broker hiccup: say nothing new
			}
			if deleted != gone[name] {
				gone[name] = deleted
				if deleted {
					log.Error("topic deleted: its jobs are gone, and the worker waits for it to be re-created", "topic", name)
				}
				obs.TopicMissing(name, deleted)
			}
			if !deleted && d.ID != ids[name] {
				log.Error("topic deleted and re-created: the worker consumes the new one (jobs of the old one not yet done are gone with it)",
					"topic", name, "old_id", ids[name].String(), "new_id", d.ID.String())
				ids[name] = d.ID
				obs.TopicRecreated(name)
				parts[name] = len(d.Partitions)
				grown.forget(name)
			}
			if n := len(d.Partitions); !deleted && n > parts[name] {
				grown.added(name, parts[name], n)
				parts[name] = n
			}
		}
		grown.check(ctx)
	}
}

// nopTopicObserver stands in when no observer implements TopicObserver.
type nopTopicObserver struct{}

func (nopTopicObserver) TopicMissing(string, bool) {}
func (nopTopicObserver) TopicRecreated(string)     {}
