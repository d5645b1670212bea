// Package fleet keeps the fleet-wide view of shareq workers in Kafka: each
// worker publishes its status to a compacted topic (by default
// [TopicDefault]), keyed by its instance, every few seconds and within a
// second of a change, and a tombstone when it stops gracefully; the shareq
// command ("shareq workers") and the console read the topic through
// [Read].
//
// # Why a topic, and which
//
// Fleet-wide state must need nothing but Kafka (not every user has
// Postgres), survive the loss of any one process and be readable by the
// CLI and the console. A compacted topic holds each key's last value:
// here, each worker's last status. The status topic is created with
// cleanup.policy=compact,delete ([TopicConfigs]): a worker that crashed
// never writes its tombstone, and the delete half drops its last record
// after retention.ms; a live worker rewrites its own record every
// [Status.Every], so it is never lost to retention.
//
// Durable controls (pauses, live limits) are not statuses that expire:
// they belong in a topic of their own, compacted only, that every worker
// reads from its start. The status topic is not that topic, and nothing
// here assumes it is.
//
// # When a worker leaves the list
//
// A worker that stops gracefully writes a tombstone: it leaves the list
// at once. A worker that crashed (SIGKILL, a lost host) leaves it when its
// last record is older than [StaleAfter] times the interval it published
// at (15 s with the worker's default of 5 s). Its age is measured from the
// record's timestamp, which the worker's clock sets unless the topic uses
// message.timestamp.type=LogAppendTime: a reader whose clock runs ahead of
// a worker's by more than the bound does not list it.
//
// # What it costs
//
// An idle worker sends one produce request per interval (0.2 per second
// at the default), and one metadata request at start; BENCHMARKS.md
// section 9 has the figure. A reader reads the records of the last
// [ReadWindow] only (every live worker wrote one since), so reading does
// not grow with the topic's history.
//
// # A worker that cannot reach the topic
//
// Workers never create the status topic. A worker whose status topic is missing or
// not writable logs one line saying what to run or grant, runs its jobs
// as ever, and looks again every [RecheckEvery]; it publishes once the
// topic is there. Nothing the status topic does fails a job or the worker.
package fleet

