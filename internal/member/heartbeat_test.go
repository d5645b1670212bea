package member_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/member"
)

// heartbeats counts the ShareGroupHeartbeat requests a client writes.
type heartbeats struct{ n atomic.Int64 }

func (h *heartbeats) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == kmsg.ShareGroupHeartbeat.Int16() && err == nil {
		h.n.Add(1)
	}
}

// The member heartbeats at the interval the coordinator returns, one
// request at a time: a short interval (worker.SessionTimeout asks for a
// sixth of the session) costs one heartbeat per interval, not more. On
// Kafka the group's share.heartbeat.interval.ms sets it (200 ms here);
// kfake returns its broker config (100 ms).
func TestHeartbeatsFollowTheReturnedInterval(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var interval time.Duration
	if c.HonoursGroupSessionTimeout {
		interval = 200 * time.Millisecond
		c.SetGroupConfig(t, group, map[string]string{groupcfg.HeartbeatIntervalMs: "200"})
	} else {
		m, err := groupcfg.Broker(ctx, c.Client(t), groupcfg.BrokerHeartbeatIntervalMs)
		ms, _ := strconv.Atoi(m[groupcfg.BrokerHeartbeatIntervalMs])
		if err != nil || ms <= 0 {
			t.Fatalf("broker heartbeat interval %v (%v)", m, err)
		}
		interval = time.Duration(ms) * time.Millisecond
	}
	var hb heartbeats
	r := start(t, c, group, []string{topic}, func(cfg *member.Config) {
		cfg.Client = c.Client(t, kgo.ConnIdleTimeout(10*time.Minute), kgo.WithHooks(&hb))
	})
	r.waitFor("joined", func() bool { return r.m.Stats().State == member.Joined })
	const n = 10
	from, began := hb.n.Load(), time.Now()
	r.waitFor("10 more heartbeats", func() bool { return hb.n.Load() >= from+n })
	took := time.Since(began)
	t.Logf("%s: %d heartbeats in %v at a %v interval", c.Kind, n, took.Round(time.Millisecond), interval)
	if low := (n - 1) * interval; took < low {
		t.Errorf("%d heartbeats in %v, faster than one per %v (%v)", n, took, interval, low)
	}
	if high := n*interval*3 + 2*time.Second; took > high {
		t.Errorf("%d heartbeats took %v, slower than the %v interval allows (%v)", n, took, interval, high)
	}
	r.leave()
}

// A member that joins with no partitions heartbeats every 200 ms
// (AssignmentPollDefault) during its first interval rather than once:
// Kafka answers the join with an empty assignment and makes the
// assignment apart from it (KIP-1263), so at a 3 s interval the
// partitions would otherwise come in the second heartbeat, 3 s after the
// join. kfake assigns in the join's answer.
func TestFirstAssignmentComesBeforeTheInterval(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 2), c.Group(t)
	const interval = 3 * time.Second
	if c.HonoursGroupSessionTimeout {
		c.SetGroupConfig(t, group, map[string]string{groupcfg.SessionTimeoutMs: "15000", groupcfg.HeartbeatIntervalMs: "3000"})
	}
	var hb heartbeats
	began := time.Now()
	r := start(t, c, group, []string{topic}, func(cfg *member.Config) {
		cfg.Client = c.Client(t, kgo.ConnIdleTimeout(10*time.Minute), kgo.WithHooks(&hb))
	})
	r.waitFor("partitions", func() bool { return r.m.Stats().Partitions == 2 })
	took, n := time.Since(began), hb.n.Load()
	t.Logf("%s: partitions %v after the start, in heartbeat %d", c.Kind, took.Round(time.Millisecond), n)
	if c.HonoursGroupSessionTimeout && took >= interval {
		t.Errorf("the assignment came %v after the start, not before the %v interval", took, interval)
	}
	if most := int64(took/(200*time.Millisecond)) + 2; n > most {
		t.Errorf("%d heartbeats in %v: more than one per 200 ms (%d)", n, took, most)
	}
	r.leave()
}

// beatTimes notes when a client writes each ShareGroupHeartbeat.
type beatTimes struct {
	mu sync.Mutex
	at []time.Time
}

func (b *beatTimes) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == kmsg.ShareGroupHeartbeat.Int16() && err == nil {
		b.mu.Lock()
		b.at = append(b.at, time.Now())
		b.mu.Unlock()
	}
}

// gaps returns the shortest and longest time between consecutive
// heartbeats so far, and how many there were.
func (b *beatTimes) gaps() (shortest, longest time.Duration, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := 1; i < len(b.at); i++ {
		g := b.at[i].Sub(b.at[i-1])
		if i == 1 || g < shortest {
			shortest = g
		}
		longest = max(longest, g)
	}
	return shortest, longest, len(b.at)
}

// A member given AssignmentPoll (the worker gives half the group's
// share.assignment.interval.ms) heartbeats that often while it waits for
// its first partitions, and no more often. On Kafka the group's interval
// is 1 s, so the member waits about a second, polling every 50 ms: no
// two heartbeats closer than that, and some closer than the default
// 200 ms (a timer fires late under load, never early). kfake assigns in
// the join's answer: one heartbeat, nothing to compare.
func TestFirstAssignmentAtTheAssignmentPoll(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 2), c.Group(t)
	const poll = 50 * time.Millisecond
	// assignsApart: the broker has share.assignment.interval.ms (Kafka
	// 4.3+), so it answers the join with no partitions and assigns them
	// later; Kafka 4.2 lacks the config (and refuses it).
	assignsApart := false
	if c.HonoursGroupSessionTimeout {
		cfgs := map[string]string{groupcfg.SessionTimeoutMs: "15000", groupcfg.HeartbeatIntervalMs: "3000"}
		known, err := groupcfg.Describe(t.Context(), c.Client(t), group, groupcfg.AssignmentIntervalMs)
		if err != nil {
			t.Fatal(err)
		}
		if _, assignsApart = known[groupcfg.AssignmentIntervalMs]; assignsApart {
			cfgs[groupcfg.AssignmentIntervalMs] = "1000"
		}
		c.SetGroupConfig(t, group, cfgs)
	}
	var hb beatTimes
	began := time.Now()
	r := start(t, c, group, []string{topic}, func(cfg *member.Config) {
		cfg.Client = c.Client(t, kgo.ConnIdleTimeout(10*time.Minute), kgo.WithHooks(&hb))
		cfg.AssignmentPoll = poll
	})
	r.waitFor("partitions", func() bool { return r.m.Stats().Partitions == 2 })
	took := time.Since(began)
	shortest, longest, n := hb.gaps()
	t.Logf("%s: partitions %v after the start, after %d heartbeats %v to %v apart", c.Kind, took.Round(time.Millisecond), n,
		shortest.Round(time.Millisecond), longest.Round(time.Millisecond))
	if n < 2 {
		if assignsApart {
			t.Fatalf("the partitions came in the join's answer; Kafka makes the assignment apart from it")
		}
		r.leave()
		return
	}
	if shortest < poll-5*time.Millisecond {
		t.Errorf("two heartbeats %v apart: more often than AssignmentPoll %v", shortest, poll)
	}
	if shortest >= member.AssignmentPollDefault {
		t.Errorf("no two heartbeats closer than %v: AssignmentPoll %v not followed", shortest, poll)
	}
	r.leave()
}
