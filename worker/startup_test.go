package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// A broker that stops answering during the start-up checks, after the
// first (it was SIGKILLed while a worker restarted, as in the soak, where
// a supervisor that retries on ErrBrokersUnreachable then saw an unknown
// error and gave up): Check fails with ErrBrokersUnreachable, not with
// the bare transport error of the step it was at. kfake only: it can
// drop the connection of one kind of request.
func TestBrokersLostDuringChecksAreUnreachable(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	fake := b.c.Fake()
	if fake == nil {
		t.Skip("needs kfake to drop the topics' Metadata requests")
	}
	fake.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		for _, rt := range req.(*kmsg.MetadataRequest).Topics {
			if rt.Topic != nil && *rt.Topic == b.topic {
				return nil, errors.New("broker gone"), true // closes the connection
			}
		}
		return nil, nil, false
	})
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	w, err := worker.New(worker.Brokers(b.c.Seeds...), worker.Group(b.group), worker.Handle(b.topic, nop), worker.StartTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	err = w.Check(context.Background())
	if !errors.Is(err, worker.ErrBrokersUnreachable) {
		t.Fatalf("Check with the broker gone after ApiVersions: %v, want ErrBrokersUnreachable", err)
	}
}
