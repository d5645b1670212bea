package console_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/kafkatest"
)

// A group whose member joined but never fetched has no start offsets: its
// pages show the lag as unknown, never 0, and what the logs hold (issue 29
// item 4).
func TestGroupNotStarted(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	b := &bundle{c: c, cl: c.Client(t), topic: c.Topic(t, 6), group: c.Group(t)}
	b.serve(t)
	producer := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for p := range 6 {
		for i := range 50 {
			recs = append(recs, &kgo.Record{Topic: b.topic, Partition: int32(p), Value: fmt.Appendf(nil, `{"n":%d}`, i)})
		}
	}
	if err := producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	c.JoinWithoutFetching(t, b.group, 6, b.topic)

	code, body := b.get(t, "/groups/"+b.group)
	if code != http.StatusOK {
		t.Fatalf("group: %d\n%s", code, body)
	}
	mustContain(t, "group page", body,
		`<dd id="total-lag">≥ 300</dd>`,
		`<p class="warn" id="not-started">Not started: 6 of 6 partitions have no start offset yet`,
		"300 records in their logs, all waiting for the group (share.auto.offset.reset=earliest).</p>",
		`<th class="num" title="for a partition without a start offset: its records from the log start to the end offset">In log</th>`,
		`<td class="num">50</td><td class="num"><span title="unknown: no start offset yet">-</span></td><td class="num">50</td>`)
	mustNotContain(t, "group page", body, `<dd id="total-lag">0</dd>`)

	code, body = b.get(t, "/")
	if code != http.StatusOK {
		t.Fatalf("overview: %d\n%s", code, body)
	}
	cell := regexp.MustCompile(`data-group="` + regexp.QuoteMeta(b.group) + `"[^>]*>([^<]*)<small>([^<]*)</small>`).FindStringSubmatch(body)
	if cell == nil || cell[1] != "≥ 300 " || cell[2] != "(6 not started)" {
		t.Errorf("overview lag cell of %s: %q, want ≥ 300 (6 not started)\n%s", b.group, cell, body)
	}
}
