package console_test

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/console"
	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/fleet"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/worker"
)

// startWorker runs a worker of b.group on b.topic publishing its status
// to topic, as the client ID name, with h.
func (b *bundle) startWorker(t *testing.T, topic, name string, h handler.Handler) (stop func() error) {
	t.Helper()
	w, err := worker.New(worker.Brokers(b.c.Seeds...), worker.Group(b.group), worker.Handle(b.topic, h),
		worker.StatusTopic(topic), worker.ClientOpts(kgo.ClientID(name)), worker.Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	return kafkatest.Run(t, w.Run)
}

var workerRowRE = regexp.MustCompile(`<tr data-instance="([0-9a-f]+)"><td class="tp">([^<]*)</td>`)

// The Workers page lists what fleet.Read reads (the list shareq workers
// prints): every worker with its group, topics and dependencies down,
// and not one that stopped.
func TestWorkersPage(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	b := &bundle{c: c, cl: c.Client(t), topic: c.Topic(t, 1), group: c.Group(t)}
	status := kafkatest.Name(t, "workers")
	c.CreateTopicWith(t, status, 1, fleet.TopicConfigs())
	b.serve(t, console.WorkersTopic(status))

	stopA := b.startWorker(t, status, "worker-a", handler.Func(func(context.Context, *handler.Job) error {
		return handler.Unavailable("billing-api", errors.New("billing is down"))
	}))
	// worker-a takes the job and is paused for billing-api; then
	// worker-b joins.
	c.Produce(t, &kgo.Record{Topic: b.topic, Value: []byte("{}")})
	var read []fleet.Status
	deadline := time.Now().Add(30 * time.Second)
	for {
		ws, err := fleet.Read(context.Background(), b.cl, status, time.Now())
		read = fleet.OfGroup(ws, b.group)
		if err == nil && len(read) == 1 && slices.Equal(read[0].DependenciesDown, []string{"billing-api"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s: workers %+v (%v), want worker-a with billing-api down", c.Kind, c.Version, read, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.startWorker(t, status, "worker-b", handler.Func(func(context.Context, *handler.Job) error { return nil }))
	for {
		ws, err := fleet.Read(context.Background(), b.cl, status, time.Now())
		read = fleet.OfGroup(ws, b.group)
		if err == nil && len(read) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s: workers %+v (%v), want worker-a and worker-b", c.Kind, c.Version, read, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	code, body := b.get(t, "/workers?group="+b.group)
	if code != http.StatusOK {
		t.Fatalf("workers page: %d\n%s", code, body)
	}
	var rows [][2]string
	for _, m := range workerRowRE.FindAllStringSubmatch(body, -1) {
		rows = append(rows, [2]string{m[1], m[2]})
	}
	want := [][2]string{{read[0].Instance, read[0].Name}, {read[1].Instance, read[1].Name}}
	if !slices.Equal(rows, want) || read[0].Name != "worker-a" {
		t.Fatalf("workers page rows %v, want %v (fleet.Read's)\n%s", rows, want, body)
	}
	mustContain(t, "workers page", body,
		`<a href="/workers" aria-current="page">Workers</a>`,
		`<a href="/groups/`+b.group+`">`+b.group+`</a></td><td>`+b.topic+`</td>`,
		`<td class="warn">billing-api</td>`)

	// An operator's pause shows with each worker, with why and by whom.
	ctl, err := control.New(b.cl)
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.Pause(context.Background(), control.Pause{Group: b.group, Topic: b.topic, Reason: "ESP migration", By: "ops"}); err != nil {
		t.Fatal(err)
	}
	for {
		ws, err := fleet.Read(context.Background(), b.cl, status, time.Now())
		read = fleet.OfGroup(ws, b.group)
		if err == nil && len(read) == 2 && len(read[0].Paused) == 1 && len(read[1].Paused) == 1 {
			break
		}
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatalf("%s %s: workers %+v (%v), want both with the pause", c.Kind, c.Version, read, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, body = b.get(t, "/workers?group="+b.group)
	if n := strings.Count(body, `<td class="warn" title="`+b.topic+` paused by ops: ESP migration">`+b.topic+`</td>`); n != 2 {
		t.Errorf("workers page shows the pause %d times, want 2 (a row each)\n%s", n, body)
	}

	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	_, body = b.get(t, "/workers?group="+b.group)
	if rows := workerRowRE.FindAllStringSubmatch(body, -1); len(rows) != 1 || rows[0][2] != "worker-b" {
		t.Fatalf("after worker-a stopped: rows %v, want worker-b only\n%s", rows, body)
	}
}

// Without the status topic the Workers page says how to create it.
func TestWorkersPageWithoutTopic(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	b := &bundle{c: c, cl: c.Client(t)}
	missing := kafkatest.Name(t, "none")
	b.serve(t, console.WorkersTopic(missing))
	code, body := b.get(t, "/workers")
	if code != http.StatusOK {
		t.Fatalf("workers page: %d\n%s", code, body)
	}
	mustContain(t, "workers page", body, `id="no-status-topic"`, "<code>shareq topics create -workers -workers-topic "+missing+"</code>")
}
