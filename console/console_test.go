package console_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/console"
	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
)

var quiet = slog.New(slog.DiscardHandler)

// Payload and error text made of HTML and script: every page must show
// them escaped.
const (
	evilPayload = `{"name":"<script>alert('payload')</script>"}`
	evilError   = `bad input: <img src=x onerror="alert('error')"> and </pre><script>alert(1)</script>`
)

// bundle is what a console test works with.
type bundle struct {
	c     *kafkatest.Cluster
	cl    *kgo.Client
	topic string // a job topic, 1 partition
	dlq   string // its DLQ topic, 1 partition
	group string // a share group that fetched from topic
	srv   *httptest.Server
	http  *http.Client
}

// setup starts a cluster with topic and its DLQ topic, makes a share
// group fetch from topic, parks jobs (see park) and serves a console made
// with opts (Client and Logger added).
func setup(t *testing.T, opts ...console.Option) *bundle {
	t.Helper()
	return setupDLQ(t, 1, opts...)
}

// setupDLQ is setup with a DLQ topic of partitions partitions.
func setupDLQ(t *testing.T, partitions int32, opts ...console.Option) *bundle {
	t.Helper()
	c := kafkatest.New(t)
	b := &bundle{c: c, cl: c.Client(t), topic: c.Topic(t, 1)}
	b.dlq = b.topic + dlq.TopicSuffix
	c.CreateTopic(t, b.dlq, partitions)
	b.group = c.Group(t)
	b.serve(t, opts...)
	return b
}

