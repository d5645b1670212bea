package secure_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/worker"
)

// workerACLs are the ACLs a worker of group on topic needs (the rows of
// docs/security.md's worker table), plus Write on dlqTopic when given.
func workerACLs(topic, group, dlqTopic string) []kafkatest.ACL {
	acls := []kafkatest.ACL{
		{Resource: "topic", Name: topic, Op: "Read"},
		{Resource: "group", Name: group, Op: "Read"},
		{Resource: "group", Name: group, Op: "DescribeConfigs"},
	}
	if dlqTopic != "" {
		acls = append(acls, kafkatest.ACL{Resource: "topic", Name: dlqTopic, Op: "Write"})
	}
	return acls
}

// without returns acls less the one at i.
func without(acls []kafkatest.ACL, i int) []kafkatest.ACL {
	return append(append([]kafkatest.ACL{}, acls[:i]...), acls[i+1:]...)
}

// jobs records the jobs a handler saw and their outcomes.
type jobs struct {
	mu      sync.Mutex
	ran     map[string]int
	results []worker.Result
	changed chan struct{}
}

func newJobs() *jobs { return &jobs{ran: map[string]int{}, changed: make(chan struct{}, 1)} }

func (j *jobs) JobStarted(*handler.Job) {}
func (j *jobs) JobFinished(job *handler.Job, res worker.Result) {
	j.mu.Lock()
	j.ran[string(job.Value)]++
	j.results = append(j.results, res)
	j.mu.Unlock()
	select {
	case j.changed <- struct{}{}:
	default:
	}
}
func (j *jobs) LockRenewed(*handler.Job, error) {}
func (j *jobs) AckFailed(string, int32, error)  {}

// waitFor waits until cond holds of the results, failing t after 60 s.
func (j *jobs) waitFor(t *testing.T, what string, cond func(ran map[string]int, results []worker.Result) bool) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		j.mu.Lock()
		ok := cond(j.ran, j.results)
		j.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-j.changed:
		case <-deadline:
			j.mu.Lock()
			defer j.mu.Unlock()
			t.Fatalf("%s: not within 60s (ran %v, %d results)", what, j.ran, len(j.results))
		}
	}
}

// startErr runs a worker made of opts and returns Run's error, which must
// come (the worker must fail) within the start-up timeout plus a margin,
// and how long it took.
func startErr(t *testing.T, startTimeout time.Duration, opts ...worker.Option) (error, time.Duration) {
	t.Helper()
	w, err := worker.New(append([]worker.Option{worker.StartTimeout(startTimeout)}, opts...)...)
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout+20*time.Second)
	defer cancel()
	began := time.Now()
	err = w.Run(ctx)
	took := time.Since(began)
	if err == nil || errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		t.Fatalf("Run = %v after %v: want a start-up error within the start timeout %v", err, took, startTimeout)
	}
	if took > startTimeout+5*time.Second {
		t.Errorf("Run failed after %v, past the start timeout %v", took, startTimeout)
	}
	return err, took
}

// mustContain fails t unless s holds every one of want.
func mustContain(t *testing.T, what, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("%s does not say %q:\n%s", what, w, s)
		}
	}
}

// logger returns a logger that writes to buf.
func logger(buf *logbuf.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// produce writes values to topic with the super-user client.
func produce(t *testing.T, s *kafkatest.SecureCluster, topic string, values ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for _, v := range values {
		recs = append(recs, &kgo.Record{Topic: topic, Value: []byte(v)})
	}
	if err := s.AdminClient().ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}
