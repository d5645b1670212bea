package member

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrNotHeld answers an ack or a renew for a record the member does not
// hold: never delivered, already acknowledged (or being acknowledged), or
// lost (see [Event.Lost]).
var ErrNotHeld = errors.New("member: record not held")

// MaxWaitDefault is the default [Config.MaxWait].
const MaxWaitDefault = 100 * time.Millisecond

// Config configures a [Member].
type Config struct {
	// Client is the transport: a plain client (no consumer options) with
	// the worker's seeds, TLS/SASL and ClientID; give it
	// kgo.ConnIdleTimeout(10*time.Minute) so idle share sessions keep
	// their connections. Required; the member never closes it.
	Client *kgo.Client
	// Group is the share group. Required.
	Group string
	// Topics are the subscribed topic names. Required.
	Topics []string
	// MemberID is the member's id; default a fresh random id, as KIP-848
	// and KIP-932 members generate one.
	MemberID string
	// MaxWait bounds each ShareFetch's long poll (MaxWaitMillis); default
	// [MaxWaitDefault].
	MaxWait time.Duration
	// Logger receives the member's logs; default slog.Default().
	Logger *slog.Logger
	// MaxBytes bounds the bytes (key, value and headers) of the records
	// in hand: delivered and their job not ended. Beyond it the member
	// fetches nothing until jobs end; one record larger than it is still
	// fetched, alone. The decoded-batch cache holds up to half as much
	// again. Default [MaxBytesDefault]; see bytes.go.
	MaxBytes int64
	// Priority orders the topics the fetches ask for (priority.go); nil:
	// every fetch asks for every assigned partition.
	Priority *Priority
	// AssignmentPoll is how often a member that joined with no
	// partitions heartbeats during its first heartbeat interval; default
	// [AssignmentPollDefault] (membership.go). A caller that knows the
	// group's assignment interval (Kafka's share.assignment.interval.ms)
	// gives about half of it, so that the partitions come soon after
	// the coordinator assigns them.
	AssignmentPoll time.Duration
}

// Member is one share-group member. Make it with [New], run it with
// [Member.Run]; every other method is safe for concurrent use and never
// blocks.
//
// Its fields fall in three groups by owner: set by New and read-only
// after; shared, under a mutex; and the rest, which only the goroutine
// running Run reads or writes. The methods other goroutines call touch
// only the first two groups: they queue work in the mailbox and wake Run.
type Member struct {
	// Set by New; read-only after.
	cfg    Config
	log    *slog.Logger
	wake   chan struct{} // post → Run: the mailbox has work (buffer 1)
	events chan Event    // Run → the executor; Run closes it when it returns
	quiet  chan struct{} // closed once by Run (signalQuiet); see [Member.Quiet]

	// Guarded by mu: what the methods queue for Run.
	mu      sync.Mutex
	mbox    mailbox
	started bool // Run was called

	// Guarded by statsMu: the snapshot Stats returns (stats, its Acks
	// nil, and statsAcks); Run writes it (publish) after each step.
	statsMu   sync.Mutex
	stats     Stats
	statsAcks ackCounts

	// Written by Run, read by anyone (Standing): when the coordinator last
	// answered a heartbeat (nanoseconds since born, on the monotonic
	// clock; 0: never), and how many times it fenced the member.
	born   time.Time
	beatAt atomic.Int64
	fences atomic.Int64

	// Everything below is owned by Run's goroutine.

	// Requests in flight each run in a goroutine of their own that only
	// does the I/O and sends its result on results (launch, requests.go).
	ioCtx    context.Context // parent of heartbeats, metadata and graceful closes; cancelled by drainIO
	ioCancel context.CancelFunc
	results  chan result // I/O goroutines → Run
	nIO      int         // I/O goroutines started whose result Run has not taken

	group membership // the heartbeats and the assignment (membership.go)
	meta  routing    // topic IDs, partition leaders, which session fetches what (membership.go)

	sessions map[int32]*session // a share session per broker id, made when first wanted, never removed (session.go)
	held     KeyMap[*held]      // every offset acquired and not yet acknowledged or lost (held.go)
	nHeld    int                // the entries of held that are deliveries, not internal
	nAcked   int                // of those, the ones with a terminal ack queued or sent (count keeps both)

	credit   int // records the executor granted that no delivery has used yet; below 0: delivered past it (a debt)
	reserved int // credit promised to the fetches in flight (their request.reserved)

	// The bytes in hand (bytes.go): of the deliveries whose job has not
	// ended (no terminal ack queued), within cfg.MaxBytes.
	bytes         int64
	reservedBytes int64 // room promised to the fetches in flight (their request.reservedBytes)
	recordSize    int64 // the delivered records' mean size, a moving average; 0 before the first
	fetchers      int   // the sessions that fetch, as of the last step
	// whole is wholeBatches' last answer and what it was computed for.
	whole struct {
		plan, decoded uint64
		fetchers      int
		credit        int
	}

	phase stopPhase // the stop sequence (stop.go)

	out      Event                // reports not yet taken from events; Run sends it whole
	taken    Event                // the last Event taken from events, whose slices out reuses next (sent)
	spare    mailbox              // the slices of the mailbox taken last, for the next (take)
	st       Stats                // counters and state, Acks nil; publish copies them into stats
	acks     ackCounts            // Stats.Acks, by type
	fetchRTT time.Duration        // moving average of the round trips of fetches that brought records
	dec      *decoder             // decoded record batches, reused across fetches (decode.go)
	logged   map[string]time.Time // logEvery: when each kind of message was last logged at its level
	unreach  map[string]outage    // noteReach: the peers not answering (reach.go)
	// refs and slots are takeOps' scratch, kept for the next request.
	refs  []ref
	slots []*held
	// idleMarks holds, per partition wanted (routing.wantSet), where its
	// idle time runs from (idle.go).
	idleMarks map[tp]*idleMark
	// prio orders the topics the fetches ask for (priority.go); nil: none.
	prio *fetchPriority
	// fatal ends Run: the coordinator refused the member for want of an
	// ACL before it ever joined (a member that joined keeps retrying, so
	// a revoked and re-granted ACL does not stop a running worker).
	fatal error
}

