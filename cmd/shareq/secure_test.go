package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
	"github.com/shareq/shareq/worker"
)

// TestSecureCLI runs shareq enqueue, status and dlq list against the
// secure broker of scripts/kafka-secure.sh (skipped without it,
// kafkatest.EnvSecure) with the flags and environment variables a user
// would pass, and with the ACLs docs/security.md lists for each command:
// enqueue over SCRAM-SHA-512 with flags (password from the environment),
// status over SCRAM from the environment alone, dlq list over mTLS with
// flags; then a wrong password fails with an error that says so and does
// not repeat it.
func TestSecureCLI(t *testing.T) {
	s := kafkatest.Secure(t)
	topic, dlqTopic, group := s.Topic(t, 1), s.Topic(t, 1), s.Group(t)
	user, ops, mtls := s.Principal(), s.OpsPrincipal(), s.MTLSPrincipal()
	// The worker that parks the job (docs/security.md, worker with a DLQ).
	s.Allow(t, user,
		kafkatest.ACL{Resource: "topic", Name: topic, Op: "Read"},
		kafkatest.ACL{Resource: "group", Name: group, Op: "Read"},
		kafkatest.ACL{Resource: "group", Name: group, Op: "DescribeConfigs"},
		kafkatest.ACL{Resource: "topic", Name: dlqTopic, Op: "Write"})
	// The CLI's user: shareq enqueue needs Write on the topic, shareq
	// status Describe on the group and on its topics.
	s.Allow(t, ops, kafkatest.ACL{Resource: "topic", Name: topic, Op: "Write"},
		kafkatest.ACL{Resource: "topic", Name: topic, Op: "Describe"},
		kafkatest.ACL{Resource: "group", Name: group, Op: "Describe"})
	// shareq dlq list, as the mTLS client: Read on the DLQ topic.
	s.Allow(t, mtls, kafkatest.ACL{Resource: "topic", Name: dlqTopic, Op: "Read"})

	t.Setenv(saslPasswordEnv, s.OpsPassword)
	out, errOut, err := cli(t, "enqueue", "-brokers", s.SASLAddr, "-tls-ca", s.CAFile,
		"-sasl-mechanism", "SCRAM-SHA-512", "-sasl-user", s.OpsUser, topic, `"poison"`)
	if err != nil {
		t.Fatalf("enqueue over SCRAM: %v\n%s", err, errOut)
	}
	jobID := strings.TrimSpace(out)

	parkedOne := make(chan struct{})
	var once sync.Once
	park, err := dlq.Middleware(s.Client(t, s.SCRAMOpts(t)...), dlq.Topic(dlqTopic),
		dlq.OnPark(func(*handler.Job, string) { once.Do(func() { close(parkedOne) }) }))
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.ClientOpts(s.SCRAMOpts(t)...), worker.Group(group), worker.Use(park),
		worker.Handle(topic, handler.Func(func(context.Context, *handler.Job) error {
			return handler.Permanent(errors.New("poison"))
		})))
	if err != nil {
		t.Fatal(err)
	}
	stop := kafkatest.Run(t, w.Run)
	select {
	case <-parkedOne:
	case <-time.After(60 * time.Second):
		t.Fatal("the job was not parked within 60s")
	}

	// status from the environment alone, while the worker is a member.
	t.Setenv(brokersEnv, s.SASLAddr)
	t.Setenv(tlsCAEnv, s.CAFile)
	t.Setenv(saslMechanismEnv, "SCRAM-SHA-512")
	t.Setenv(saslUserEnv, s.OpsUser)
	out, errOut, err = cli(t, "status", "-json", group)
	if err != nil {
		t.Fatalf("status over SCRAM from the environment: %v\n%s", err, errOut)
	}
	var st status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status -json: %v\n%s", err, out)
	}
	if st.Group != group || len(st.Members) != 1 {
		t.Errorf("status: group %q with %d members, want %q with the worker", st.Group, len(st.Members), group)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// dlq list over mTLS, flags only (they win over the environment).
	out, errOut, err = cli(t, "dlq", "list", "-json", "-brokers", s.MTLSAddr, "-sasl-mechanism", "", "-sasl-user", "",
		"-tls-ca", s.CAFile, "-tls-cert", s.CertFile, "-tls-key", s.KeyFile, dlqTopic)
	if err != nil {
		t.Fatalf("dlq list over mTLS: %v\n%s", err, errOut)
	}
	if !strings.Contains(out, jobID) {
		t.Errorf("dlq list does not show job %s:\n%s", jobID, out)
	}

	// dlq replay and reset, as the CLI's user from the environment.
	// replay: Read and Write (its replay markers) on the DLQ topic, Read
	// on its progress group, Write on the source topic (granted above).
	// reset: Read on the group and on its topics.
	replayGroup := dlq.ReplayGroupPrefix + dlqTopic
	s.Allow(t, ops, kafkatest.ACL{Resource: "topic", Name: dlqTopic, Op: "Read"},
		kafkatest.ACL{Resource: "topic", Name: dlqTopic, Op: "Write"},
		kafkatest.ACL{Resource: "group", Name: replayGroup, Op: "Read"})
	out, errOut, err = cli(t, "dlq", "replay", "-rate", "0", dlqTopic)
	if err != nil {
		t.Fatalf("dlq replay over SCRAM: %v\n%s", err, errOut)
	}
	if again := s.Consume(t, topic, 2); string(again[1].Value) != `"poison"` {
		t.Errorf("replayed %q, want the parked job", again[1].Value)
	}
	s.Allow(t, ops, kafkatest.ACL{Resource: "group", Name: group, Op: "Read"},
		kafkatest.ACL{Resource: "topic", Name: topic, Op: "Read"})
	out, errOut, err = cli(t, "reset", group, "-to", "latest", "-yes")
	if err != nil {
		t.Fatalf("reset over SCRAM: %v\n%s\n%s", err, out, errOut)
	}
	out, errOut, err = cli(t, "status", "-json", group)
	if err != nil {
		t.Fatalf("status after reset: %v\n%s", err, errOut)
	}
	st = status{}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status -json: %v\n%s", err, out)
	}
	if !eq(st.TotalLag, 0) {
		t.Errorf("after reset -to latest, lag %s, want 0 (the replayed job skipped)", optInt(st.TotalLag))
	}

	// topics create: Create on the new topic, Describe on it to wait
	// for it in the metadata.
	newTopic := kafkatest.Name(t, "t")
	s.Allow(t, ops, kafkatest.ACL{Resource: "topic", Name: newTopic, Op: "Create"},
		kafkatest.ACL{Resource: "topic", Name: newTopic, Op: "Describe"})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = s.Admin().DeleteTopics(ctx, newTopic)
	})
	out, errOut, err = cli(t, "topics", "create", "-partitions", "1", newTopic)
	if err != nil {
		t.Fatalf("topics create over SCRAM: %v\n%s\n%s", err, out, errOut)
	}
	// Without Describe it is created, and the command says at once why
	// it cannot see it.
	hidden := kafkatest.Name(t, "t")
	s.Allow(t, ops, kafkatest.ACL{Resource: "topic", Name: hidden, Op: "Create"})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = s.Admin().DeleteTopics(ctx, hidden)
	})
	began := time.Now()
	_, _, err = cli(t, "topics", "create", "-partitions", "1", hidden)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("lacks Describe on topic %q", hidden)) || time.Since(began) > 10*time.Second {
		t.Errorf("topics create without Describe: %v after %v, want an error naming Describe at once", err, time.Since(began))
	}

	// A command without its ACL says so.
	_, _, err = cli(t, "status", kafkatest.Name(t, "g"))
	if err == nil || !strings.Contains(err.Error(), "GROUP_AUTHORIZATION_FAILED") ||
		!strings.Contains(err.Error(), "the principal lacks an ACL the command needs; docs/security.md") {
		t.Errorf("status of a group the user may not describe: %v", err)
	}

	// A wrong password: a clear error, without the password.
	const wrong = "wrong-password-7c1e"
	t.Setenv(saslPasswordEnv, wrong)
	_, errOut, err = cli(t, "status", group)
	if err == nil {
		t.Fatal("status with a wrong password succeeded")
	}
	for _, want := range []string{"SASL_AUTHENTICATION_FAILED", "check the user name, the password and the mechanism"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error()+errOut, wrong) || strings.Contains(err.Error()+errOut, s.OpsPassword) {
		t.Errorf("a password shows in the CLI's output: %v\n%s", err, errOut)
	}
}

