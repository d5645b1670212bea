// Package worker runs shareq job handlers on a Kafka share group.
//
// A [Worker] is one member of its share group. It speaks the share
// protocol itself (franz-go is the transport): it holds many records at
// once, across any number of share fetches, and acknowledges each one when
// its job ends, in any order, so a slow job holds only its own handler
// slot. It fetches as handlers free up: up to [Concurrency] records, plus
// a small prefetch that covers one fetch round trip at the observed job
// rate (bounded so that no record waits long against its lock), and a
// fetch returns as soon as the broker has records. One goroutine owns the
// member's state (its share session per broker, the records held, the
// acknowledgements and renewals to send); handlers run on goroutines of
// their own and hand their outcomes back to it: ACCEPT on success, REJECT
// on a permanent failure, RELEASE otherwise, after a retry backoff (see
// the handler package for the full table).
//
// Each delivery ends with an [Outcome] (succeeded, parked, retried,
// discarded, interrupted), reported to observers in [Result] beside the
// acknowledgement, logged (Debug; Warn for a parked job, Error for a
// discarded one) and counted in the "worker stopped" line. A job parked by
// the dlq middleware is ACCEPTed but is never a success.
//
// A job that runs close to the end of its lock has the lock renewed (Kafka
// 4.2+), up to [MaxHold]. A job may also have a timeout ([JobTimeout],
// [TopicJobTimeout]): its context is cancelled then, and it is retried. When Run's context is cancelled the worker stops
// fetching, runs what the fetch in flight brings, lets running handlers
// finish for up to [ShutdownTimeout] and acknowledges them, and only once
// no fetch of its own is in flight releases the jobs it held in retry
// backoff; at the deadline it cancels and releases the rest. It then
// closes its share sessions, releasing whatever it still holds at once,
// and leaves the group. The order matters on a job's last delivery: a
// release there makes the broker archive the record, so no record is
// released where a fetch of the same worker could take it and never run
// it.
//
// A worker that dies without leaving (SIGKILL, an OOM kill) keeps its
// partitions until the group's coordinator fences it, after the group's
// share session timeout: the worker asks for [SessionTimeoutDefault]
// ([SessionTimeout]), which brokers with lowered minimums allow; a default
// broker allows no less than 45 s, and the worker logs that at start.
//
// Delivery is at least once: see the handler package for what that means
// for a handler.
package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/acl"
	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/internal/kafkaerr"
	"github.com/shareq/shareq/middleware"
)

// Errors the worker returns from Run or records as a [Result.Err].
var (
	// ErrBrokersUnreachable: Run could not reach any seed broker.
	ErrBrokersUnreachable = errors.New("worker: cannot reach the brokers")
	// ErrShareGroupsUnsupported: the brokers lack the share group APIs
	// (KIP-932); Apache Kafka 4.2 or newer is needed.
	ErrShareGroupsUnsupported = errors.New("worker: the brokers do not support share groups (KIP-932); use Apache Kafka 4.2 or newer with share.version=1")
	// ErrTopicMissing: a topic with a registered handler does not exist.
	ErrTopicMissing = errors.New("worker: topic does not exist")
	// ErrGroupNotShare: the group name belongs to a group of another type
	// (a consumer group); a share group needs a name of its own.
	ErrGroupNotShare = errors.New("worker: the group is not a share group")
	// ErrNotAuthorized: the brokers refused the worker a right it needs
	// (an ACL is missing). The error names the right and the
	// kafka-acls.sh command that grants it; docs/security.md lists them.
	ErrNotAuthorized = errors.New("worker: not authorized")
	// ErrAlreadyRan: Run was called twice on one Worker.
	ErrAlreadyRan = errors.New("worker: Run called twice; make a new Worker")

	// ErrLockExpired: the record's lock had run out before its job could
	// start; it is released without running. On its last delivery the job
	// runs all the same (a release would make the broker archive it
	// unhandled).
	ErrLockExpired = errors.New("worker: lock expired before the job started")
	// ErrLockLost: the record's lock ran out while the job was in hand (a
	// renewal failed past the deadline, or the share session holding it
	// was lost with its broker connection); its context is cancelled, and
	// another member may run it.
	ErrLockLost = errors.New("worker: lock lost while the job ran")
	// ErrMaxHold: the job held its record for MaxHold; its context is
	// cancelled and the record released.
	ErrMaxHold = errors.New("worker: job held its lock for MaxHold")
	// ErrJobTimeout: the job ran for its JobTimeout (or TopicJobTimeout);
	// its context is cancelled with this cause, and an error it returns
	// then is retried (the Result's Err wraps ErrJobTimeout).
	ErrJobTimeout = errors.New("worker: job timed out")
	// ErrShutdown: the worker stopped and the job did not finish within
	// the shutdown timeout; its context is cancelled and the record
	// released.
	ErrShutdown = errors.New("worker: shut down before the job finished")
)

