package secure_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/metrics"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
	"github.com/shareq/shareq/worker"
)

// TestSecureClients runs, over SASL_SSL with SCRAM-SHA-512 and over mTLS,
// every client shareq makes: a worker with a dlq middleware (its
// producer), the enqueue producer, the outbox relay (its Postgres over
// TLS when SHAREQ_TEST_DATABASE_URL asks for it) and the lag collector,
// each with the ACLs docs/security.md lists and no more. Over SCRAM the
// worker and the other clients are two users, so each set of ACLs is
// checked alone; over mTLS one certificate holds both sets. Then it greps
// everything the run wrote (logs, metrics, the DLQ record, the jobs'
// errors, the errors of failed starts) for the passwords.
func TestSecureClients(t *testing.T) {
	t.Parallel()
	s := kafkatest.Secure(t)
	t.Run("SCRAM-SHA-512 over TLS", func(t *testing.T) {
		t.Parallel()
		runClients(t, s, s.Principal(), s.SCRAMOpts(t), s.OpsPrincipal(), s.OpsSCRAMOpts(t))
	})
	t.Run("mTLS", func(t *testing.T) {
		t.Parallel()
		runClients(t, s, s.MTLSPrincipal(), s.MTLSOpts(t), s.MTLSPrincipal(), s.MTLSOpts(t))
	})
}

