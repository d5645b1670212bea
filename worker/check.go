package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/internal/acl"
	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/internal/kafkaerr"
)

// Check runs the start-up checks of [Worker.Run] without starting: the
// brokers are reachable and support share groups, every topic exists, the
// worker may read its topics and group (Read), read the group's configs
// (DescribeConfigs) and write every [RequireTopics] topic (Write), and the
// group's configuration is set as asked (AlterConfigs, when it differs),
// and it warns when a handler's resource (a claim store's connection pool:
// [ConcurrencyChecker]) is too small for [Concurrency].
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
	cctx, cancel := context.WithTimeout(ctx, w.cfg.startTimeout)
	defer cancel()
	if err := w.check(cctx, admin); err != nil {
		if ctx.Err() == nil && !errors.Is(err, ErrBrokersUnreachable) && brokersLost(err) {
			// A broker answered the first check, then went away (killed
			// or restarted while the worker started): as unreachable as
			// one that never answered, for a caller that retries on it.
			err = fmt.Errorf("%w: they stopped answering during the start-up checks: %w", ErrBrokersUnreachable, err)
		}
		return err
	}
	w.checked.Store(true)
	return nil
}

// brokersLost reports whether err, a start-up check's, is the brokers'
// connections failing or the start-up timeout passing rather than an
// answer.
func brokersLost(err error) bool {
	var ne net.Error
	var eof *kgo.ErrFirstReadEOF
	return errors.As(err, &ne) || errors.As(err, &eof) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, context.DeadlineExceeded)
}

// check runs the start-up checks, in this order; the first that fails
// ends it with its error. Each step is a function below, in the same
// order, followed by the helpers it calls that only the start-up uses,
// in the order it calls them: the file reads top to bottom as the check
// runs. Two kinds of callee live elsewhere: the session timeout of step 7
// (ensureSessionTimeout, sessiontimeout.go: start-up only, one file for
// it), and the helpers the run time shares (notAuthorized and seeds in
// auth.go, the brokerLine type in brokerline.go).
func (w *Worker) check(ctx context.Context, admin *kgo.Client) error {
	// 1. A seed broker answers (ApiVersions): else ErrBrokersUnreachable,
	// with a hint about TLS or SASL.
	if err := w.checkReachable(ctx, admin); err != nil {
		return err
	}
	// 2. Every broker serves the share-group requests at the versions
	// the worker needs (ApiVersions of each): else
	// ErrShareGroupsUnsupported naming the broker and the request.
	if err := w.checkShareAPIs(ctx, admin); err != nil {
		return err
	}
	// 2b. The brokers' release line (the highest metadata.version each
	// supports, ApiVersions), for the topic watch; on the 4.2 line a
	// warning that 4.2.0 (KAFKA-20505) must not be used: it cannot be
	// told from 4.2.1 over the protocol. Never fails.
	w.checkBrokerLine(ctx, admin)
	// 3. Each handled topic exists and may be read, each RequireTopics
	// topic exists and may be written (one Metadata request): else
	// ErrNotAuthorized naming the right, or ErrTopicMissing with the
	// commands that create the topics. Keeps the topics' IDs for the
	// topic watch.
	if err := w.checkTopics(ctx, admin); err != nil {
		return err
	}
	// 4. The worker may read its group (ShareGroupDescribe): else
	// ErrNotAuthorized. A group that does not exist yet passes.
	if err := w.checkGroupRead(ctx, admin); err != nil {
		return err
	}
	// 5. The group's name is not taken by a group of another type
	// (ListGroups; best effort): else ErrGroupNotShare.
	if err := w.checkGroupType(ctx, admin); err != nil {
		return err
	}
	// 6. The group's configs (one DescribeConfigs of the group): else
	// ErrNotAuthorized for DescribeConfigs. A broker without group
	// configs passes with none.
	gc, err := w.describeGroupConfigs(ctx, admin)
	if err != nil {
		return err
	}
	// 7. The group configs set as asked, each written only when it
	// differs (AlterConfigs): AutoOffsetReset, DeliveryLimit
	// (checked against the brokers' bounds first), renewals enabled,
	// the session timeout, the assignment interval. A refused write is
	// ErrNotAuthorized for AlterConfigs, another failure an error naming
	// the option and the kafka-configs.sh command that sets it; a
	// session timeout or assignment interval the brokers do not allow
	// (or know) is only logged.
	if err := w.setOffsetReset(ctx, admin, gc.current); err != nil {
		return err
	}
	w.groupReset = cmp.Or(w.cfg.offsetReset, gc.current[groupcfg.AutoOffsetReset])
	if err := w.setGroupDeliveryLimit(ctx, admin, gc.current); err != nil {
		return err
	}
	if err := w.enableRenewals(ctx, admin, gc.current); err != nil {
		return err
	}
	if err := w.ensureSessionTimeout(ctx, admin, gc.current, gc.own); err != nil {
		return err
	}
	if w.assignEvery, err = w.ensureAssignmentInterval(ctx, admin, gc); err != nil {
		return err
	}
	// 8. The group's dead-letter topic on the broker (Kafka 4.4+): a
	// topic that cannot be used fails only with BrokerDLQ
	// (ErrBrokerDLQ); else it is logged, at Info level when the default
	// topic is not there, at Warn level when a topic asked for cannot
	// take records.
	if err := w.setupBrokerDLQ(ctx, admin, gc.current, gc.described); err != nil {
		return err
	}
	// 9. The delivery limit jobs see (the dlq middleware parks on it):
	// DeliveryLimit, else the group's, else the brokers', else Kafka's
	// default of 5, less SpareDeliveries. Fails only when the spares
	// leave no delivery.
	limit, err := w.deliveryLimitFor(ctx, admin, gc.current)
	if err != nil {
		return err
	}
	w.deliveryLimit.Store(limit)
	// 10. Each handler and middleware layer that holds a resource of its
	// own size per job (ConcurrencyChecker: the claims of a pgstore
	// store on its connection pool) is asked whether it is large enough
	// for Concurrency jobs at once; an error is logged at Warn level.
	// Never fails.
	w.checkConcurrency()
	// 11. The Snoozer (SnoozeVia), when it can check itself (a
	// pgoutbox.Snoozer: its outbox tables readable): an error is logged
	// at Warn level; snoozed jobs' copies then go to their topics until
	// it works. Never fails.
	w.checkSnoozer(ctx)
	// 12. Where a new group starts: with share.auto.offset.reset=latest
	// (Kafka's default; no AutoOffsetReset), a handled topic's
	// partitions the group has not started yet begin at their log end,
	// so the records already in them never run. If there are any, one
	// Info line says how many and what to do. Never fails.
	w.noteStartAtEnd(ctx, admin)
	return nil
}

