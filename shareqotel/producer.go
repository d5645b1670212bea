package shareqotel

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/handler"
)

// ParkedRunPrefix starts the names of the headers that carry the trace
// context of the job run that parked a job (the context's own header
// names after it: shareq-otel-parked-traceparent). [Telemetry.Producer]
// writes them on the dead-letter record when the dlq middleware parks a
// job; a replay keeps them (they are the job's headers, not the
// envelope's), and the replayed job's span links to that run.
const ParkedRunPrefix = "shareq-otel-parked-"

// recordHeaders adapts a record's headers to a
// propagation.TextMapCarrier: Set replaces a header of the same name, so
// a context written again does not pile up. With a prefix, it reads and
// writes the headers named prefix+key.
type recordHeaders struct {
	r      *kgo.Record
	prefix string
}

func (c recordHeaders) Get(key string) string {
	for i := len(c.r.Headers) - 1; i >= 0; i-- {
		if h := c.r.Headers[i]; strings.HasPrefix(h.Key, c.prefix) && h.Key[len(c.prefix):] == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c recordHeaders) Set(key, value string) {
	name := c.prefix + key
	for i := range c.r.Headers {
		if c.r.Headers[i].Key == name {
			c.r.Headers[i].Value = []byte(value)
			return
		}
	}
	c.r.Headers = append(c.r.Headers, kgo.RecordHeader{Key: name, Value: []byte(value)})
}

func (c recordHeaders) Keys() []string {
	var ks []string
	for _, h := range c.r.Headers {
		if strings.HasPrefix(h.Key, c.prefix) {
			ks = append(ks, h.Key[len(c.prefix):])
		}
	}
	return ks
}

// headerList collects what a propagator writes, for [Telemetry.Inject].
type headerList []handler.Header

func (c *headerList) Get(string) string { return "" }
func (c *headerList) Set(key, value string) {
	*c = append(*c, handler.Header{Key: key, Value: []byte(value)})
}
func (c *headerList) Keys() []string { return nil }

var (
	_ propagation.TextMapCarrier = recordHeaders{}
	_ propagation.TextMapCarrier = jobHeaders{}
	_ propagation.TextMapCarrier = (*headerList)(nil)
)

// Inject starts and ends a PRODUCER span "create <topic>" (operation
// create), a child of ctx's span, and returns the option that writes its
// trace context into the job's headers through the propagator. Use it
// where the job is written somewhere other than Kafka first, the outbox:
//
//	id, err := pgoutbox.EnqueueTx(ctx, tx, "emails", v, tel.Inject(ctx, "emails"))
//
// The row keeps the headers, the relay produces them (wrap its producer
// with [Telemetry.Producer] for a "send" span per produce, linked to this
// one), and the job's runs are children of this span (see [LinkToJob]).
// The span ends at once: it
// marks when and from where the job was created, not how long the
// transaction took (a rolled-back transaction leaves it with no job).
func (t *Telemetry) Inject(ctx context.Context, topic string) enqueue.Option {
	ctx, span := t.tracer.Start(ctx, t.spanName("create", topic), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(t.producerAttrs(topic, "create")...))
	span.End()
	var hs headerList
	t.prop.Inject(ctx, &hs)
	return enqueue.Headers(hs...)
}

// Producer wraps p, the producer of an enqueue.Client, an outbox relay
// (pgoutbox.NewRelay) or the dlq middleware, with a PRODUCER span "send
// <topic>" per record, a child of the caller's context, ended when the
// broker acknowledged the record (with its partition and offset) or
// refused it (error status).
//
// A record that carries no trace context yet (a job of enqueue.Client)
// gets the send span's, through the propagator: the job's runs are its
// children (see [LinkToJob]). A record that carries one keeps it (the job was created earlier, by
// [Telemetry.Inject] at EnqueueTx, or it is a job re-produced), and the
// send span links to it. When the dlq middleware parks a job inside a run
// traced by [Telemetry.Middleware], the dead-letter record also gets the
// run's context under [ParkedRunPrefix], so that a replay links to it.
//
// The wrapper passes the partitioner check of enqueue.New and
// pgoutbox.NewRelay through to p.
func (t *Telemetry) Producer(p enqueue.Producer) enqueue.Producer {
	return &producer{t: t, p: p}
}

type producer struct {
	t *Telemetry
	p enqueue.Producer
}

// OptValue passes enqueue.CheckProducer's question to the wrapped
// producer when it can answer it (a *kgo.Client can).
func (p *producer) OptValue(opt any) any {
	if o, ok := p.p.(interface{ OptValue(any) any }); ok {
		return o.OptValue(opt)
	}
	return nil
}

func (p *producer) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	t := p.t
	spans := make(map[*kgo.Record]trace.Span, len(rs))
	run := runFrom(ctx)
	for _, r := range rs {
		if r == nil {
			continue
		}
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(t.producerAttrs(r.Topic, "send")...)}
		created := trace.SpanContextFromContext(t.prop.Extract(context.Background(), recordHeaders{r: r}))
		if created.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: created, Attributes: []attribute.KeyValue{linkKind.String("created")}}))
		}
		if id := enqueue.RecordID(r); id != "" {
			opts = append(opts, trace.WithAttributes(attrMessageID.String(id)))
		}
		sctx, span := t.tracer.Start(ctx, t.spanName("send", r.Topic), opts...)
		spans[r] = span
		switch {
		case !created.IsValid():
			t.prop.Inject(sctx, recordHeaders{r: r})
		case run != nil && run.isJob(enqueue.RecordID(r)):
			// The job's own record again, produced while the job runs:
			// the dlq middleware parking it. Its trace context stays the
			// creation's; the run's goes beside it.
			t.prop.Inject(trace.ContextWithSpan(context.Background(), run.current()), recordHeaders{r: r, prefix: ParkedRunPrefix})
		}
	}
	res := p.p.ProduceSync(ctx, rs...)
	for _, pr := range res {
		span, ok := spans[pr.Record]
		if !ok {
			continue
		}
		delete(spans, pr.Record)
		if pr.Err != nil {
			span.RecordError(pr.Err)
			span.SetStatus(codes.Error, pr.Err.Error())
			span.SetAttributes(attrErrorType.String(errorType(pr.Err)))
		} else if span.IsRecording() {
			span.SetAttributes(t.partitionAttrs(pr.Record.Partition, pr.Record.Offset)...)
		}
		span.End()
	}
	for _, span := range spans { // a record the producer did not answer for
		span.SetStatus(codes.Error, "no produce result")
		span.End()
	}
	return res
}