func (b *bundle) serve(t *testing.T, opts ...console.Option) {
	t.Helper()
	h, err := console.New(append([]console.Option{console.Client(b.cl), console.Logger(quiet)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	b.srv = httptest.NewServer(h)
	t.Cleanup(b.srv.Close)
	jar, _ := cookiejar.New(nil)
	b.http = &http.Client{Jar: jar, Timeout: 60 * time.Second}
}

// joinGroup makes b.group a share group with state: a member fetches
// the records of b.topic (produced first if there are none), accepts
// them and leaves.
func (b *bundle) joinGroup(t *testing.T) {
	t.Helper()
	b.c.Produce(t, &kgo.Record{Topic: b.topic, Value: []byte(`{"n":1}`)})
	sc := b.c.ShareConsumer(t, b.group, []string{b.topic})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		fs := sc.PollFetches(ctx)
		recs := fs.Records()
		for _, r := range recs {
			r.Ack(kgo.AckAccept)
		}
		if len(recs) > 0 {
			if err := sc.FlushAcks(ctx); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	sc.Close()
}

// park parks n jobs of b.topic in b.dlq through the dlq middleware, with
// reasons permanent (even i) and decode (odd i); job 0 has the evil
// payload and error, the others payload {"n":i} and error "failure i".
func (b *bundle) park(t *testing.T, from, n int) {
	t.Helper()
	mw, err := dlq.Middleware(b.cl, dlq.Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	for i := from; i < from+n; i++ {
		reason := handler.ReasonPermanent
		if i%2 == 1 {
			reason = handler.ReasonDecode
		}
		value, msg := fmt.Appendf(nil, `{"n":%d}`, i), fmt.Sprintf("failure %d\nat line two", i)
		if i == 0 {
			value, msg = []byte(evilPayload), evilError
		}
		job := &handler.Job{Topic: b.topic, Partition: 0, Offset: int64(1000 + i), Key: fmt.Appendf(nil, "user-%d", i), Value: value, Timestamp: time.Now(),
			DeliveryCount: 1, DeliveryLimit: 5, Headers: []handler.Header{{Key: handler.JobIDHeader, Value: fmt.Appendf(nil, "job-%d", i)}}}
		fail := handler.Func(func(context.Context, *handler.Job) error {
			return &handler.PermanentError{Reason: reason, Err: errors.New(msg)}
		})
		if _, parked := handler.ParkedOf(handler.Chain(fail, mw).Handle(context.Background(), job)); !parked {
			t.Fatalf("job %d not parked", i)
		}
	}
}

// get fetches path and returns the status and body.
func (b *bundle) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := b.http.Get(b.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
	}
	return resp.StatusCode, string(body)
}

// post submits form to path with the CSRF token of the page at from.
func (b *bundle) post(t *testing.T, from, path string, form url.Values) (int, string) {
	t.Helper()
	if from != "" {
		_, page := b.get(t, from)
		form.Set("csrf", csrfOf(t, page))
	}
	resp, err := b.http.PostForm(b.srv.URL+path, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", page)
	}
	return m[1]
}

// mustContain fails t unless body holds every one of want.
func mustContain(t *testing.T, what, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("%s: %q missing from\n%s", what, w, body)
		}
	}
}

func mustNotContain(t *testing.T, what, body string, bad ...string) {
	t.Helper()
	for _, w := range bad {
		if strings.Contains(body, w) {
			t.Errorf("%s: %q should not be in\n%s", what, w, body)
		}
	}
}

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, tc := range []struct {
		name string
		opts []console.Option
		want string
	}{
		{"no kafka", nil, "no Kafka"},
		{"both", []console.Option{console.Client(cl), console.ClientOpts(kgo.SeedBrokers("x:1"))}, "not both"},
		{"nil client", []console.Option{console.Client(nil)}, "Client(nil)"},
		{"empty client opts", []console.Option{console.ClientOpts()}, "without options"},
		{"bad prefix", []console.Option{console.Client(cl), console.Prefix("console")}, "Prefix"},
		{"bad rate", []console.Option{console.Client(cl), console.ReplayRate(-1)}, "ReplayRate"},
		{"bad page", []console.Option{console.Client(cl), console.PageSize(0)}, "PageSize"},
		{"bad payload", []console.Option{console.Client(cl), console.PayloadLimit(0)}, "PayloadLimit"},
		{"bad scan", []console.Option{console.Client(cl), console.ScanLimit(0)}, "ScanLimit"},
		{"nil outbox", []console.Option{console.Client(cl), console.Outbox(nil)}, "Outbox(nil)"},
		{"nil logger", []console.Option{console.Client(cl), console.Logger(nil)}, "Logger(nil)"},
		{"nil option", []console.Option{console.Client(cl), nil}, "nil Option"},
		{"empty prefix", []console.Option{console.Client(cl), console.Prefix("")}, `Prefix(""): want a path starting with /`},
	} {
		if _, err := console.New(tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	// New reports every wrong option at once, not only the first.
	_, err = console.New(console.Client(cl), console.PageSize(0), console.ScanLimit(-1), console.Logger(nil))
	for _, want := range []string{"console: PageSize(0): want 1 to 1000", "console: ScanLimit(-1)", "console: Logger(nil)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New with three wrong options = %v, want an error saying %q", err, want)
		}
	}
	if _, err := console.New(console.Client(cl), console.Prefix("/console/"), console.Actions()); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

func TestPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.joinGroup(t)
	b.park(t, 0, 3)

	code, body := b.get(t, "/")
	if code != http.StatusOK {
		t.Fatalf("overview: %d\n%s", code, body)
	}
	mustContain(t, "overview", body, b.group, "read-only")

	code, body = b.get(t, "/groups/"+b.group)
	if code != http.StatusOK {
		t.Fatalf("group: %d\n%s", code, body)
	}
	mustContain(t, "group page", body, b.topic, "share.auto.offset.reset", "earliest", "Total lag", `href="/dlq/`+b.dlq+`"`)
	mustNotContain(t, "read-only group page", body, "Reset start offsets")

	if code, body = b.get(t, "/groups/no-such-group"); code != http.StatusNotFound {
		t.Errorf("missing group: %d\n%s", code, body)
	}

	code, body = b.get(t, "/topics")
	if code != http.StatusOK {
		t.Fatalf("topics: %d\n%s", code, body)
	}
	mustContain(t, "topics", body, b.topic, `href="/dlq/`+b.dlq+`"`)

	code, body = b.get(t, "/dlq/"+b.dlq)
	if code != http.StatusOK {
		t.Fatalf("dlq: %d\n%s", code, body)
	}
	mustContain(t, "dlq page", body, "job-0", "job-1", "job-2", "permanent", "decode", "failure 2 …", b.topic+"/0/1002")
	mustNotContain(t, "read-only dlq page", body, "replay-matching", "replay-selected", `name="job"`, `method="post"`)
	// Newest first.
	if i2, i0 := strings.Index(body, "job-2"), strings.Index(body, "job-0"); i2 > i0 {
		t.Errorf("dlq page: job-2 (newest) after job-0")
	}
	// Escaped, in the list's first line of the error.
	mustNotContain(t, "dlq page", body, "<img", "<script>")
	mustContain(t, "dlq page", body, "&lt;img src=x onerror=&#34;alert(&#39;error&#39;)&#34;&gt;")

	code, body = b.get(t, "/dlq/"+b.dlq+"?reason=decode")
	if code != http.StatusOK {
		t.Fatalf("dlq filtered: %d\n%s", code, body)
	}
	mustContain(t, "reason filter", body, "job-1")
	mustNotContain(t, "reason filter", body, "job-0", "job-2")

	_, body = b.get(t, "/dlq/"+b.dlq+"?q=ALERT")
	mustContain(t, "text filter", body, "job-0")
	mustNotContain(t, "text filter", body, "job-1", "job-2")
	_, body = b.get(t, "/dlq/"+b.dlq+`?q={"n":2}`)
	mustContain(t, "payload filter", body, "job-2")
	mustNotContain(t, "payload filter", body, "job-0", "job-1")

	future := time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04")
	_, body = b.get(t, "/dlq/"+b.dlq+"?from="+future)
	mustContain(t, "time filter", body, "No parked jobs match the filter")
	_, body = b.get(t, "/dlq/"+b.dlq+"?to="+future+"&source="+b.topic)
	mustContain(t, "time and source filter", body, "job-0", "job-1", "job-2")
	if code, _ = b.get(t, "/dlq/"+b.dlq+"?from=yesterday"); code != http.StatusBadRequest {
		t.Errorf("bad time: %d", code)
	}

	code, body = b.get(t, "/dlq/"+b.dlq+"/0/0")
	if code != http.StatusOK {
		t.Fatalf("job: %d\n%s", code, body)
	}
	mustContain(t, "job page", body, "job-0", "at line two"[:0], "&lt;script&gt;alert(&#39;payload&#39;)&lt;/script&gt;", "json", "Never replayed", handler.JobIDHeader)
	mustNotContain(t, "job page", body, "<script>", "<img")
	// Pretty-printed JSON.
	mustContain(t, "job page", body, "{\n  &#34;name&#34;")

	if code, _ = b.get(t, "/dlq/"+b.dlq+"/0/99"); code != http.StatusNotFound {
		t.Errorf("job past the end: %d", code)
	}
	if code, _ = b.get(t, "/dlq/"+b.topic); code != http.StatusBadRequest {
		t.Errorf("dlq page of a job topic: %d, want 400 (not a DLQ topic)", code)
	}
	if code, _ = b.get(t, "/dlq/no-such-topic.dlq"); code != http.StatusNotFound {
		t.Errorf("dlq page of a missing topic: %d, want 404", code)
	}
	if code, _ = b.get(t, "/outbox"); code != http.StatusNotFound {
		t.Errorf("outbox without a database: %d, want 404", code)
	}
	code, body = b.get(t, "/static/style.css")
	if code != http.StatusOK || !strings.Contains(body, "--accent") {
		t.Errorf("stylesheet: %d", code)
	}
}

func TestPagingNewestFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, console.PageSize(2))
	b.park(t, 1, 5) // job-1 … job-5
	_, body := b.get(t, "/dlq/"+b.dlq)
	mustContain(t, "page 1", body, "job-5", "job-4", `rel="next"`)
	mustNotContain(t, "page 1", body, "job-3", "job-1")
	next := regexp.MustCompile(`href="([^"]+)" rel="next"`).FindStringSubmatch(body)
	_, body = b.get(t, strings.ReplaceAll(next[1], "&amp;", "&"))
	mustContain(t, "page 2", body, "job-3", "job-2", `rel="next"`, "Newest")
	mustNotContain(t, "page 2", body, "job-5", "job-1")
	next = regexp.MustCompile(`href="([^"]+)" rel="next"`).FindStringSubmatch(body)
	_, body = b.get(t, strings.ReplaceAll(next[1], "&amp;", "&"))
	mustContain(t, "page 3", body, "job-1")
	mustNotContain(t, "page 3", body, "job-2", `rel="next"`)

	// A filtered page pages over the matches only.
	_, body = b.get(t, "/dlq/"+b.dlq+"?reason=decode")
	mustContain(t, "decode page 1", body, "job-5", "job-3", `rel="next"`)
	next = regexp.MustCompile(`href="([^"]+)" rel="next"`).FindStringSubmatch(body)
	_, body = b.get(t, strings.ReplaceAll(next[1], "&amp;", "&"))
	mustContain(t, "decode page 2", body, "job-1", "reason=decode")
	mustNotContain(t, "decode page 2", body, "job-5", "job-4", "job-2")

	if code, _ := b.get(t, "/dlq/"+b.dlq+"?before=x"); code != http.StatusBadRequest {
		t.Errorf("bad cursor: %d", code)
	}
}