// checkReachable is step 1 of check.
func (w *Worker) checkReachable(ctx context.Context, admin *kgo.Client) error {
	if err := admin.Ping(ctx); err != nil {
		return fmt.Errorf("%w %v: %v (%s)", ErrBrokersUnreachable, w.seeds(admin), err, kafkaerr.ConnHint(err))
	}
	return nil
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

// checkShareAPIs is step 2 of check.
func (w *Worker) checkShareAPIs(ctx context.Context, admin *kgo.Client) error {
	versions, err := kadm.NewClient(admin).ApiVersions(ctx)
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
	return nil
}

// checkBrokerLine is step 2b of check: it reads the brokers' release
// line for the topic watch (growthCheck) and, on the 4.2 line, warns that
// 4.2.0 must not be used: its share-group deadlock (KAFKA-20505) cannot be
// refused, because nothing a broker says over the protocol tells 4.2.0
// from 4.2.1 (the fix changed no request version and no feature level).
// It never fails: a broker that does not say leaves the line unknown.
// Group IDs the brokers cannot serve (empty, or with ':', KAFKA-20183 on
// 4.2.0) are refused by New already, on every line.
func (w *Worker) checkBrokerLine(ctx context.Context, admin *kgo.Client) {
	line := readBrokerLine(ctx, admin)
	w.brokerLine = line
	if !line.before(metadataVersion42) && line.before(metadataVersion43) {
		w.cfg.logger.Warn("the brokers run Apache Kafka 4.2: 4.2.0 has a share-group deadlock (KAFKA-20505, fixed in 4.2.1) that can hang the share partitions it strikes, and nothing over the protocol tells 4.2.0 from 4.2.1: make sure every broker runs 4.2.1 or newer",
			"group", w.cfg.group, "brokers", line.String())
	}
}

// readBrokerLine asks every broker its ApiVersions and returns the line
// of the oldest. A broker that does not answer is left out: step 2
// already found every broker serving the share-group requests.
func readBrokerLine(ctx context.Context, admin *kgo.Client) brokerLine {
	brokers, err := kadm.NewClient(admin).BrokerMetadata(ctx)
	if err != nil {
		return brokerLine{}
	}
	var line brokerLine
	for _, b := range brokers.Brokers {
		req := kmsg.NewPtrApiVersionsRequest()
		req.ClientSoftwareName = "shareq"
		req.ClientSoftwareVersion = "1"
		kresp, err := admin.Broker(int(b.NodeID)).Request(ctx, req)
		if err != nil {
			continue
		}
		resp := kresp.(*kmsg.ApiVersionsResponse)
		var mv int16
		for _, f := range resp.SupportedFeatures {
			if f.Name == "metadata.version" {
				mv = f.MaxVersion
			}
		}
		if mv == 0 {
			return brokerLine{} // one broker that does not say: unknown
		}
		if line.maxMetadataVersion == 0 || mv < line.maxMetadataVersion {
			line.maxMetadataVersion = mv
		}
	}
	return line
}

// checkTopics is step 3 of check. A missing right is reported before a
// missing topic, a handled topic before a required one.
func (w *Worker) checkTopics(ctx context.Context, admin *kgo.Client) error {
	topics, err := w.describeTopics(ctx, admin)
	if err != nil {
		return err
	}
	var missing, missingRequired []string
	w.topicIDs = make(map[string]kadm.TopicID, len(w.topics))
	w.topicParts = make(map[string]int, len(w.topics))
	for _, t := range w.topics {
		d, ok := topics[t]
		switch {
		case ok && acl.Denied(d.err):
			return w.notAuthorized(admin, acl.Right{Op: "Read", Resource: acl.Topic, Name: t}, d.err)
		case !ok || d.err != nil:
			missing = append(missing, t)
		case !d.allows(kmsg.ACLOperationRead):
			return w.notAuthorized(admin, acl.Right{Op: "Read", Resource: acl.Topic, Name: t}, acl.ErrDescribeOnly)
		default:
			w.topicIDs[t] = d.id
			w.topicParts[t] = d.partitions
		}
	}
	w.warnNoCopies(topics)
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
		return fmt.Errorf("%w: %s (shareq workers never create the topics they handle; %s)", ErrTopicMissing, strings.Join(missing, ", "), w.createHint(missing, withDLQ))
	case len(missingRequired) > 0:
		return fmt.Errorf("%w: %s, named in RequireTopics (without it, parking a job or producing to it fails; shareq workers never create the topics they handle; %s)",
			ErrTopicMissing, strings.Join(missingRequired, ", "), w.createHint(missingRequired, false))
	}
	return nil
}

