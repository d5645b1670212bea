package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/kafkatest"
)

// A report that counts lost jobs says where the group still has records:
// the partitions with a lag, their start offset and log end, and names
// Kafka's stalled share partition only where the records from the start
// offset reach the in-flight limit.
func TestWaitingPartitions(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 2), c.Group(t)
	cl := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 3 { // partition 0 only
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// Accept the first record; the other two wait.
	sc := c.ShareConsumer(t, group, []string{topic}, kgo.FetchMaxPartitionBytes(1))
	accepted := false
	for !accepted {
		fs := sc.PollRecords(ctx, 1)
		if ctx.Err() != nil {
			t.Fatal("no record delivered")
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !accepted {
				r.Ack(kgo.AckAccept)
				accepted = true
			} else {
				r.Ack(kgo.AckRelease)
			}
		})
	}
	if err := sc.FlushAcks(ctx); err != nil {
		t.Fatal(err)
	}
	sc.Close()
	p := &phase{adm: kadm.NewClient(c.Client(t)), group: group, topic: topic}
	var got []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got = p.waitingPartitions(ctx); len(got) == 1 && strings.Contains(got[0], "lag 2") {
			break
		}
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "partition 0: ") || !strings.Contains(got[0], "lag 2, log end 3") || strings.Contains(got[0], "stalled") {
		t.Fatalf("waiting partitions %q, want partition 0 with lag 2 and log end 3, not called stalled", got)
	}
}

// Each broker restart is charged the duplicates absorbed from its start
// to the next one's, the last one those to the end.
func TestDupsPerBrokerRestart(t *testing.T) {
	r := &report{dupsAbsorbed: 130, faults: []faultRecord{
		{kind: faultSigkill},
		{kind: faultBrokerRestart, dupsBefore: 10},
		{kind: faultPGRestart},
		{kind: faultPausedBrokerRestart, dupsBefore: 100},
	}}
	if got := r.dupsPerBrokerRestart(); !slices.Equal(got, []string{"90", "30"}) {
		t.Errorf("per broker restart %v, want [90 30]", got)
	}
	if got := (&report{dupsAbsorbed: 5, faults: []faultRecord{{kind: faultSigkill}}}).dupsPerBrokerRestart(); len(got) != 0 {
		t.Errorf("no broker restart: %v", got)
	}
}

// Two private brokers on different port bases keep their data apart: a
// second soak's "up" wiped a running soak's broker when they shared it.
func TestOwnBrokersOnOtherPortsHaveOtherDirs(t *testing.T) {
	a, b := ownBroker("/c", 29092), ownBroker("/c", 34092)
	if a.Dir == b.Dir {
		t.Errorf("both private brokers in %s", a.Dir)
	}
}