// A DLQ topic of several partitions pages newest first across them.
func TestPagingAcrossPartitions(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t, 3, console.PageSize(2))
	b.park(t, 1, 6) // job-1 … job-6, spread over the partitions by key
	parts := map[int32]bool{}
	recs := b.c.Consume(t, b.dlq, 6)
	for _, r := range recs {
		parts[r.Partition] = true
	}
	if len(parts) < 2 {
		t.Fatalf("the jobs all went to one partition of %s; the test needs several", b.dlq)
	}
	next := regexp.MustCompile(`href="([^"]+)" rel="next"`)
	path := "/dlq/" + b.dlq
	var order []string
	for range 4 {
		_, body := b.get(t, path)
		for _, id := range regexp.MustCompile(`<code class="id">(job-\d)</code>`).FindAllStringSubmatch(body, -1) {
			order = append(order, id[1])
		}
		m := next.FindStringSubmatch(body)
		if m == nil {
			break
		}
		path = strings.ReplaceAll(m[1], "&amp;", "&")
	}
	if got := strings.Join(order, ","); got != "job-6,job-5,job-4,job-3,job-2,job-1" {
		t.Errorf("pages of a DLQ of 3 partitions: %s, want job-6 to job-1, each once", got)
	}
}

func TestReadOnlyRefusesActions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.park(t, 0, 1)
	for _, path := range []string{"/dlq/" + b.dlq + "/replay", "/enqueue", "/groups/" + b.group + "/reset"} {
		code, body := b.post(t, "", path, url.Values{"mode": {"filter"}, "topic": {b.topic}, "payload": {"{}"}})
		if code != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Errorf("POST %s on a read-only console: %d\n%s", path, code, body)
		}
	}
	if code, _ := b.get(t, "/enqueue"); code != http.StatusForbidden {
		t.Errorf("enqueue form on a read-only console: %d", code)
	}
	if code, _ := b.get(t, "/groups/"+b.group+"/reset"); code != http.StatusForbidden {
		t.Errorf("reset form on a read-only console: %d", code)
	}
	// Nothing was replayed: the job is still unmarked.
	_, body := b.get(t, "/dlq/"+b.dlq+"/0/0")
	mustContain(t, "job after refused replay", body, "Never replayed")
}

func TestActionsNeedCSRFToken(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Actions())
	b.park(t, 0, 1)
	form := url.Values{"mode": {"filter"}}
	// No cookie, no token.
	if code, body := b.post(t, "", "/dlq/"+b.dlq+"/replay", form); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Errorf("replay without a token: %d\n%s", code, body)
	}
	// The cookie (from a page), but a wrong token in the form.
	b.get(t, "/")
	form.Set("csrf", strings.Repeat("A", 43))
	if code, body := b.post(t, "", "/dlq/"+b.dlq+"/replay", form); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Errorf("replay with a wrong token: %d\n%s", code, body)
	}
	// A request from another origin is refused whatever its token.
	_, page := b.get(t, "/dlq/"+b.dlq)
	form.Set("csrf", csrfOf(t, page))
	req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/enqueue", strings.NewReader(url.Values{"csrf": {csrfOf(t, page)}, "topic": {b.topic}, "payload": {"{}"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := b.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site POST: %d", resp.StatusCode)
	}
	_, body := b.get(t, "/dlq/"+b.dlq+"/0/0")
	mustContain(t, "job after refused replays", body, "Never replayed")
}