// describeTopics asks for the metadata of the handled and required topics,
// with the operations the client is authorized for on each.
func (w *Worker) describeTopics(ctx context.Context, admin *kgo.Client) (map[string]topicInfo, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.IncludeTopicAuthorizedOperations = true
	for _, t := range append(append([]string{}, w.topics...), w.cfg.required...) {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, admin)
	if err != nil {
		return nil, fmt.Errorf("worker: list topics: %w", err)
	}
	out := make(map[string]topicInfo, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		out[*t.Topic] = topicInfo{id: t.TopicID, err: kerr.ErrorForCode(t.ErrorCode), ops: t.AuthorizedOperations, partitions: len(t.Partitions)}
	}
	return out, nil
}

// topicInfo is what a metadata request says of one topic.
type topicInfo struct {
	id         kadm.TopicID
	err        error
	ops        int32 // authorized operations bit field; math.MinInt32 when the broker did not say
	partitions int
}

func (d topicInfo) allows(op kmsg.ACLOperation) bool { return acl.Allows(d.ops, op) }

// warnNoCopies warns once at start when the worker may not write a topic
// it handles and has no Snoozer: a job snoozed past what the worker
// holds, or one that waits for its key until MaxHold, is copied back to
// its topic, and without Write the copy fails and the job is released.
func (w *Worker) warnNoCopies(topics map[string]topicInfo) {
	if w.cfg.snoozer != nil {
		return
	}
	var noWrite []string
	for _, t := range w.topics {
		if d, ok := topics[t]; ok && d.err == nil && !d.allows(kmsg.ACLOperationWrite) {
			noWrite = append(noWrite, t)
		}
	}
	if len(noWrite) > 0 {
		w.cfg.logger.Warn("the worker may not write topics it handles: a job snoozed for longer than the worker holds it (handler.Snooze), or one that waits for its key until MaxHold, cannot be copied back and is released instead; grant Write on them, or keep copies in Postgres with worker.SnoozeVia(pgoutbox.Snoozer(...))",
			"group", w.cfg.group, "topics", strings.Join(noWrite, ","))
	}
}

// dlqSuffix is dlq.TopicSuffix: the dlq middleware parks jobs of topic T
// in T.dlq by default.
const dlqSuffix = ".dlq"

