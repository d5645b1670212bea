package shareqotel_test

import (
	"context"
	"fmt"
	"log"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/shareq/shareq/enqueue"
	shareqotel "github.com/shareq/shareq/shareqotel"
)

// A job enqueued inside a request's span carries the span's trace
// context in its headers. On a worker, the same Telemetry is the
// outermost middleware and an observer:
//
//	w, err := worker.New(worker.Brokers(seeds...), worker.Group("emails"),
//		worker.Use(tel.Middleware()), worker.Observers(tel),
//		worker.Handle("emails", h))
func Example() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tel, err := shareqotel.New(shareqotel.TracerProvider(tp), shareqotel.Propagator(propagation.TraceContext{}))
	if err != nil {
		log.Fatal(err)
	}

	ctx, request := tp.Tracer("app").Start(context.Background(), "POST /signup")
	// For the outbox: pgoutbox.EnqueueTx(ctx, tx, "emails", v, tel.Inject(ctx, "emails")).
	// For enqueue.Client: enqueue.New(tel.Producer(kgoClient)) does it per record.
	rec, err := enqueue.NewJob("emails", map[string]string{"to": "ada@example.com"}, tel.Inject(ctx, "emails")).Record()
	if err != nil {
		log.Fatal(err)
	}
	request.End()

	for _, h := range rec.Headers[1:] { // after shareq-job-id
		fmt.Println(h.Key, len(h.Value) == 55)
	}
	for _, s := range spans.Ended() {
		fmt.Println(s.Name(), s.SpanKind(), s.Parent().SpanID() == request.SpanContext().SpanID())
	}
	// Output:
	// traceparent true
	// create emails producer true
	// POST /signup internal false
}