// mailbox is the work the methods queue for Run's goroutine.
type mailbox struct {
	grant    int
	acks     []pendingAck
	renews   []Key
	phase    stopPhase   // the furthest stop step asked for: draining or leaving
	idle     []idleQuery // Idle calls waiting for an answer (idle.go)
	paused   *[]string   // the topics to fetch nothing of, from the last PauseTopics; nil: unchanged
	anything bool
}

// ackCounts counts the acknowledgements the broker applied, by type.
type ackCounts [Reject + 1]int64

type pendingAck struct {
	k Key
	t AckType
}

// New validates cfg and returns a member; it starts nothing.
func New(cfg Config) (*Member, error) {
	if cfg.Client == nil {
		return nil, errors.New("member: Config.Client is required")
	}
	if cfg.Group == "" {
		return nil, errors.New("member: Config.Group is required")
	}
	if len(cfg.Topics) == 0 {
		return nil, errors.New("member: Config.Topics is required")
	}
	for _, t := range cfg.Topics {
		if t == "" {
			return nil, errors.New("member: Config.Topics has an empty name")
		}
	}
	if cfg.MaxWait < 0 {
		return nil, fmt.Errorf("member: Config.MaxWait %v is negative", cfg.MaxWait)
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = MaxWaitDefault
	}
	if cfg.MaxBytes < 0 {
		return nil, fmt.Errorf("member: Config.MaxBytes %d is negative", cfg.MaxBytes)
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = MaxBytesDefault
	}
	if cfg.AssignmentPoll < 0 {
		return nil, fmt.Errorf("member: Config.AssignmentPoll %v is negative", cfg.AssignmentPoll)
	}
	if cfg.AssignmentPoll == 0 {
		cfg.AssignmentPoll = AssignmentPollDefault
	}
	if cfg.MemberID == "" {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("member: member id: %w", err)
		}
		cfg.MemberID = base64.RawURLEncoding.EncodeToString(b[:])
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Priority != nil {
		if err := cfg.Priority.check(cfg.Topics); err != nil {
			return nil, err
		}
	}
	cfg.Topics = append([]string(nil), cfg.Topics...)
	m := &Member{
		cfg:    cfg,
		born:   time.Now(),
		log:    cfg.Logger.With("group", cfg.Group, "member", cfg.MemberID),
		wake:   make(chan struct{}, 1),
		events: make(chan Event),
		quiet:  make(chan struct{}),

		results: make(chan result, 16),
		group:   membership{interval: time.Second, assigned: map[[16]byte][]int32{}, coord: -1},
		meta: routing{
			names: map[[16]byte]string{}, ids: map[string][16]byte{}, leaders: map[tp]int32{},
			want: map[int32][]tp{}, wantSet: map[tp]int32{},
		},
		sessions:  map[int32]*session{},
		st:        Stats{MemberID: cfg.MemberID},
		dec:       newDecoder(int(cfg.MaxBytes / 2)),
		logged:    map[string]time.Time{},
		idleMarks: map[tp]*idleMark{},
		prio:      newFetchPriority(cfg.Priority, cfg.Topics),
	}
	m.stats = m.st
	return m, nil
}