// createHint says how to create topics: the shareq command (with -dlq,
// their DLQ topics too) and the kafka-topics.sh line of each.
func (w *Worker) createHint(topics []string, withDLQ bool) string {
	brokers := w.bootstrap()
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

// bootstrap is the brokers a command in a log line or an error should
// name: the worker's seeds, or a placeholder when they come from ClientOpts.
func (w *Worker) bootstrap() string {
	if len(w.cfg.brokers) == 0 {
		return "HOST:9092"
	}
	return strings.Join(w.cfg.brokers, ",")
}

// checkGroupRead checks that the worker may read its share group: a
// share-group member needs Read on the group for every heartbeat, fetch
// and acknowledgement. Describe of a group is implied by Read, so a
// refused describe means Read is missing. A group that does not exist
// yet tells nothing; the member's first heartbeat then fails in Run with
// the same error.
func (w *Worker) checkGroupRead(ctx context.Context, admin *kgo.Client) error {
	req := kmsg.NewPtrShareGroupDescribeRequest()
	req.GroupIDs = []string{w.cfg.group}
	req.IncludeAuthorizedOperations = true
	resp, err := req.RequestWith(ctx, admin)
	if err != nil {
		if acl.Denied(err) {
			return w.notAuthorized(admin, acl.Right{Op: "Read", Resource: acl.Group, Name: w.cfg.group}, err)
		}
		return nil // the member's heartbeat will say more
	}
	for _, g := range resp.Groups {
		gerr := kerr.ErrorForCode(g.ErrorCode)
		switch {
		case acl.Denied(gerr):
			return w.notAuthorized(admin, acl.Right{Op: "Read", Resource: acl.Group, Name: w.cfg.group}, gerr)
		case gerr == nil && !acl.Allows(g.AuthorizedOperations, kmsg.ACLOperationRead):
			return w.notAuthorized(admin, acl.Right{Op: "Read", Resource: acl.Group, Name: w.cfg.group}, acl.ErrDescribeOnly)
		}
	}
	return nil
}

// checkGroupType is step 5 of check: a name taken by a consumer group
// would make every share-group heartbeat fail, so it says so now. A
// broker that cannot list groups is not a reason to refuse to start.
func (w *Worker) checkGroupType(ctx context.Context, admin *kgo.Client) error {
	groups, err := kadm.NewClient(admin).ListGroups(ctx)
	if err != nil {
		return nil
	}
	if g, ok := groups[w.cfg.group]; ok && g.GroupType != "" && g.GroupType != "share" {
		return fmt.Errorf("%w: %q is a %s group (protocol %q); pick another Group name for the share group",
			ErrGroupNotShare, w.cfg.group, g.GroupType, g.ProtocolType)
	}
	return nil
}

// groupConfigs are the group's configs as step 6 of check found them.
type groupConfigs struct {
	current   map[string]string // the configs the broker describes, by name
	own       map[string]bool   // which of them are set on the group itself (the others are broker defaults)
	described bool              // false when the broker could not describe them (then current is empty)
}

// describeGroupConfigs is step 6 of check. Without the group's configs
// the worker would guess the delivery limit (and park jobs on the wrong
// delivery) and miss a disabled renewal, so a refused describe fails;
// any other failure (a broker without group configs) leaves them empty,
// and the worker tries to set what it needs.
func (w *Worker) describeGroupConfigs(ctx context.Context, admin *kgo.Client) (groupConfigs, error) {
	current, own, err := groupcfg.DescribeOwn(ctx, admin, w.cfg.group, groupcfg.AutoOffsetReset, groupcfg.RenewAckEnable, groupcfg.DeliveryCountLimit,
		groupcfg.DLQTopicName, groupcfg.DLQCopyRecord, groupcfg.SessionTimeoutMs, groupcfg.HeartbeatIntervalMs, groupcfg.AssignmentIntervalMs)
	if acl.Denied(err) {
		return groupConfigs{}, w.notAuthorized(admin, acl.Right{Op: "DescribeConfigs", Resource: acl.Group, Name: w.cfg.group}, err)
	}
	if err != nil {
		return groupConfigs{current: map[string]string{}, own: map[string]bool{}}, nil
	}
	return groupConfigs{current: current, own: own, described: true}, nil
}

// setOffsetReset is step 7 of check for [AutoOffsetReset].
func (w *Worker) setOffsetReset(ctx context.Context, admin *kgo.Client, current map[string]string) error {
	if w.cfg.offsetReset == "" || current[groupcfg.AutoOffsetReset] == w.cfg.offsetReset {
		return nil
	}
	err := groupcfg.Set(ctx, admin, w.cfg.group, map[string]string{groupcfg.AutoOffsetReset: w.cfg.offsetReset})
	if err == nil {
		return nil
	}
	if err := w.alterRefused(admin, fmt.Sprintf("AutoOffsetReset(%q)", w.cfg.offsetReset), err); err != nil {
		return err
	}
	return fmt.Errorf("worker: AutoOffsetReset(%q): %w (set it with kafka-configs.sh --entity-type groups --entity-name %s --alter --add-config %s=%s, or grant ALTER_CONFIGS on the group)",
		w.cfg.offsetReset, err, w.cfg.group, groupcfg.AutoOffsetReset, w.cfg.offsetReset)
}

// alterRefused is the error of step 7 for a group config the worker may
// not set (what says which), or nil when err is not a refusal.
func (w *Worker) alterRefused(admin *kgo.Client, what string, err error) error {
	if acl.Denied(err) {
		return w.notAuthorized(admin, acl.Right{Op: "AlterConfigs", Resource: acl.Group, Name: w.cfg.group}, fmt.Errorf("%s: %w", what, err))
	}
	return nil
}

// setGroupDeliveryLimit is step 7 of check for [DeliveryLimit]: the
// limit is checked against the brokers' bounds, then set.
func (w *Worker) setGroupDeliveryLimit(ctx context.Context, admin *kgo.Client, current map[string]string) error {
	n := w.cfg.groupLimit
	if n <= 0 || current[groupcfg.DeliveryCountLimit] == strconv.Itoa(n) {
		return nil
	}
	if err := checkDeliveryBound(ctx, admin, n); err != nil {
		return err
	}
	err := groupcfg.Set(ctx, admin, w.cfg.group, map[string]string{groupcfg.DeliveryCountLimit: strconv.Itoa(n)})
	if err == nil {
		return nil
	}
	if err := w.alterRefused(admin, fmt.Sprintf("DeliveryLimit(%d)", n), err); err != nil {
		return err
	}
	if errors.Is(err, kerr.InvalidConfig) && strings.Contains(err.Error(), "Unknown group config") {
		return fmt.Errorf("worker: DeliveryLimit(%d): the brokers do not know the group config %s (Apache Kafka 4.3+); on older brokers set the broker config %s=%d instead and remove the option",
			n, groupcfg.DeliveryCountLimit, groupcfg.BrokerDeliveryCountLimit, n)
	}
	return fmt.Errorf("worker: DeliveryLimit(%d): %w (the broker allows group.share.min.delivery.count.limit to group.share.max.delivery.count.limit, 2 to 10 by default; or set it with kafka-configs.sh --entity-type groups --entity-name %s --alter --add-config %s=%d, or grant ALTER_CONFIGS on the group)",
		n, err, w.cfg.group, groupcfg.DeliveryCountLimit, n)
}

// checkDeliveryBound fails a DeliveryLimit(n) outside the brokers'
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
		return fmt.Errorf("worker: DeliveryLimit(%d): below %sminimum of %d (broker config %s); raise it, or lower %s on every broker",
			n, loFrom, lo, groupcfg.BrokerMinDeliveryCountLimit, groupcfg.BrokerMinDeliveryCountLimit)
	}
	if hi, hiFrom := bound(groupcfg.BrokerMaxDeliveryCountLimit, kafkaDeliveryLimitMax); n > hi {
		return fmt.Errorf("worker: DeliveryLimit(%d): above %smaximum of %d (broker config %s); lower it, or raise %s on every broker (Kafka allows up to %d)",
			n, hiFrom, hi, groupcfg.BrokerMaxDeliveryCountLimit, groupcfg.BrokerMaxDeliveryCountLimit, maxGroupDeliveryLimit)
	}
	return nil
}

