package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
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
	m, err := member.New(member.Config{Client: cl, Group: w.cfg.group, Topics: w.topics, MaxWait: w.cfg.fetchMaxWait, Logger: log})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	x := newExecutor(w, m)
	clientID, _ := cl.OptValue(kgo.ClientID).(string)
	log.Info("worker started", "topics", w.topics, "concurrency", w.cfg.concurrency,
		"delivery_limit", w.deliveryLimit.Load(), "client_id", clientID, "member_id", m.Stats().MemberID)

	// The member outlives ctx: after the graceful stop the executor asks
	// it to leave, and Run returns once it has.
	mctx, cancelMember := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelMember()
	// The helpers below stop with the worker, whichever way it stops.
	hctx, cancelHelpers := context.WithCancel(ctx)
	var wg conc.WaitGroup
	var runErr error
	wg.Go(func() { runErr = m.Run(mctx) })
	wg.Go(func() { w.watchTopics(hctx, nil, log) })
	wg.Go(func() { w.reportMember(hctx, m, clientID) })

	x.run(ctx)
	cancelHelpers()
	// The executor returns once the member's events have closed, so Run
	// has returned or is about to; never wait on it for ever.
	stop := time.AfterFunc(leaveTimeout, cancelMember)
	wg.Wait()
	stop.Stop()
	if runErr != nil && ctx.Err() == nil {
		return fmt.Errorf("worker: share-group member: %w", runErr)
	}
	log.Info("worker stopped")
	return nil
}

// reportMember gives the MemberObservers a snapshot every
// memberStatsEvery until ctx is done, and a last one then.
func (w *Worker) reportMember(ctx context.Context, m *member.Member, clientID string) {
	obs, ok := w.cfg.observer.(MemberObserver)
	if !ok {
		return
	}
	tick := time.NewTicker(memberStatsEvery)
	defer tick.Stop()
	for {
		obs.MemberStats(w.memberStats(m.Stats(), clientID))
		select {
		case <-ctx.Done():
			obs.MemberStats(w.memberStats(m.Stats(), clientID))
			return
		case <-tick.C:
		}
	}
}

func (w *Worker) memberStats(s member.Stats, clientID string) MemberStats {
	acks := make(map[Ack]int64, len(s.Acks))
	for t, n := range s.Acks {
		acks[ackOf(t)] += n
	}
	return MemberStats{
		ClientID: clientID, MemberID: s.MemberID, State: s.State.String(), Partitions: s.Partitions,
		Held: s.Held, FetchRTT: s.FetchRTT,
		Fetches: s.Fetches, Fetched: s.Fetched, Acks: acks, AckErrors: s.AckErrors, LostRecords: s.LostRecords,
		SessionsOpened: s.SessionsOpened, SessionsReset: s.SessionsReset, Rejoins: s.Rejoins,
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

// useMember reports whether Run uses the share-group member core: while it
// replaces the lanes, SHAREQ_ENGINE=member selects it.
func useMember() bool { return os.Getenv("SHAREQ_ENGINE") == "member" }