// TestClusterFlagsErrors: bad TLS and SASL settings are refused before
// any connection, each error naming the flag or variable to fix.
func TestClusterFlagsErrors(t *testing.T) {
	t.Setenv(saslPasswordEnv, "")
	t.Setenv(saslPasswordFile, "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-tls-cert", "c.pem"}, "-tls-cert and -tls-key go together"},
		{[]string{"-tls-ca", "/nonexistent/ca.pem"}, "-tls-ca: open /nonexistent/ca.pem"},
		{[]string{"-sasl-mechanism", "SCRAM-SHA-512"}, "-sasl-mechanism needs -sasl-user"},
		{[]string{"-sasl-user", "u"}, "SASL needs a password: set $SHAREQ_SASL_PASSWORD"},
		{[]string{"-sasl-user", "u", "-sasl-mechanism", "GSSAPI"}, "SASL needs a password"},
	} {
		_, _, err := cli(t, append(append([]string{"status", "-brokers", "127.0.0.1:1"}, tc.args...), "g")...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("status %v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
	t.Setenv(saslPasswordEnv, "pw")
	_, _, err := cli(t, "status", "-brokers", "127.0.0.1:1", "-sasl-user", "u", "-sasl-mechanism", "GSSAPI", "g")
	if err == nil || !strings.Contains(err.Error(), `-sasl-mechanism "GSSAPI": want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512`) {
		t.Errorf("an unknown mechanism: %v", err)
	}
	_, _, err = cli(t, "status", "-brokers", "127.0.0.1:1", "-sasl-user", "u", "g")
	if err == nil || !strings.Contains(err.Error(), "-sasl-user needs -sasl-mechanism") {
		t.Errorf("a user without a mechanism: %v", err)
	}
}

// TestSecureRelayCommand runs shareq relay over SCRAM-SHA-512 on TLS
// (flags for TLS, environment for SASL) as a user with Write on the job
// topic only, its Postgres over whatever SHAREQ_TEST_DATABASE_URL says
// (TLS in scripts/test.sh's secure step).
func TestSecureRelayCommand(t *testing.T) {
	s := kafkatest.Secure(t)
	pool, schema := pgtest.NewPool(t, 4)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	topic := s.Topic(t, 1)
	s.Allow(t, s.OpsPrincipal(), kafkatest.ACL{Resource: "topic", Name: topic, Op: "Write"})
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		_, err := pgoutbox.EnqueueTx(t.Context(), tx, topic, "relayed", enqueue.ID("job-relayed"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	dbURL := pgtest.SchemaURL(t, schema)

	t.Setenv(saslMechanismEnv, "SCRAM-SHA-512")
	t.Setenv(saslUserEnv, s.OpsUser)
	t.Setenv(saslPasswordEnv, s.OpsPassword)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut logbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"relay", "-database", dbURL, "-brokers", s.SASLAddr, "-tls-ca", s.CAFile}, &out, &errOut)
	}()
	got := s.Consume(t, topic, 1)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("relay: %v (%s)", err, errOut.String())
	}
	if enqueue.RecordID(got[0]) != "job-relayed" {
		t.Errorf("relayed job %q, want job-relayed", enqueue.RecordID(got[0]))
	}
	if strings.Contains(out.String()+errOut.String(), s.OpsPassword) {
		t.Error("the relay's output shows the password")
	}
}