// enableRenewals is step 7 of check for lock renewal: Kafka 4.3 added
// share.renew.acknowledge.enable (default true), and renewals fail while
// it is false. Older brokers and kfake do not know it and renew anyway.
func (w *Worker) enableRenewals(ctx context.Context, admin *kgo.Client, current map[string]string) error {
	v, ok := current[groupcfg.RenewAckEnable]
	if !ok || v == "true" {
		return nil
	}
	err := groupcfg.Set(ctx, admin, w.cfg.group, map[string]string{groupcfg.RenewAckEnable: "true"})
	if err == nil {
		return nil
	}
	if err := w.alterRefused(admin, fmt.Sprintf("group %q has %s=%s, so long jobs cannot renew their locks, and setting it to true failed", w.cfg.group, groupcfg.RenewAckEnable, v), err); err != nil {
		return err
	}
	return fmt.Errorf("worker: group %q has %s=%s, so long jobs cannot renew their locks, and setting it failed: %w (set it to true with kafka-configs.sh --entity-type groups --entity-name %s --alter --add-config %s=true)",
		w.cfg.group, groupcfg.RenewAckEnable, v, err, w.cfg.group, groupcfg.RenewAckEnable)
}

// ensureAssignmentInterval sets the group's assignment interval as
// [AssignmentInterval] asks and returns the interval the group then has
// (0 when unknown: the broker does not have the config, or it could not
// be read). It fails only for an explicit AssignmentInterval the worker
// is not allowed to set; any other failure is logged once
// (logAssignNotSet).
func (w *Worker) ensureAssignmentInterval(ctx context.Context, admin *kgo.Client, gc groupConfigs) (time.Duration, error) {
	want, explicit := w.cfg.assign.interval, w.cfg.assign.set
	have, known := parseMs(gc.current[groupcfg.AssignmentIntervalMs])
	switch {
	case want == 0 || known && have == want:
		return have, nil
	case gc.described && !known:
		// Kafka before 4.3, and kfake, which assigns at the first
		// heartbeat: nothing to set.
		w.logNoAssignInterval(ctx)
		return 0, nil
	case !explicit && known && (gc.own[groupcfg.AssignmentIntervalMs] || have <= want):
		return have, nil // an operator's choice, or already as short
	}
	err := groupcfg.Set(ctx, admin, w.cfg.group, map[string]string{
		groupcfg.AssignmentIntervalMs: strconv.FormatInt(want.Milliseconds(), 10),
	})
	switch {
	case err == nil:
		w.cfg.logger.Debug("set the group's assignment interval", "group", w.cfg.group, "assignment_interval", want)
		return want, nil
	case acl.Denied(err) && explicit:
		return 0, w.notAuthorized(admin, acl.Right{Op: "AlterConfigs", Resource: acl.Group, Name: w.cfg.group},
			fmt.Errorf("AssignmentInterval(%v): %w", want, err))
	}
	w.logAssignNotSet(ctx, err, have, known)
	return have, nil // 0 when not known
}