// Worker runs handlers for the jobs of a share group. Make one with [New]
// and start it with [Worker.Run].
type Worker struct {
	cfg      *config
	handlers map[string]handler.Handler
	timeouts map[string]time.Duration // job timeout per topic; absent or 0: none
	topics   []string
	ran      atomic.Bool
	checked  atomic.Bool
	topicIDs map[string]kadm.TopicID // set by Check, read by Run

	deliveryLimit atomic.Int32           // set by Check
	brokerDLQ     atomic.Pointer[string] // set by Check

	down atomic.Pointer[[]string] // the dependencies down while the executor is paused; written by it

	stopped chan struct{}         // closed when Run returns
	runErr  atomic.Pointer[error] // what Run returned, set before stopped closes
}

// New validates opts and returns a Worker. Every invalid option is
// reported, each naming the option.
func New(opts ...Option) (*Worker, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, handlers: make(map[string]handler.Handler), timeouts: make(map[string]time.Duration), stopped: make(chan struct{})}
	for _, r := range cfg.routes {
		mws := append(append([]handler.Middleware{}, cfg.use...), r.mws...)
		w.handlers[r.topic] = handler.Chain(middleware.Recover()(r.h), mws...)
		w.topics = append(w.topics, r.topic)
		w.timeouts[r.topic] = cfg.jobTimeout
	}
	for _, tt := range cfg.topicTimeouts {
		w.timeouts[tt.topic] = tt.d
	}
	return w, nil
}

// Stopped returns a channel that is closed when [Worker.Run] has returned:
// the worker has stopped for good, gracefully or not ([Worker.Err] says
// which), and has left its group. A program that runs the worker in the
// background watches it to notice a worker that failed, for a health
// check or to shut down; it is never closed if Run is never called. Safe
// for concurrent use.
func (w *Worker) Stopped() <-chan struct{} { return w.stopped }

// Err says why the worker stopped: nil while it runs (or before Run), and
// after a graceful stop (Run's context cancelled); else the error Run
// returned, such as a failed start-up check ([ErrTopicMissing],
// [ErrBrokersUnreachable], ...) or a share-group member that failed. Safe
// for concurrent use.
func (w *Worker) Err() error {
	if p := w.runErr.Load(); p != nil {
		return *p
	}
	return nil
}

// DependenciesDown returns the dependencies whose outage paused the
// worker (a handler returned [handler.Unavailable] for them), in the order
// they went down, or nil while the worker is not paused. While paused the
// worker holds its jobs on their deliveries and fetches nothing; it
// resumes by itself when a probe gets through. A readiness check can
// report it; a liveness check should not fail on it (a restart would
// release the held jobs, costing each a delivery, and gain nothing). Safe
// for concurrent use.
func (w *Worker) DependenciesDown() []string {
	if p := w.down.Load(); p != nil {
		return append([]string(nil), (*p)...)
	}
	return nil
}

// Topics returns the topics the worker has handlers for.
func (w *Worker) Topics() []string { return append([]string(nil), w.topics...) }

// Group returns the share group the worker joins.
func (w *Worker) Group() string { return w.cfg.group }