import (
	"encoding/json"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// TopicDefault is the status topic workers publish to and readers read
// unless told otherwise. It does not begin with "__", which Kafka keeps
// for its internal topics (__consumer_offsets, __share_group_state).
const TopicDefault = "shareq.workers"

// Bounds and defaults of the publishing interval ([Status.Every]).
const (
	EveryDefault = 5 * time.Second
	EveryMin     = time.Second
	EveryMax     = time.Minute
)

// StaleAfter is how many publishing intervals a worker may stay silent
// before readers take it for gone (crashed, or cut off from Kafka).
const StaleAfter = 3

// ReadWindow is how far back [Read] reads: well beyond StaleAfter times
// EveryMax, so a live worker's last record is always inside it, with
// room for clocks that disagree by minutes.
const ReadWindow = 10 * time.Minute

// RecheckEvery is how often a worker whose status topic was missing or
// not writable looks again.
const RecheckEvery = time.Minute

// TopicConfigs are the status topic's configs, as "shareq topics create
// -workers" sets them: compacted (a worker's last status), and deleted
// after a day (a crashed worker's last status), in segments of an hour so
// compaction can run.
func TopicConfigs() map[string]*string {
	s := func(v string) *string { return &v }
	return map[string]*string{
		"cleanup.policy": s("compact,delete"),
		"retention.ms":   s("86400000"),
		"segment.ms":     s("3600000"),
	}
}

// Status is what a worker publishes about itself: the record value, as
// JSON, keyed by Instance. Fields may be added; readers ignore what they
// do not know.
type Status struct {
	// Instance identifies one run of a worker (Worker.Run): the record
	// key. It is new at every start.
	Instance string `json:"instance"`
	// Name is the worker's Kafka client ID (shareq-<host>-<pid> unless
	// its ClientOpts set another).
	Name    string `json:"name"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Version string `json:"version"` // of the shareq module the worker was built with
	Group   string `json:"group"`
	// Topics are the topics the worker handles.
	Topics      []string `json:"topics"`
	Concurrency int      `json:"concurrency"`
	MemberID    string   `json:"member_id,omitempty"`
	// State is the member's: "joining", "joined", "fenced", "left"; or
	// "starting" before the member exists.
	State string `json:"state"`

	Running      int `json:"running"`       // handlers running
	Buffered     int `json:"buffered"`      // fetched ahead of a free slot
	Held         int `json:"held"`          // records acquired, not yet acknowledged
	Waiting      int `json:"waiting"`       // jobs waiting for their keys' limits or breakers
	Snoozed      int `json:"snoozed"`       // snoozed jobs held until due
	BreakersOpen int `json:"breakers_open"` // keys whose breaker is open
	// DependenciesDown are the dependencies the worker is paused for
	// (handler.Unavailable), none when it runs.
	DependenciesDown []string `json:"dependencies_down,omitempty"`
	// RateTopic is the worker's rate-limited topic (worker.TopicRate),
	// RateLimit the limit in force for the whole group (the code's, or
	// one set with shareq limit) and RateShare this worker's part of it,
	// both in jobs a second; empty and zero without a rate limit.
	RateTopic string  `json:"rate_topic,omitempty"`
	RateLimit float64 `json:"rate_limit_per_second,omitempty"`
	RateShare float64 `json:"rate_share_per_second,omitempty"`
	// Paused are the worker's topics an operator paused (shareq pause),
	// with why and by whom; none while every topic runs.
	Paused []PausedTopic `json:"paused,omitempty"`

	StartedAt time.Time `json:"started_at"`
	// LastSeen is when the status was published: the record's timestamp
	// when read.
	LastSeen time.Time `json:"last_seen"`
	// Every is the interval the worker publishes at; readers drop the
	// worker StaleAfter intervals after LastSeen.
	Every time.Duration `json:"every_ns"`
}

// PausedTopic is one of a worker's topics an operator paused, as the
// worker applied it.
type PausedTopic struct {
	Topic  string    `json:"topic"`
	Reason string    `json:"reason"`
	By     string    `json:"by"`
	Since  time.Time `json:"since"` // when the pause took effect in the worker
}

// Stale reports whether s is older than its bound at now: its worker
// stopped publishing (crashed, or cannot reach Kafka).
func (s *Status) Stale(now time.Time) bool {
	every := s.Every
	if every <= 0 {
		every = EveryDefault
	}
	return now.Sub(s.LastSeen) > StaleAfter*every
}

func encode(s *Status) ([]byte, error) { return json.Marshal(s) }

func decode(b []byte) (*Status, error) {
	var s Status
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("fleet: status record: %w", err)
	}
	return &s, nil
}

// modulePath is the shareq module whose version a status names.
const modulePath = "github.com/shareq/shareq"

// Version is the version of the shareq module this binary was built with,
// from its build info: "(devel)" when it is built from a checkout,
// "unknown" without build info or when shareq is not in it.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if bi.Main.Path == modulePath {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == modulePath {
			if d.Replace != nil && d.Replace.Version != "" {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	if strings.HasPrefix(bi.Main.Path, modulePath+"/") {
		// One of shareq's other modules, built without the core as a
		// dependency it can name (a test binary lists none).
		return bi.Main.Version
	}
	return "unknown"
}

// OfGroup returns the statuses of ws whose group is group.
func OfGroup(ws []Status, group string) []Status {
	var out []Status
	for _, s := range ws {
		if s.Group == group {
			out = append(out, s)
		}
	}
	return out
}

// Age is how long before now s was published, to the second ("0s" for
// a status from a clock ahead of now's).
func Age(s Status, now time.Time) time.Duration {
	return max(0, now.Sub(s.LastSeen).Truncate(time.Second))
}

// RateText is s's rate limit for a table: "14/s (share 7/s)", or "-"
// without one.
func (s *Status) RateText() string {
	if s.RateTopic == "" {
		return "-"
	}
	return fmt.Sprintf("%s/s (share %s/s)", strconv.FormatFloat(s.RateLimit, 'g', 4, 64), strconv.FormatFloat(s.RateShare, 'g', 4, 64))
}