// parseMs reads a config in milliseconds where 0 is a value; ok is false
// when it is absent or not a number.
func parseMs(v string) (d time.Duration, ok bool) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

// logNoAssignInterval logs that the brokers have no assignment interval:
// at Info level for an explicit AssignmentInterval, else at Debug level
// (Kafka 4.2 and kfake are not worth a word).
func (w *Worker) logNoAssignInterval(ctx context.Context) {
	w.cfg.logger.Log(ctx, levelIf(w.cfg.assign.set, slog.LevelInfo, slog.LevelDebug),
		"the brokers have no share group assignment interval (Apache Kafka 4.3+); AssignmentInterval is ignored",
		"group", w.cfg.group, "asked", w.cfg.assign.interval)
}

// levelIf is hi when cond holds, else lo.
func levelIf(cond bool, hi, lo slog.Level) slog.Level {
	if cond {
		return hi
	}
	return lo
}

// logAssignNotSet logs, once, why setting the group's assignment interval
// failed (err), with the interval the group keeps (have, if known) and
// what to do.
func (w *Worker) logAssignNotSet(ctx context.Context, err error, have time.Duration, known bool) {
	want, explicit := w.cfg.assign.interval, w.cfg.assign.set
	log := w.cfg.logger.With("group", w.cfg.group)
	fix := fmt.Sprintf("kafka-configs.sh --bootstrap-server %s --alter --entity-type groups --entity-name %s --add-config %s=%d",
		w.bootstrap(), w.cfg.group, groupcfg.AssignmentIntervalMs, want.Milliseconds())
	switch {
	case acl.Denied(err):
		log.Warn("a worker gets its partitions, and a crashed worker's move to the others, only at the group's assignment interval, and the worker may not shorten it",
			"assignment_interval", durationOr(have, known), "fix", "grant ALTER_CONFIGS on the group, or set it with "+fix)
	case unknownGroupConfig(err):
		w.logNoAssignInterval(ctx)
	default:
		// Out of the brokers' bounds, most likely.
		log.Log(ctx, levelIf(explicit, slog.LevelWarn, slog.LevelInfo), "setting the group's assignment interval failed; a worker gets its partitions at the group's interval",
			"asked", want, "assignment_interval", durationOr(have, known), "error", err.Error(),
			"fix", fmt.Sprintf("allow it with the broker configs %s and %s on every broker, then set it with %s",
				groupcfg.BrokerMinAssignmentIntervalMs, groupcfg.BrokerMaxAssignmentIntervalMs, fix))
	}
}

// durationOr is d for a log line, or "unknown".
func durationOr(d time.Duration, known bool) any {
	if !known {
		return "unknown"
	}
	return d
}

// unknownGroupConfig reports whether err is a broker's refusal of a group
// config it does not know.
func unknownGroupConfig(err error) bool {
	return errors.Is(err, kerr.InvalidConfig) && strings.Contains(strings.ToLower(err.Error()), "unknown")
}

// setupBrokerDLQ settles the group's dead-letter topic; current holds the
// group configs describeGroupConfigs found (described is false when it
// could not). It returns an error only for a topic asked for with
// BrokerDLQ.
func (w *Worker) setupBrokerDLQ(ctx context.Context, admin *kgo.Client, current map[string]string, described bool) error {
	explicit := w.cfg.brokerDLQSet
	want := w.cfg.brokerDLQ
	if explicit && want == "" {
		return nil
	}
	configured, supported := current[groupcfg.DLQTopicName]
	log := w.cfg.logger.With("group", w.cfg.group)
	if !supported {
		if explicit {
			why := "the brokers do not know the group config " + groupcfg.DLQTopicName + " (share-group dead-letter topics, KIP-1191, came with Apache Kafka 4.4)"
			if !described {
				why = "the group's configs cannot be read (grant DESCRIBE_CONFIGS on the group)"
			}
			return fmt.Errorf("%w: BrokerDLQ(%q): %s; remove the option, or upgrade the brokers (the dlq middleware parks failed jobs either way)", ErrBrokerDLQ, want, why)
		}
		return nil // older brokers, kfake: nothing to set up
	}
	if !explicit {
		want = configured // an operator's choice wins over the default name
		if want == "" {
			want = BrokerDLQTopic(w.cfg.group)
		}
	}
	if err := w.checkBrokerDLQTopic(ctx, admin, want); err != nil {
		if explicit {
			return fmt.Errorf("%w: BrokerDLQ(%q): %w", ErrBrokerDLQ, want, err)
		}
		logNoBrokerDLQ(log, want, configured != "", err)
		return nil
	}
	set := map[string]string{}
	if configured != want {
		set[groupcfg.DLQTopicName] = want
	}
	if configured != want && current[groupcfg.DLQCopyRecord] != "true" {
		set[groupcfg.DLQCopyRecord] = "true"
	}
	if len(set) > 0 {
		if err := groupcfg.Set(ctx, admin, w.cfg.group, set); err != nil {
			if acl.Denied(err) {
				err = w.notAuthorized(admin, acl.Right{Op: "AlterConfigs", Resource: acl.Group, Name: w.cfg.group},
					fmt.Errorf("setting %s=%s: %w", groupcfg.DLQTopicName, want, err))
			} else {
				err = fmt.Errorf("setting %s=%s failed: %w (set it with kafka-configs.sh --bootstrap-server %s --alter --entity-type groups --entity-name %s --add-config %s=%s,%s=true, or grant ALTER_CONFIGS on the group)",
					groupcfg.DLQTopicName, want, err, w.bootstrap(), w.cfg.group, groupcfg.DLQTopicName, want, groupcfg.DLQCopyRecord)
			}
			if explicit {
				return fmt.Errorf("%w: BrokerDLQ(%q): %w", ErrBrokerDLQ, want, err)
			}
			logNoBrokerDLQ(log, want, configured != "", err)
			return nil
		}
	}
	w.brokerDLQ.Store(&want)
	log.Info("the broker writes archived records to the group's dead-letter topic", "topic", want)
	return nil
}

