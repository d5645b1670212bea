package worker

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/sourcegraph/conc"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/member"
)

// memberStatsEvery is how often a MemberObserver gets a snapshot.
const memberStatsEvery = time.Second

// leaveTimeout bounds the member's final requests after the executor
// asked it to leave: the epoch −1 acknowledgements and the leave heartbeat.
const leaveTimeout = 15 * time.Second

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

// runMember runs the worker as one share-group member: the member speaks
// the share protocol and the executor runs the jobs it hands out.
func (w *Worker) runMember(ctx context.Context, log *slog.Logger) error {
	cl, err := kgo.NewClient(append(w.baseOpts(),
		// A share session lives on its broker connection, and a closed
		// connection releases every record the session holds. Fetches
		// and renewals keep the connections busy except while every slot
		// runs a long job between renewals: keep them open for locks of
		// up to 20 minutes.
		kgo.ConnIdleTimeout(10*time.Minute))...)
	if err != nil {
		return fmt.Errorf("worker: client options: %w", err)
	}
	defer cl.Close()
	m, err := member.New(member.Config{Client: cl, Group: w.cfg.group, Topics: w.topics, MaxWait: w.cfg.fetchMaxWait, MaxBytes: w.cfg.maxBytesInHand,
		AssignmentPoll: assignmentPoll(w.assignEvery), Logger: w.cfg.logger, Priority: w.cfg.fetchPriority()})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	xc := w.executorConfig()
	xc.Produce = cl.Produce // snoozed jobs' copies
	xc.Rate = w.newRateLimiter()

	// The helpers stop with ctx (the watches) or once the member is gone
	// (the observers' snapshots and the status, so the last one says it
	// left). Their client consumes nothing.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	rctx, stopReports := context.WithCancel(context.WithoutCancel(ctx))
	defer stopReports()
	var helpers conc.WaitGroup
	acl, err := kgo.NewClient(w.baseOpts()...)
	if err != nil {
		log.Error("cannot watch the topics (deletion, growth), partitions (stalls) and the control topic (pauses, limits)", "error", err)
	} else {
		defer acl.Close()
		// The pauses and limits in force are read before the member
		// starts: it takes the pauses from its mailbox before it can
		// have joined, and the executor applies both before it grants.
		xc.InitialControl = w.followControl(ctx, wctx, &helpers, acl, log)
		m.PauseTopics(slices.Sorted(maps.Keys(pausesOf(xc.InitialControl, w.cfg.group, w.handlers))))
	}
	x := newExecutor(xc, m)
	clientID, _ := cl.OptValue(kgo.ClientID).(string)
	log.Info("worker started", append([]any{"topics", w.topics, "concurrency", w.cfg.concurrency,
		"delivery_limit", w.deliveryLimit.Load(), "client_id", clientID, "member_id", m.Stats().MemberID}, xc.Rate.logArgs()...)...)

	// The member outlives ctx: after the graceful stop the executor asks
	// it to leave, and its Run returns once it has.
	mctx, cancelMember := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelMember()
	var running conc.WaitGroup
	var runErr error
	running.Go(func() { runErr = m.Run(mctx) })

	if acl != nil {
		helpers.Go(func() { w.watchTopics(wctx, acl, log) })
		helpers.Go(func() { w.watchStalls(wctx, acl, m, log, clientID) })
		// The status goes on until the member has left, then its
		// tombstone takes the worker off the list.
		helpers.Go(func() { w.publishStatus(rctx, acl, m, x, clientID, log) })
		if xc.Rate != nil {
			helpers.Go(func() { w.watchRate(wctx, acl, xc.Rate, m.Stats().MemberID, log) })
		}
	}
	helpers.Go(func() { w.reportMember(rctx, m, x, clientID) })

	x.run(ctx)
	// The executor returns once the member's events have closed, so Run
	// has returned or is about to; never wait on it for ever.
	stop := time.AfterFunc(leaveTimeout, cancelMember)
	running.Wait()
	stop.Stop()
	stopWatch()
	stopReports()
	helpers.Wait()
	if runErr != nil && ctx.Err() == nil {
		return w.memberErr(cl, runErr)
	}
	st := m.Stats()
	args := []any{"fetches", st.Fetches, "records_fetched", st.Fetched}
	for _, o := range Outcomes() { // jobs by outcome: succeeded=… parked=…
		args = append(args, o.String(), x.outcomes[o])
	}
	args = append(args, "sessions_opened", st.SessionsOpened, "sessions_reset", st.SessionsReset, "records_lost", st.LostRecords, "rejoins", st.Rejoins)
	log.Info("worker stopped", args...)
	return nil
}

// reportMember gives the MemberObservers a snapshot every
// memberStatsEvery until ctx is done, and a last one then.
func (w *Worker) reportMember(ctx context.Context, m *member.Member, x *executor, clientID string) {
	obs, ok := w.cfg.observer.(MemberObserver)
	if !ok {
		return
	}
	tick := time.NewTicker(memberStatsEvery)
	defer tick.Stop()
	for {
		obs.MemberStats(memberStats(m.Stats(), x, clientID))
		select {
		case <-ctx.Done():
			obs.MemberStats(memberStats(m.Stats(), x, clientID))
			return
		case <-tick.C:
		}
	}
}

func memberStats(s member.Stats, x *executor, clientID string) MemberStats {
	acks := make(map[Ack]int64, len(s.Acks))
	for t, n := range s.Acks {
		acks[ackOf(t)] += n
	}
	running, buffered := x.counts()
	rateTopic, rateLimit, rateShare := x.cfg.Rate.stats()
	return MemberStats{
		ClientID: clientID, MemberID: s.MemberID, State: s.State.String(), Partitions: s.Partitions,
		Held: s.Held, HeldBytes: s.HeldBytes, Buffered: buffered, Running: running, FetchRTT: s.FetchRTT,
		Waiting: int(x.pubWaiting.Load()), Snoozed: int(x.pubSnoozed.Load()), BreakersOpen: int(x.pubBreakers.Load()), Paused: int(x.pubHalted.Load()),
		Fetches: s.Fetches, WholeBatchFetches: s.BatchFetches, Fetched: s.Fetched, Acks: acks, AckErrors: s.AckErrors, LostRecords: s.LostRecords,
		SessionsOpened: s.SessionsOpened, SessionsReset: s.SessionsReset, Rejoins: s.Rejoins,
		RateTopic: rateTopic, RateLimit: rateLimit, RateShare: rateShare,
	}
}

// ackOf maps the member's acknowledgement types to the worker's.
func ackOf(t member.AckType) Ack {
	switch t {
	case member.Accept:
		return AckAccept
	case member.Reject:
		return AckReject
	}
	return AckRelease
}
