package member

import (
	"math"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// MaxBytesDefault is the default [Config.MaxBytes].
const MaxBytesDefault = 64 << 20

// Fetch sizes: what a ShareFetch asks for at most, whatever the room.
const (
	fetchMaxBytes     = 50 << 20 // the request's MaxBytes
	fetchPartMaxBytes = 10 << 20 // each partition's PartitionMaxBytes (sent by version 0 only)
	// recordBytesGuess is the size a record is taken to have until the
	// member has seen some: Kafka's largest by default (message.max.bytes
	// is 1 MiB), so a first fetch stays within the room on a broker that
	// sizes share fetches by count only (kfake).
	recordBytesGuess = 1 << 20
)

// The bytes in hand (Config.MaxBytes) are the key, value and headers of
// every record delivered whose job has not ended: sent on Events or about
// to be, and in the executor (queued, running, or held for a retry). A
// record's bytes are freed when its terminal ack is queued, and the
// member then lets go of the record itself, so the memory is the
// executor's and the member's together.
//
// A fetch is sent only while there is room (MaxBytes less the bytes in
// hand and those fetches in flight reserved), and it asks for no more
// than its share of the room: MaxRecords at most the room ÷ the records'
// mean size so far (1 MiB, Kafka's largest record by default, before the
// first), and at least 1, so a record larger than the whole bound still
// comes, alone, when nothing else is in hand. The count is what bounds
// it: kfake and Kafka 4.4.0 acquire MaxRecords whatever the request's
// MaxBytes (TestShareFetchAcquiresByCountNotBytes in internal/kafkatest),
// which the member still sets to the room (PartitionMaxBytes too, for a
// broker that honours them). So one fetch brings at most its share of
// the room plus one record while records are of one size; the bytes in
// hand stay within MaxBytes plus one record per broker fetched from at
// once. Where sizes vary, a fetch may bring up to room ÷ mean size
// records of any size: the mean follows the latest fetches (a weight of
// a quarter each). A batch_optimized fetch (acquire.go) may bring the
// rest of a producer batch past its MaxRecords, per partition fetched;
// the member asks for one only when the fetch's share, which the room
// bounds, covers the batches of every partition it fetches.

// recordBytes is what r counts against Config.MaxBytes.
func recordBytes(r *kgo.Record) int64 {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

// byteShare is the bytes the next fetch of one session may bring: its
// share of the room (split evenly between the sessions that fetch),
// within what no fetch in flight reserved; 0: no room.
func (m *Member) byteShare() int64 {
	left := m.cfg.MaxBytes - m.bytes
	free := left - m.reservedBytes
	if free <= 0 {
		return 0
	}
	f := int64(max(1, m.fetchers))
	return min(free, (left+f-1)/f)
}

// recordsRoom is how many records fit in the next fetch's share of the
// room at the records' mean size so far: 0 with no room, at least 1 with
// some (a record larger than the room comes alone).
func (m *Member) recordsRoom() int {
	room := m.byteShare()
	if room <= 0 {
		return 0
	}
	est := m.recordSize
	if est <= 0 {
		est = recordBytesGuess
	}
	return int(max(1, min(room/est, math.MaxInt32)))
}

// sizeFetch bounds a fetch's bytes by its share of the room and reserves
// them until it is answered.
func (m *Member) sizeFetch(rq *request, req *kmsg.ShareFetchRequest) {
	room := m.byteShare()
	rq.reservedBytes = room
	m.reservedBytes += room
	req.MaxBytes = int32(max(1, min(room, fetchMaxBytes)))
	for i := range req.Topics {
		for j := range req.Topics[i].Partitions {
			req.Topics[i].Partitions[j].PartitionMaxBytes = int32(max(1, min(room, fetchPartMaxBytes)))
		}
	}
}

// sized takes the bytes of the records one fetch delivered into the mean
// record size.
func (m *Member) sized(records int, bytes int64) {
	if records == 0 {
		return
	}
	mean := max(1, bytes/int64(records))
	if m.recordSize == 0 {
		m.recordSize = mean
		return
	}
	m.recordSize = (3*m.recordSize + mean) / 4
}
