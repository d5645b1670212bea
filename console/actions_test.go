package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/console"
	"github.com/shareq/shareq/handler"
)

// jobIDs returns the job IDs of the records in topic at or after offset
// from, reading until it has n (and failing t if they do not come).
func (b *bundle) jobIDs(t *testing.T, topic string, from int64, n int) []string {
	t.Helper()
	cl := b.c.Client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(from)}}))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ids []string
	for len(ids) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s: %v", len(ids), n, topic, ids)
		}
		fs.EachRecord(func(r *kgo.Record) {
			id := ""
			for _, h := range r.Headers {
				if h.Key == handler.JobIDHeader {
					id = string(h.Value)
				}
			}
			ids = append(ids, id)
		})
	}
	return ids
}

// endOffset returns the end offset of partition 0 of topic.
func (b *bundle) endOffset(t *testing.T, topic string) int64 {
	t.Helper()
	ends, err := b.c.Admin().ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := ends.Lookup(topic, 0)
	return o.Offset
}

func TestReplayAction(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Actions(), console.ReplayRate(0))
	b.park(t, 0, 4) // job-0, job-2 permanent; job-1, job-3 decode
	end := b.endOffset(t, b.topic)

	// Every job matching the filter.
	dlqPage := "/dlq/" + b.dlq
	code, body := b.post(t, dlqPage+"?reason=decode", dlqPage+"/replay", url.Values{"mode": {"filter"}, "reason": {"decode"}})
	if code != http.StatusOK {
		t.Fatalf("replay: %d\n%s", code, body)
	}
	mustContain(t, "replay page", body, "job-1", "job-3", "<strong>2 replayed</strong>", "shareq-dlq-replay."+b.dlq+".")
	mustNotContain(t, "replay page", body, "job-0", "job-2")
	got := b.jobIDs(t, b.topic, end, 2)
	if strings.Join(got, ",") != "job-1,job-3" {
		t.Errorf("replayed to %s: %v, want job-1 and job-3", b.topic, got)
	}

	// The list shows which were replayed.
	_, body = b.get(t, dlqPage+"?reason=decode")
	if strings.Count(body, `class="replayed"`) != 2 {
		t.Errorf("dlq page after replay: want 2 jobs shown replayed\n%s", body)
	}
	// The same replay again replays nothing: each job at most once.
	_, body = b.post(t, dlqPage, dlqPage+"/replay", url.Values{"mode": {"filter"}, "reason": {"decode"}})
	mustContain(t, "second replay", body, "<strong>0 replayed</strong>")
	// A selection that includes a replayed job passes it over.
	_, body = b.post(t, dlqPage, dlqPage+"/replay", url.Values{"mode": {"jobs"}, "job": {"0:1", "0:2"}})
	mustContain(t, "selection", body, "<strong>1 replayed</strong> of 2 selected", "1 passed over: replayed before", "job-2")
	mustNotContain(t, "selection", body, "job-1 ")
	// Forced, it is replayed again.
	_, body = b.post(t, dlqPage, dlqPage+"/replay", url.Values{"mode": {"jobs"}, "job": {"0:1"}, "force": {"1"}})
	mustContain(t, "forced", body, "<strong>1 replayed</strong> of 1 selected", "job-1")
	got = b.jobIDs(t, b.topic, end, 4)
	if strings.Join(got, ",") != "job-1,job-3,job-2,job-1" {
		t.Errorf("records in %s: %v, want job-1, job-3, job-2 then job-1 forced", b.topic, got)
	}
	_, body = b.get(t, dlqPage+"/0/1")
	mustContain(t, "job page after a forced replay", body, "marker at offset")
	if strings.Count(body, "marker at offset") != 2 {
		t.Errorf("job-1: want 2 replays listed\n%s", body)
	}

	// Bad forms.
	for _, form := range []url.Values{{"mode": {"jobs"}}, {"mode": {"jobs"}, "job": {"x"}}, {"mode": {"all"}}, {"mode": {"filter"}, "from": {"soon"}}} {
		if code, body := b.post(t, dlqPage, dlqPage+"/replay", form); code != http.StatusBadRequest {
			t.Errorf("replay %v: %d\n%s", form, code, body)
		}
	}
}

func TestEnqueueAction(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Actions())
	code, body := b.get(t, "/enqueue?topic="+b.topic)
	if code != http.StatusOK {
		t.Fatalf("enqueue form: %d", code)
	}
	mustContain(t, "enqueue form", body, `value="`+b.topic+`"`)
	code, body = b.post(t, "/enqueue", "/enqueue", url.Values{"topic": {b.topic}, "key": {"k1"}, "id": {"console-job-1"}, "payload": {`{"url":"<b>x</b>"}`}})
	if code != http.StatusOK {
		t.Fatalf("enqueue: %d\n%s", code, body)
	}
	mustContain(t, "enqueued", body, "Enqueued job <code class=\"id\">console-job-1</code>")
	if got := b.jobIDs(t, b.topic, 0, 1); got[0] != "console-job-1" {
		t.Errorf("enqueued %v", got)
	}
	code, body = b.post(t, "/enqueue", "/enqueue", url.Values{"topic": {b.topic}, "payload": {"{not json"}})
	if code != http.StatusBadRequest || !strings.Contains(body, "not valid JSON") {
		t.Errorf("bad payload: %d\n%s", code, body)
	}
}

func TestResetAction(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Actions())
	b.joinGroup(t) // one record, accepted: start offset 1
	b.c.Produce(t, &kgo.Record{Topic: b.topic, Value: []byte("2")}, &kgo.Record{Topic: b.topic, Value: []byte("3")})
	path := "/groups/" + b.group + "/reset"
	code, body := b.get(t, path+"?to=latest")
	if code != http.StatusOK {
		t.Fatalf("reset plan: %d\n%s", code, body)
	}
	mustContain(t, "reset plan", body, `name="confirm"`, "<td class=\"num\">3</td>")
	// Not confirmed.
	code, body = b.post(t, path+"?to=latest", path, url.Values{"to": {"latest"}})
	if code != http.StatusBadRequest || !strings.Contains(body, "not confirmed") {
		t.Errorf("unconfirmed reset: %d\n%s", code, body)
	}
	code, body = b.post(t, path+"?to=latest", path, url.Values{"to": {"latest"}, "confirm": {b.group}})
	if code != http.StatusOK {
		t.Fatalf("reset: %d\n%s", code, body)
	}
	mustContain(t, "reset", body, `id="reset-done"`)
	var lag int64 = -1
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		d, err := b.c.Admin().DescribeShareGroupOffsets(context.Background(), b.group)
		if err != nil {
			t.Fatal(err)
		}
		d[b.group].Offsets.Each(func(o kadm.ShareOffset) {
			if o.Topic == b.topic && o.Partition == 0 && o.StartOffset == 3 {
				lag = o.Lag
			}
		})
		if lag >= 0 {
			break
		}
	}
	if lag != 0 {
		t.Errorf("after a reset to latest: start offset not 3 with lag 0 (lag %d)", lag)
	}
	// A group with a member is refused.
	sc := b.c.ShareConsumer(t, b.group, []string{b.topic})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	sc.PollFetches(ctx)
	cancel()
	code, body = b.post(t, "/enqueue", path, url.Values{"to": {"earliest"}, "confirm": {b.group}})
	if code != http.StatusConflict || !strings.Contains(body, "stop its workers first") {
		t.Errorf("reset of a group with a member: %d\n%s", code, body)
	}
}