func runClients(t *testing.T, s *kafkatest.SecureCluster, workerP string, workerOpts []kgo.Opt, opsP string, opsOpts []kgo.Opt) {
	topic, dlqTopic, group := s.Topic(t, 1), s.Topic(t, 1), s.Group(t)
	s.Allow(t, workerP, workerACLs(topic, group, dlqTopic)...)
	// docs/security.md, producers and the lag collector.
	s.Allow(t, opsP, kafkatest.ACL{Resource: "topic", Name: topic, Op: "Write"},
		kafkatest.ACL{Resource: "topic", Name: topic, Op: "Describe"},
		kafkatest.ACL{Resource: "group", Name: group, Op: "Describe"})

	var logs logbuf.Buffer
	log := logger(&logs)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	park, err := dlq.Middleware(s.Client(t, workerOpts...), dlq.Topic(dlqTopic), dlq.Logger(log))
	if err != nil {
		t.Fatal(err)
	}
	rec := newJobs()
	w, err := worker.New(
		worker.ClientOpts(workerOpts...),
		worker.Group(group),
		worker.Logger(log),
		worker.RequireTopics(dlqTopic),
		worker.Observers(rec, m),
		worker.Use(park),
		worker.Handle(topic, handler.Func(func(ctx context.Context, job *handler.Job) error {
			if string(job.Value) == `"poison"` {
				return handler.Permanent(errors.New("poison job"))
			}
			return nil
		})),
	)
	if err != nil {
		t.Fatal(err)
	}
	stop := kafkatest.Run(t, w.Run)

	// The enqueue producer.
	q, err := enqueue.New(s.Client(t, append(enqueue.ProducerOpts(), opsOpts...)...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, v := range []string{"a", "b", "poison"} {
		if _, err := q.Enqueue(ctx, topic, v); err != nil {
			t.Fatalf("enqueue: %v", err)
		}
	}
	// The outbox relay.
	want := []string{`"a"`, `"b"`, `"poison"`}
	if os.Getenv(pgtest.EnvURL) != "" {
		pool, _ := pgtest.NewPool(t, 4)
		if err := migrations.Up(ctx, pool); err != nil {
			t.Fatal(err)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pgoutbox.EnqueueTx(ctx, tx, topic, "relayed"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		r, err := pgoutbox.NewRelay(pool, s.Client(t, append(enqueue.ProducerOpts(), opsOpts...)...), pgoutbox.Logger(log), pgoutbox.PollInterval(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		stopRelay := kafkatest.Run(t, r.Run)
		want = append(want, `"relayed"`)
		defer func() {
			if err := stopRelay(); err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("relay: %v", err)
			}
		}()
	} else {
		t.Logf("%s is unset: the outbox relay is not run", pgtest.EnvURL)
	}
	rec.waitFor(t, "every job done", func(ran map[string]int, _ []worker.Result) bool {
		for _, v := range want {
			if ran[v] == 0 {
				return false
			}
		}
		return true
	})

	parked := s.Consume(t, dlqTopic, 1)
	env, err := dlq.Parse(parked[0])
	if err != nil {
		t.Fatalf("parked record: %v", err)
	}
	if env.SourceTopic != topic {
		t.Errorf("parked from %q, want %q", env.SourceTopic, topic)
	}

	// The lag collector: the group has done everything.
	lag := metrics.NewLagCollector(kadm.NewClient(s.Client(t, opsOpts...)), group, metrics.LagMinInterval(0), metrics.LagLogger(log))
	lagReg := prometheus.NewRegistry()
	lagReg.MustRegister(lag)
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := testutil.GatherAndCount(lagReg, "shareq_share_group_lag_total")
		if err == nil && n == 1 && lagTotal(t, lagReg) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lag collector: %d series, %v, want one series of lag 0 (logs:\n%s)", n, err, logs.String())
		}
		time.Sleep(100 * time.Millisecond) // a scrape is a poll of the broker, not a wait on an event
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	var out bytes.Buffer
	for _, g := range []prometheus.Gatherer{reg, lagReg} {
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			out.WriteString(mf.String())
		}
	}
	for _, r := range parked {
		out.Write(r.Key)
		out.Write(r.Value)
		for _, h := range r.Headers {
			out.WriteString(h.Key)
			out.Write(h.Value)
		}
	}
	rec.mu.Lock()
	for _, r := range rec.results {
		if r.Err != nil {
			out.WriteString(r.Err.Error())
		}
	}
	rec.mu.Unlock()
	// And the errors of failed starts: a wrong password and a missing ACL.
	err, _ = startErr(t, 10*time.Second, worker.ClientOpts(s.SCRAMOptsWith(t, s.TLSConfig(t), s.Password+"x")...),
		worker.Group(group), worker.Logger(log), worker.Handle(topic, handler.Func(nopJob)))
	out.WriteString(err.Error())
	err, _ = startErr(t, 10*time.Second, worker.ClientOpts(workerOpts...),
		worker.Group(kafkatest.Name(t, "g")), worker.Logger(log), worker.Handle(topic, handler.Func(nopJob)))
	out.WriteString(err.Error())
	out.WriteString(logs.String())
	if out.Len() < 1000 || !strings.Contains(logs.String(), "job parked in its dead-letter topic") {
		t.Fatalf("the run wrote only %d bytes, or no park: nothing to check", out.Len())
	}
	for _, pw := range []string{s.Password, s.OpsPassword} {
		if i := bytes.Index(out.Bytes(), []byte(pw)); i >= 0 {
			t.Fatalf("a SCRAM password shows in the run's output, at byte %d of %d", i, out.Len())
		}
	}
}

func nopJob(context.Context, *handler.Job) error { return nil }

// TestSecureConnectErrors: each way of connecting wrongly to a secure
// listener fails the worker's start with an error that says what is
// wrong, within the start-up timeout.
func TestSecureConnectErrors(t *testing.T) {
	t.Parallel()
	s := kafkatest.Secure(t)
	topic, group := s.Topic(t, 1), s.Group(t)
	s.Allow(t, s.Principal(), workerACLs(topic, group, "")...)
	s.Allow(t, s.MTLSPrincipal(), workerACLs(topic, group, "")...)

	other := &tls.Config{RootCAs: certPoolOf(t, s.OtherCAFile), MinVersion: tls.VersionTLS12}
	otherClient := s.TLSConfig(t)
	cert, err := tls.LoadX509KeyPair(s.OtherCertFile, s.OtherKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	otherClient.Certificates = []tls.Certificate{cert}

	const startTimeout = 10 * time.Second
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
		want []string
	}{
		{"wrong password", s.SCRAMOptsWith(t, s.TLSConfig(t), "not-the-password"),
			[]string{"SASL_AUTHENTICATION_FAILED", "check the user name, the password and the mechanism"}},
		{"untrusted broker certificate", s.SCRAMOptsWith(t, other, s.Password),
			[]string{"certificate signed by unknown authority", "signed by a CA the client does not trust", "RootCAs"}},
		{"plaintext client on the SASL_SSL port", []kgo.Opt{kgo.SeedBrokers(s.SASLAddr)},
			[]string{"the listener speaks TLS and the client does not", "kgo.DialTLSConfig"}},
		{"plaintext client on the mTLS port", []kgo.Opt{kgo.SeedBrokers(s.MTLSAddr)},
			[]string{"the listener speaks TLS and the client does not", "kgo.DialTLSConfig"}},
		{"no client certificate on the mTLS port", []kgo.Opt{kgo.SeedBrokers(s.MTLSAddr), kgo.DialTLSConfig(s.TLSConfig(t))},
			[]string{"bad certificate", "requires a client certificate (mTLS)", "tls.Config.Certificates"}},
		{"untrusted client certificate on the mTLS port", []kgo.Opt{kgo.SeedBrokers(s.MTLSAddr), kgo.DialTLSConfig(otherClient)},
			[]string{"bad certificate", "requires a client certificate (mTLS)"}},
		{"TLS client on the PLAINTEXT port", []kgo.Opt{kgo.SeedBrokers(s.AdminAddr), kgo.DialTLSConfig(s.TLSConfig(t))},
			[]string{"the listener does not speak TLS"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err, took := startErr(t, startTimeout, worker.ClientOpts(tc.opts...), worker.Group(group),
				worker.Handle(topic, handler.Func(nopJob)))
			if !errors.Is(err, worker.ErrBrokersUnreachable) {
				t.Errorf("Run = %v, want ErrBrokersUnreachable", err)
			}
			mustContain(t, "the error", err.Error(), tc.want...)
			t.Logf("failed after %v: %v", took.Round(time.Millisecond), err)
		})
	}
}

func certPoolOf(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pem) {
		t.Fatalf("%s: no certificate", file)
	}
	return p
}

// lagTotal returns the one shareq_share_group_lag_total value of reg.
func lagTotal(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "shareq_share_group_lag_total" && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}