// checkBrokerDLQTopic returns nil when the broker will write the group's
// archived records to topic, else an error that says how to fix it: a
// *topicUnseen when the topic is not there as far as the worker can tell.
func (w *Worker) checkBrokerDLQTopic(ctx context.Context, admin *kgo.Client, topic string) error {
	prefix := BrokerDLQPrefixDefault
	if m, err := groupcfg.Broker(ctx, admin, groupcfg.BrokerDLQTopicPrefix); err == nil {
		if p, ok := m[groupcfg.BrokerDLQTopicPrefix]; ok {
			prefix = p
		}
	}
	if !strings.HasPrefix(topic, prefix) {
		return &topicUnseen{fmt.Errorf("the brokers take dead-letter topics only with names starting with %q (broker config %s); name it %s%s",
			prefix, groupcfg.BrokerDLQTopicPrefix, prefix, strings.TrimPrefix(topic, BrokerDLQPrefixDefault))}
	}
	adm := kadm.NewClient(admin)
	listed, err := adm.ListTopics(ctx, topic)
	if acl.Denied(err) {
		return &topicUnseen{w.notAuthorized(admin, acl.Right{Op: "Describe", Resource: acl.Topic, Name: topic}, err)}
	}
	if err != nil {
		return fmt.Errorf("cannot list topic %s: %v", topic, err)
	}
	if d, ok := listed[topic]; ok && acl.Denied(d.Err) {
		return &topicUnseen{w.notAuthorized(admin, acl.Right{Op: "Describe", Resource: acl.Topic, Name: topic}, d.Err)}
	}
	if d, ok := listed[topic]; !ok || d.Err != nil {
		shareq := ""
		if topic == BrokerDLQTopic(w.cfg.group) {
			shareq = fmt.Sprintf(" (or shareq topics create -group-dlq %s -brokers %s)", w.cfg.group, w.bootstrap())
		}
		return &topicUnseen{fmt.Errorf("topic %s does not exist; create it with kafka-topics.sh --bootstrap-server %s --create --topic %s --config %s=true%s",
			topic, w.bootstrap(), topic, groupcfg.TopicDLQGroupEnable, shareq)}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err == nil {
		var rc kadm.ResourceConfig
		rc, err = rcs.On(topic, nil)
		if err == nil {
			err = rc.Err
		}
		if err == nil {
			for _, c := range rc.Configs {
				if c.Key == groupcfg.TopicDLQGroupEnable && c.MaybeValue() == "true" {
					return nil
				}
			}
			return fmt.Errorf("topic %s lacks topic config %s=true, so the broker writes nothing to it; set it with kafka-configs.sh --bootstrap-server %s --alter --entity-type topics --entity-name %s --add-config %s=true",
				topic, groupcfg.TopicDLQGroupEnable, w.bootstrap(), topic, groupcfg.TopicDLQGroupEnable)
		}
	}
	if acl.Denied(err) {
		return w.notAuthorized(admin, acl.Right{Op: "DescribeConfigs", Resource: acl.Topic, Name: topic}, err)
	}
	return fmt.Errorf("cannot read the configs of topic %s: %v (grant DESCRIBE_CONFIGS on it)", topic, err)
}

// topicUnseen is checkBrokerDLQTopic's error for a topic that is not
// there as far as the worker can tell: it does not exist, the brokers
// refuse its name, or the worker may not describe it.
type topicUnseen struct{ err error }

func (e *topicUnseen) Error() string { return e.err.Error() }
func (e *topicUnseen) Unwrap() error { return e.err }

// logNoBrokerDLQ says, once at start, that the broker will not write the
// group's archived records to topic, and how to fix it (err): at Warn
// level when the topic was asked for (configured on the group, or
// created: err is not a topicUnseen), else at Info level, since the
// broker's dead-letter topic is optional and the dlq middleware parks
// failed jobs without it.
func logNoBrokerDLQ(log *slog.Logger, topic string, configured bool, err error) {
	var unseen *topicUnseen
	switch {
	case configured:
		log.Warn("the group's dead-letter topic cannot take records: the broker archives failed records without writing them there",
			"topic", topic, "error", err.Error())
	case errors.As(err, &unseen):
		log.Info("no dead-letter topic on the broker: a job whose last delivery dies with its worker is archived unrecorded "+
			"(the broker's own, one per group on Kafka 4.4+; the dlq middleware's topics are apart and keep parking failed jobs)",
			"topic", topic, "fix", err.Error())
	default:
		log.Warn("the dead-letter topic on the broker cannot take records: a job whose last delivery dies with its worker is archived unrecorded",
			"topic", topic, "fix", err.Error())
	}
}

// deliveryLimitFor is step 9 of check: the group's limit less
// SpareDeliveries. A limit just set with DeliveryLimit wins over the one
// described: the broker may still describe the old value.
func (w *Worker) deliveryLimitFor(ctx context.Context, admin *kgo.Client, current map[string]string) (int32, error) {
	group := int32(w.cfg.groupLimit)
	if group == 0 {
		group = readLimit(ctx, admin, current)
	}
	spare := int32(w.cfg.spareDeliveries)
	if spare >= group {
		return 0, fmt.Errorf("worker: SpareDeliveries(%d) leaves none of group %q's %d deliveries to run: lower it, or raise the group's limit with worker.DeliveryLimit", spare, w.cfg.group, group)
	}
	return group - spare, nil
}

// readLimit returns the group's delivery count limit: the group config
// (among those describeGroupConfigs found), else the broker
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

// checkConcurrency is step 10 of check.
func (w *Worker) checkConcurrency() {
	seen := map[string]bool{}
	for _, cc := range w.checkers {
		err := cc.CheckConcurrency(w.cfg.concurrency)
		if err == nil || seen[err.Error()] {
			continue
		}
		seen[err.Error()] = true
		w.cfg.logger.With("group", w.cfg.group).Warn("a handler's resource is smaller than the worker's concurrency",
			"concurrency", w.cfg.concurrency, "error", err)
	}
}

// checkSnoozer is step 11 of check.
func (w *Worker) checkSnoozer(ctx context.Context) {
	c, ok := w.cfg.snoozer.(interface{ Check(context.Context) error })
	if !ok {
		return
	}
	if err := c.Check(ctx); err != nil {
		w.cfg.logger.Warn("the Snoozer cannot keep snoozed jobs' copies; they are produced to their topics until it can",
			"group", w.cfg.group, "error", err)
	}
}

// noteStartAtEnd is step 12 of check: it counts the records in the
// handled topics' partitions that the group has not started, when the
// group starts them at their log end, and logs the count, once. A
// newcomer who produced jobs before the first worker started otherwise
// sees a worker that runs nothing and says nothing. A failed request
// only skips the line.
func (w *Worker) noteStartAtEnd(ctx context.Context, admin *kgo.Client) {
	if w.cfg.offsetReset != "" || (w.groupReset != "" && w.groupReset != "latest") || len(w.topics) == 0 {
		return
	}
	adm := kadm.NewClient(admin)
	described, err := adm.DescribeShareGroupOffsets(ctx, w.cfg.group)
	if err != nil {
		return
	}
	d := described[w.cfg.group]
	if d.Err != nil && !errors.Is(d.Err, kerr.GroupIDNotFound) {
		return
	}
	starts, err := adm.ListStartOffsets(ctx, w.topics...)
	if err != nil {
		return
	}
	ends, err := adm.ListEndOffsets(ctx, w.topics...)
	if err != nil {
		return
	}
	var records int64
	var topics []string
	ends.Each(func(end kadm.ListedOffset) {
		if so, ok := d.Offsets.Lookup(end.Topic, end.Partition); ok && so.Err == nil && so.StartOffset >= 0 {
			return // started: the group's own start offset holds
		}
		first, ok := starts.Lookup(end.Topic, end.Partition)
		if end.Err != nil || !ok || first.Err != nil || end.Offset <= first.Offset {
			return
		}
		records += end.Offset - first.Offset
		if !slices.Contains(topics, end.Topic) {
			topics = append(topics, end.Topic)
		}
	})
	if records == 0 {
		return
	}
	slices.Sort(topics)
	w.cfg.logger.Info("the share group starts these topics at their log end, as Kafka does by default (share.auto.offset.reset=latest): the records already in them will not run;"+
		" to run them, set worker.AutoOffsetReset(\"earliest\") before the group starts them, or, once it has, stop its workers and run: shareq reset "+w.cfg.group+" -to earliest -yes",
		"group", w.cfg.group, "topics", topics, "records", records)
}