// Events returns the channel of the member's reports. The executor reads
// it until Run returns; Run closes it when it returns. An Event's slices
// are the reader's until it receives the next Event: the member reuses
// them then, so a reader that keeps anything of them copies it.
func (m *Member) Events() <-chan Event { return m.events }

// Quiet returns a channel closed once, after [Member.StopFetching], when no
// fetch is in flight and every record fetched has been sent on Events.
func (m *Member) Quiet() <-chan struct{} { return m.quiet }

// Grant lets the member fetch n more records. Each delivered record uses
// one credit; the member never asks a fetch for more than the credit. A
// batch_optimized fetch may deliver past it (whole producer batches, see
// acquire.go): the credit then goes below 0, and grants repay that debt
// before the member fetches again.
func (m *Member) Grant(n int) {
	if n <= 0 {
		return
	}
	m.post(func(b *mailbox) { b.grant += n })
}

// Ack queues the terminal acknowledgement of k. Its result comes in a
// later [Event.Acked]; an ack for a record not held answers [ErrNotHeld].
func (m *Member) Ack(k Key, t AckType) {
	m.post(func(b *mailbox) { b.acks = append(b.acks, pendingAck{k, t}) })
}

// Renew queues renewals of these records' locks. The results come in
// later [Event.Renewals], one per key; a record not held, or whose
// acknowledgement is already queued, answers [ErrNotHeld].
func (m *Member) Renew(keys ...Key) {
	if len(keys) == 0 {
		return
	}
	m.post(func(b *mailbox) { b.renews = append(b.renews, keys...) })
}

// StopFetching makes the member send no more ShareFetch that can acquire
// records; acknowledgements and renewals go on. See [Member.Quiet].
func (m *Member) StopFetching() { m.post(func(b *mailbox) { b.phase = max(b.phase, draining) }) }

// PauseTopics makes the member fetch nothing of these topics (of its
// subscription) until a later call leaves them out: their partitions stay
// assigned and in the subscription, no session fetches them (as if they
// were assigned elsewhere), and the records of them already held stay
// held, renewable and ackable. Each call replaces the set of the one
// before; PauseTopics(nil) fetches every topic again.
func (m *Member) PauseTopics(topics []string) {
	ts := slices.Clone(topics)
	m.post(func(b *mailbox) { b.paused = &ts })
}

// Leave is the graceful end: the member stops fetching, waits for its
// requests in flight, then sends per share session one ShareAcknowledge
// with epoch −1 carrying the pending acknowledgements plus RELEASE for
// every held record not acknowledged, then the leave heartbeat; then Run
// returns nil. Acks and renews queued after Leave answer [ErrNotHeld].
func (m *Member) Leave() {
	m.post(func(b *mailbox) { b.phase = max(b.phase, leaving) })
}

func (m *Member) post(f func(*mailbox)) {
	m.mu.Lock()
	f(&m.mbox)
	m.mbox.anything = true
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Standing reports the member's standing in the group, cheaply, for
// anyone: when the coordinator last answered one of its heartbeats (zero:
// never), and how many times the coordinator has fenced it (dropped it
// from the group, so that the records it held went to others) since Run
// started. A member whose last answered heartbeat is older than the
// group's session timeout may have been dropped without knowing it yet: a
// process frozen (SIGSTOP, a long pause) past its session learns it only
// from the heartbeat after it wakes.
func (m *Member) Standing() (lastHeartbeat time.Time, fences int64) {
	if ns := m.beatAt.Load(); ns != 0 {
		lastHeartbeat = m.born.Add(time.Duration(ns))
	}
	return lastHeartbeat, m.fences.Load()
}

// Stats returns a snapshot of the member; it is safe for concurrent use
// and cheap.
func (m *Member) Stats() Stats {
	m.statsMu.Lock()
	s, acks := m.stats, m.statsAcks
	m.statsMu.Unlock()
	s.Acks = map[AckType]int64{}
	for t, n := range acks {
		if n > 0 {
			s.Acks[AckType(t)] = n
		}
	}
	return s
}

// Run joins the group and runs the member until [Member.Leave] has done
// its work (then it returns nil) or ctx is done: a hard stop, with a
// best-effort epoch −1 close of every share session (which releases the
// records held there) and the leave heartbeat; it then returns ctx.Err().
// A coordinator that refuses the member's first heartbeat with
// GROUP_AUTHORIZATION_FAILED or TOPIC_AUTHORIZATION_FAILED (a missing ACL)
// ends Run at once with that error; once joined, such errors are retried.
// Run is the one goroutine that owns the member's state; call it once.
func (m *Member) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.started {
		m.mu.Unlock()
		return errors.New("member: Run called twice")
	}
	m.started = true
	m.mu.Unlock()
	defer close(m.events)
	return m.run(ctx)
}