func (w *Worker) baseOpts() []kgo.Opt {
	// A client ID per process, so shareq status and the broker's logs
	// tell workers apart; kgo.ClientID in ClientOpts comes later and wins.
	opts := []kgo.Opt{kgo.ClientID(defaultClientID())}
	if len(w.cfg.brokers) > 0 {
		opts = append(opts, kgo.SeedBrokers(w.cfg.brokers...))
	}
	return append(opts, w.cfg.clientOpts...)
}

// defaultClientID is "shareq-<host>-<pid>".
func defaultClientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("shareq-%s-%d", host, os.Getpid())
}

// Run joins the share group and runs handlers until ctx is cancelled, then
// stops gracefully and returns nil. It first checks that the brokers are
// reachable and support share groups, that every topic exists, that the
// client's principal holds the ACLs the worker needs, and sets the group
// configuration asked for; a failed check is returned at once with what
// to do about it ([ErrBrokersUnreachable] says what is wrong with TLS or
// SASL, [ErrNotAuthorized] names the missing ACL and the kafka-acls.sh
// command that grants it; docs/security.md lists them). Run may be
// called once; when it returns, the worker has stopped for good
// ([Worker.Stopped]).
func (w *Worker) Run(ctx context.Context) (err error) {
	if !w.ran.CompareAndSwap(false, true) {
		return ErrAlreadyRan
	}
	defer func() {
		w.runErr.Store(&err)
		close(w.stopped)
	}()
	log := w.cfg.logger.With("group", w.cfg.group)

	if !w.checked.Load() {
		if err := w.Check(ctx); err != nil {
			return err
		}
	}

	return w.runMember(ctx, log)
}

// requiredAPIs are the share-group requests the worker sends, with the
// least version it needs of each: Apache Kafka 4.2 serves them all.
var requiredAPIs = []struct {
	key     kmsg.Key
	version int16
	why     string
}{
	{kmsg.ShareGroupHeartbeat, 1, "share-group membership"},
	{kmsg.ShareFetch, 2, "fetches of at most the records it can take (record_limit)"},
	{kmsg.ShareAcknowledge, 2, "lock renewal"},
}

