package enqueue

import (
	"errors"
	"math/rand/v2"
	"reflect"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrStickyPartitioner is matched (errors.Is) by the error of [New] (and
// of enqueue/pgoutbox's NewRelay) given a *kgo.Client whose partitioner
// is one of franz-go's sticky ones: its default (UniformBytesPartitioner),
// StickyPartitioner or StickyKeyPartitioner. They put every keyless record
// of a burst on one partition, and a partition has one share-group member
// while the group has no more members than partitions: one worker would
// run the whole burst while the others idle. Create the client with
// [ProducerOpts] (or kgo.RecordPartitioner([Partitioner]())).
var ErrStickyPartitioner = errors.New("enqueue: the client's partitioner puts a burst of keyless jobs on one partition " +
	"(franz-go's default is sticky), so one worker would run it all; " +
	"create the *kgo.Client with the option kgo.RecordPartitioner(enqueue.Partitioner()), or append enqueue.ProducerOpts() to its options")

// Partitioner returns the partitioner shareq's producers use: a record
// with a key goes to the partition franz-go's default partitioner (and
// Kafka's Java client) would choose, murmur2 of the key modulo the
// partition count, so jobs of one key stay on one partition in enqueue
// order; a record without a key goes to the next writable partition of
// its topic, round-robin, starting at a random one. A burst of keyless
// jobs is thus spread evenly over the topic's partitions, and so over the
// workers of its share group. Records for one partition still share a
// batch, and one produce request per broker carries them all.
func Partitioner() kgo.Partitioner { return partitioner{} }

// ProducerOpts returns the options a *kgo.Client needs to produce shareq
// jobs: today only kgo.RecordPartitioner([Partitioner]()). Append them to
// the client's other options:
//
//	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, enqueue.ProducerOpts()...)...)
func ProducerOpts() []kgo.Opt {
	return []kgo.Opt{kgo.RecordPartitioner(Partitioner())}
}

type partitioner struct{}

func (partitioner) ForTopic(string) kgo.TopicPartitioner {
	return &topicPartitioner{
		hash: kgo.StickyKeyPartitioner(nil).ForTopic(""),
		next: rand.Uint32(),
	}
}

// topicPartitioner partitions the records of one topic. The client calls
// it under its own per-topic lock, so next needs none.
type topicPartitioner struct {
	hash kgo.TopicPartitioner // franz-go's default for keyed records
	next uint32               // round-robin position of keyless records
}

func (*topicPartitioner) RequiresConsistency(r *kgo.Record) bool { return r.Key != nil }

func (p *topicPartitioner) Partition(r *kgo.Record, n int) int {
	if r.Key != nil {
		return p.hash.Partition(r, n)
	}
	i := int(p.next % uint32(n))
	p.next++
	return i
}

// stickyPartitioners are the types of franz-go's partitioners that keep
// keyless records on one partition until a batch fills.
var stickyPartitioners = []reflect.Type{
	reflect.TypeOf(kgo.StickyPartitioner()),
	reflect.TypeOf(kgo.StickyKeyPartitioner(nil)),
	reflect.TypeOf(kgo.UniformBytesPartitioner(1, false, false, nil)),
}

// CheckProducer returns an error matching [ErrStickyPartitioner] when p
// reports (as a *kgo.Client does, through OptValue) a partitioner that
// puts a burst of keyless records on one partition. A Producer that does
// not report its options (shareqtest.Recorder, a wrapper) passes, as does
// any partitioner other than franz-go's sticky ones: RoundRobinPartitioner
// and LeastBackupPartitioner spread keyless jobs (the first also moves
// keyed ones off their hash), a ManualPartitioner or your own partitioner
// is your choice. [New] and enqueue/pgoutbox's NewRelay call it.
func CheckProducer(p Producer) error {
	o, ok := p.(interface{ OptValue(any) any })
	if !ok {
		return nil
	}
	part := o.OptValue(kgo.RecordPartitioner)
	if part == nil {
		return nil
	}
	t := reflect.TypeOf(part)
	for _, s := range stickyPartitioners {
		if t == s {
			return ErrStickyPartitioner
		}
	}
	return nil
}
