package shareqotel

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kerr"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// The attributes of the messaging conventions, current and v1.24, and
// shareq's own.
const (
	attrSystem      = attribute.Key("messaging.system")
	attrDestination = attribute.Key("messaging.destination.name")
	attrMessageID   = attribute.Key("messaging.message.id")
	attrKey         = attribute.Key("messaging.kafka.message.key")
	attrErrorType   = attribute.Key("error.type")

	// current
	attrOperationName = attribute.Key("messaging.operation.name")
	attrOperationType = attribute.Key("messaging.operation.type")
	attrGroup         = attribute.Key("messaging.consumer.group.name")
	attrPartitionID   = attribute.Key("messaging.destination.partition.id")
	attrOffset        = attribute.Key("messaging.kafka.offset")

	// v1.24
	attrOldOperation = attribute.Key("messaging.operation")
	attrOldGroup     = attribute.Key("messaging.kafka.consumer.group")
	attrOldPartition = attribute.Key("messaging.kafka.destination.partition")
	attrOldOffset    = attribute.Key("messaging.kafka.message.offset")

	// shareq's: a share group's deliveries, acknowledgements and outcomes,
	// which no messaging convention covers yet.
	attrDeliveryCount = attribute.Key("shareq.delivery.count")
	attrDeliveryLimit = attribute.Key("shareq.delivery.limit")
	attrOutcome       = attribute.Key("shareq.job.outcome")
	attrRan           = attribute.Key("shareq.job.ran")
	attrTimedOut      = attribute.Key("shareq.job.timed_out")
	attrFinal         = attribute.Key("shareq.job.final")
	attrInterrupted   = attribute.Key("shareq.job.interrupted_by")
	attrParkedTopic   = attribute.Key("shareq.job.parked.topic")
	attrParkedReason  = attribute.Key("shareq.job.parked.reason")
	attrAck           = attribute.Key("shareq.ack")
	attrLockLeft      = attribute.Key("shareq.lock.left_ms")
	linkKind          = attribute.Key("shareq.link")

	attrExceptionStack = attribute.Key("exception.stacktrace")
)

var systemKafka = attrSystem.String("kafka")

func (t *Telemetry) old() bool { return t.semconv == SemconvOld || t.semconv == SemconvDup }
func (t *Telemetry) cur() bool { return t.semconv == SemconvNew || t.semconv == SemconvDup }

// spanName is "<op> <topic>" in the current conventions, "<topic> <op>"
// in v1.24 (where send was publish).
func (t *Telemetry) spanName(op, topic string) string {
	if t.semconv == SemconvOld {
		if op == "send" {
			op = "publish"
		}
		return topic + " " + op
	}
	return op + " " + topic
}

func (t *Telemetry) producerAttrs(topic, op string) []attribute.KeyValue {
	as := make([]attribute.KeyValue, 0, 5)
	as = append(as, systemKafka, attrDestination.String(topic))
	if t.cur() {
		as = append(as, attrOperationName.String(op), attrOperationType.String(op))
	}
	if t.old() {
		if op == "send" {
			op = "publish"
		}
		as = append(as, attrOldOperation.String(op))
	}
	return as
}

func (t *Telemetry) partitionAttrs(partition int32, offset int64) []attribute.KeyValue {
	as := make([]attribute.KeyValue, 0, 4)
	if t.cur() {
		as = append(as, attrPartitionID.String(strconv.FormatInt(int64(partition), 10)), attrOffset.Int64(offset))
	}
	if t.old() {
		as = append(as, attrOldPartition.Int64(int64(partition)), attrOldOffset.Int64(offset))
	}
	return as
}

// runBase is what the runs of one topic in one group share: the span's
// name, and the attributes a sampler may look at, made once.
type runBase struct {
	name string
	// opts are the span's start options, but for a timestamp. newRoot
	// adds trace.WithNewRoot, for a run that must not be the child of
	// the span its context holds (the worker's): only then, as the SDK's
	// WithNewRoot puts an empty span context in the context (two
	// allocations per span) to say so.
	opts, newRoot []trace.SpanStartOption
	// ok is the duration's series without an error.type; outcomes the
	// consumed count's, by worker.Outcome.
	ok       *series
	outcomes [8]*series
}

func (t *Telemetry) baseOf(topic, group string) *runBase {
	k := [2]string{topic, group}
	if b := (*t.base.Load())[k]; b != nil {
		return b
	}
	as := []attribute.KeyValue{systemKafka, attrDestination.String(topic)}
	if t.cur() {
		as = append(as, attrOperationName.String("process"), attrOperationType.String("process"), attrGroup.String(group))
	}
	if t.old() {
		as = append(as, attrOldOperation.String("process"), attrOldGroup.String(group))
	}
	b := &runBase{name: t.spanName("process", topic), ok: t.inst.series(seriesKey{topic: topic, group: group})}
	b.opts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(as...)}
	b.newRoot = append(slices.Clip(b.opts), trace.WithNewRoot())
	for _, o := range worker.Outcomes() {
		b.outcomes[o] = t.inst.series(seriesKey{topic: topic, group: group, outcome: o.String()})
	}
	t.baseMu.Lock()
	defer t.baseMu.Unlock()
	old := *t.base.Load()
	if had := old[k]; had != nil {
		return had
	}
	m := make(map[[2]string]*runBase, len(old)+1)
	maps.Copy(m, old)
	m[k] = b
	t.base.Store(&m)
	return b
}

// consumerAttrs are the attributes of one run of job, beyond baseAttrs.
func (t *Telemetry) consumerAttrs(job *handler.Job) []attribute.KeyValue {
	as := make([]attribute.KeyValue, 0, 8)
	as = append(as, attrMessageID.String(job.ID()), attrDeliveryCount.Int64(int64(job.DeliveryCount)))
	if job.DeliveryLimit > 0 {
		as = append(as, attrDeliveryLimit.Int64(int64(job.DeliveryLimit)))
	}
	if t.keys && len(job.Key) > 0 && utf8.Valid(job.Key) {
		as = append(as, attrKey.String(string(job.Key)))
	}
	return append(as, t.partitionAttrs(job.Partition, job.Offset)...)
}

// errorType is the low-cardinality class of err for error.type: the
// reason shareq's outcome errors carry (timeout, panic, decode, ...), a
// Kafka error code's name, or "_OTHER".
func errorType(err error) string {
	if r := handler.ReasonOf(err); r != "" {
		return r
	}
	var pe *handler.PanicError
	if errors.As(err, &pe) {
		return handler.ReasonPanic
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	return "_OTHER"
}