// Check runs the start-up checks of [Worker.Run] without starting: the
// brokers are reachable and support share groups, every topic exists, the
// worker may read its topics and group (Read), read the group's configs
// (DescribeConfigs) and write every [RequireTopics] topic (Write), and the
// group's configuration is set as asked (AlterConfigs, when it differs).
// A group that does not exist yet cannot be checked for Read; then the
// member's first heartbeat in Run fails with the same [ErrNotAuthorized]. It also reads the group's
// delivery limit. Run calls it unless it already succeeded, so a caller
// with a start-up deadline of its own (an fx OnStart hook) can fail there
// and then start Run in the background. It is bounded by [StartTimeout].
func (w *Worker) Check(ctx context.Context) error {
	admin, err := kgo.NewClient(w.baseOpts()...)
	if err != nil {
		return fmt.Errorf("worker: client options: %w", err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(ctx, w.cfg.startTimeout)
	defer cancel()
	if err := w.check(ctx, admin); err != nil {
		return err
	}
	w.checked.Store(true)
	return nil
}

func (w *Worker) check(ctx context.Context, admin *kgo.Client) error {
	if err := admin.Ping(ctx); err != nil {
		return fmt.Errorf("%w %v: %v (%s)", ErrBrokersUnreachable, w.seeds(admin), err, kafkaerr.ConnHint(err))
	}
	adm := kadm.NewClient(admin)
	versions, err := adm.ApiVersions(ctx)
	if err != nil {
		return fmt.Errorf("%w %v: api versions: %v", ErrBrokersUnreachable, w.cfg.brokers, err)
	}
	for _, v := range versions.Sorted() {
		if v.Err != nil {
			continue
		}
		for _, need := range requiredAPIs {
			_, have, ok := v.KeyVersions(need.key.Int16())
			if !ok {
				return fmt.Errorf("%w (broker %d lacks %v)", ErrShareGroupsUnsupported, v.NodeID, kmsg.NameForKey(need.key.Int16()))
			}
			if have < need.version {
				return fmt.Errorf("%w (broker %d serves %v up to v%d; the worker needs v%d for %s)",
					ErrShareGroupsUnsupported, v.NodeID, kmsg.NameForKey(need.key.Int16()), have, need.version, need.why)
			}
		}
	}
	topics, err := w.describeTopics(ctx, admin)
	if err != nil {
		return err
	}
	var missing, missingRequired []string
	w.topicIDs = make(map[string]kadm.TopicID, len(w.topics))
	for _, t := range w.topics {
		d, ok := topics[t]
		switch {
		case ok && acl.Denied(d.err):
			return w.notAuthorized(admin, acl.Right{Op: "Read", Resource: acl.Topic, Name: t}, d.err)
		case !ok || d.err != nil:
			missing = append(missing, t)
		case !d.allows(kmsg.ACLOperationRead):
			return w.notAuthorized(admin, acl.Right{Op: "Read", Resource: acl.Topic, Name: t}, errors.New("the broker authorizes Describe only"))
		default:
			w.topicIDs[t] = d.id
		}
	}
	for _, t := range w.cfg.required {
		d, ok := topics[t]
		switch {
		case ok && acl.Denied(d.err):
			return w.notAuthorized(admin, acl.Right{Op: "Write", Resource: acl.Topic, Name: t}, d.err)
		case (!ok || d.err != nil) && !slices.Contains(missing, t) && !slices.Contains(missingRequired, t):
			missingRequired = append(missingRequired, t)
		case ok && d.err == nil && !slices.Contains(w.topics, t) && !d.allows(kmsg.ACLOperationWrite):
			return w.notAuthorized(admin, acl.Right{Op: "Write", Resource: acl.Topic, Name: t}, errors.New("the broker does not authorize Write, and RequireTopics names it"))
		}
	}
	switch {
	case len(missing) > 0:
		// Offer -dlq when the worker requires each one's DLQ topic too.
		withDLQ := true
		for _, t := range missing {
			withDLQ = withDLQ && slices.Contains(w.cfg.required, t+dlqSuffix)
		}
		return fmt.Errorf("%w: %s (shareq workers never create topics; %s)", ErrTopicMissing, strings.Join(missing, ", "), w.createHint(missing, withDLQ))
	case len(missingRequired) > 0:
		return fmt.Errorf("%w: %s, named in RequireTopics (without it, parking a job or producing to it fails; shareq workers never create topics; %s)",
			ErrTopicMissing, strings.Join(missingRequired, ", "), w.createHint(missingRequired, false))
	}
	if err := w.checkGroupRead(ctx, admin); err != nil {
		return err
	}

	// A name taken by a consumer group would make every share-group
	// heartbeat fail; say so now. Best effort: a broker that cannot list
	// groups is not a reason to refuse to start.
	if groups, err := adm.ListGroups(ctx); err == nil {
		if g, ok := groups[w.cfg.group]; ok && g.GroupType != "" && g.GroupType != "share" {
			return fmt.Errorf("%w: %q is a %s group (protocol %q); pick another Group name for the share group",
				ErrGroupNotShare, w.cfg.group, g.GroupType, g.ProtocolType)
		}
	}
	groupConfigs, err := w.ensureGroupConfig(ctx, admin)
	if err != nil {
		return err
	}

	limit := int32(w.cfg.deliveryLimit)
	if limit == 0 {
		limit = int32(w.cfg.groupLimit) // just set: the broker may still describe the old value
	}
	if limit == 0 {
		limit = readLimit(ctx, admin, groupConfigs)
	}
	w.deliveryLimit.Store(limit)
	return nil
}

// dlqSuffix is dlq.TopicSuffix: the dlq middleware parks jobs of topic T
// in T.dlq by default.
const dlqSuffix = ".dlq"

// createHint says how to create topics: the shareq command (with -dlq,
// their DLQ topics too) and the kafka-topics.sh line of each.
func (w *Worker) createHint(topics []string, withDLQ bool) string {
	brokers := strings.Join(w.cfg.brokers, ",")
	if brokers == "" {
		brokers = "HOST:9092"
	}
	dlqFlag := ""
	if withDLQ {
		dlqFlag = " -dlq"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "create it with: shareq topics create %s%s -brokers %s; or with: ", strings.Join(topics, " "), dlqFlag, brokers)
	for i, t := range topics {
		if i > 0 {
			b.WriteString("; ")
		}
		parts := 6
		if strings.HasSuffix(t, dlqSuffix) {
			parts = 1
		}
		fmt.Fprintf(&b, "kafka-topics.sh --bootstrap-server %s --create --topic %s --partitions %d", brokers, t, parts)
		if withDLQ {
			fmt.Fprintf(&b, "; kafka-topics.sh --bootstrap-server %s --create --topic %s --partitions 1", brokers, t+dlqSuffix)
		}
	}
	return b.String()
}

// ensureGroupConfig sets the group configs the worker needs, writing only
// those that differ, so a worker without ALTER_CONFIGS permission runs on
// a group an operator configured. It returns the configs it found.
func (w *Worker) ensureGroupConfig(ctx context.Context, admin *kgo.Client) (map[string]string, error) {
	current, own, err := groupcfg.DescribeOwn(ctx, admin, w.cfg.group, groupcfg.AutoOffsetReset, groupcfg.RenewAckEnable, groupcfg.DeliveryCountLimit,
		groupcfg.DLQTopicName, groupcfg.DLQCopyRecord, groupcfg.SessionTimeoutMs, groupcfg.HeartbeatIntervalMs)
	if acl.Denied(err) {
		// Without them the worker would guess the delivery limit (and
		// park jobs on the wrong delivery) and miss a disabled renewal.
		return nil, w.notAuthorized(admin, acl.Right{Op: "DescribeConfigs", Resource: acl.Group, Name: w.cfg.group}, err)
	}
	described := err == nil
	if err != nil {
		current, own = map[string]string{}, map[string]bool{} // a broker without group configs: try to set them
	}
	alter := func(what string, err error) error {
		if acl.Denied(err) {
			return w.notAuthorized(admin, acl.Right{Op: "AlterConfigs", Resource: acl.Group, Name: w.cfg.group}, fmt.Errorf("%s: %w", what, err))
		}
		return nil
	}
	if w.cfg.offsetReset != "" && current[groupcfg.AutoOffsetReset] != w.cfg.offsetReset {
		if err := groupcfg.Set(ctx, admin, w.cfg.group, map[string]string{groupcfg.AutoOffsetReset: w.cfg.offsetReset}); err != nil {
			if err := alter(fmt.Sprintf("AutoOffsetReset(%q)", w.cfg.offsetReset), err); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("worker: AutoOffsetReset(%q): %w (set it with kafka-configs.sh --entity-type groups --entity-name %s --alter --add-config %s=%s, or grant ALTER_CONFIGS on the group)",
				w.cfg.offsetReset, err, w.cfg.group, groupcfg.AutoOffsetReset, w.cfg.offsetReset)
		}
	}
	if n := w.cfg.groupLimit; n > 0 && current[groupcfg.DeliveryCountLimit] != strconv.Itoa(n) {
		if err := checkDeliveryBound(ctx, admin, n); err != nil {
			return nil, err
		}
		if err := groupcfg.Set(ctx, admin, w.cfg.group, map[string]string{groupcfg.DeliveryCountLimit: strconv.Itoa(n)}); err != nil {
			if err := alter(fmt.Sprintf("GroupDeliveryLimit(%d)", n), err); err != nil {
				return nil, err
			}
			if errors.Is(err, kerr.InvalidConfig) && strings.Contains(err.Error(), "Unknown group config") {
				return nil, fmt.Errorf("worker: GroupDeliveryLimit(%d): the brokers do not know the group config %s (Apache Kafka 4.3+); on older brokers set the broker config %s instead, and pass worker.DeliveryLimit(%d) if it differs from the broker's",
					n, groupcfg.DeliveryCountLimit, groupcfg.BrokerDeliveryCountLimit, n)
			}
			return nil, fmt.Errorf("worker: GroupDeliveryLimit(%d): %w (the broker allows group.share.min.delivery.count.limit to group.share.max.delivery.count.limit, 2 to 10 by default; or set it with kafka-configs.sh --entity-type groups --entity-name %s --alter --add-config %s=%d, or grant ALTER_CONFIGS on the group)",
				n, err, w.cfg.group, groupcfg.DeliveryCountLimit, n)
		}
	}
	// Kafka 4.3 added share.renew.acknowledge.enable (default true);
	// renewals fail while it is false. Older brokers and kfake do not know
	// it and renew anyway.
	if v, ok := current[groupcfg.RenewAckEnable]; ok && v != "true" {
		if err := groupcfg.Set(ctx, admin, w.cfg.group, map[string]string{groupcfg.RenewAckEnable: "true"}); err != nil {
			if err := alter(fmt.Sprintf("group %q has %s=%s, so long jobs cannot renew their locks, and setting it to true failed", w.cfg.group, groupcfg.RenewAckEnable, v), err); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("worker: group %q has %s=%s, so long jobs cannot renew their locks, and setting it failed: %w (set it to true with kafka-configs.sh --entity-type groups --entity-name %s --alter --add-config %s=true)",
				w.cfg.group, groupcfg.RenewAckEnable, v, err, w.cfg.group, groupcfg.RenewAckEnable)
		}
	}
	if err := w.ensureSessionTimeout(ctx, admin, current, own); err != nil {
		return nil, err
	}
	if err := w.setupBrokerDLQ(ctx, admin, current, described); err != nil {
		return nil, err
	}
	return current, nil
}

// checkDeliveryBound fails a GroupDeliveryLimit(n) outside the brokers'
// bounds of the group config, naming the broker config to change. Brokers
// that describe their configs but not these bounds (kfake, the dev broker)
// are held to Apache Kafka's defaults, so a limit that works on a
// development broker does not fail first in production. Brokers that do
// not let the worker describe their configs (no DescribeConfigs on the
// cluster) are left to refuse the limit themselves when it is set.
func checkDeliveryBound(ctx context.Context, admin *kgo.Client, n int) error {
	m, err := groupcfg.Broker(ctx, admin, groupcfg.BrokerMinDeliveryCountLimit, groupcfg.BrokerMaxDeliveryCountLimit)
	if err != nil {
		return nil
	}
	bound := func(k string, def int) (int, string) {
		if v, err := strconv.Atoi(m[k]); err == nil {
			return v, "the brokers' "
		}
		return def, "Apache Kafka's default (the brokers do not report theirs) "
	}
	if lo, loFrom := bound(groupcfg.BrokerMinDeliveryCountLimit, 2); n < lo {
		return fmt.Errorf("worker: GroupDeliveryLimit(%d): below %sminimum of %d (broker config %s); raise it, or lower %s on every broker",
			n, loFrom, lo, groupcfg.BrokerMinDeliveryCountLimit, groupcfg.BrokerMinDeliveryCountLimit)
	}
	if hi, hiFrom := bound(groupcfg.BrokerMaxDeliveryCountLimit, kafkaDeliveryLimitMax); n > hi {
		return fmt.Errorf("worker: GroupDeliveryLimit(%d): above %smaximum of %d (broker config %s); lower it, or raise %s on every broker (Kafka allows up to %d)",
			n, hiFrom, hi, groupcfg.BrokerMaxDeliveryCountLimit, groupcfg.BrokerMaxDeliveryCountLimit, maxGroupDeliveryLimit)
	}
	return nil
}

// readLimit returns the group's delivery count limit: the group config
// (among groupConfigs, as ensureGroupConfig found them), else the broker
// default, else Kafka's default of 5.
func readLimit(ctx context.Context, cl *kgo.Client, groupConfigs map[string]string) int32 {
	parse := func(m map[string]string, k string) int32 {
		var n int32
		if v, ok := m[k]; ok {
			if _, err := fmt.Sscan(v, &n); err == nil && n > 0 {
				return n
			}
		}
		return 0
	}
	if n := parse(groupConfigs, groupcfg.DeliveryCountLimit); n > 0 {
		return n
	}
	if m, err := groupcfg.Broker(ctx, cl, groupcfg.BrokerDeliveryCountLimit); err == nil {
		if n := parse(m, groupcfg.BrokerDeliveryCountLimit); n > 0 {
			return n
		}
	}
	return 5
}
