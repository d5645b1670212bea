package console

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
)

// timeLayout is how the filter's time fields are written: the format of
// an HTML datetime-local input, read as UTC.
const timeLayout = "2006-01-02T15:04"

// filterForm is the DLQ page's filter as the form and the query string
// carry it. ID is a job ID, or a source record's topic/partition/offset
// (dlq.Filter.JobID).
type filterForm struct {
	Reason, Source, From, To, Text, ID string
}

func readFilterForm(v url.Values) filterForm {
	return filterForm{
		Reason: strings.TrimSpace(v.Get("reason")), Source: strings.TrimSpace(v.Get("source")),
		From: strings.TrimSpace(v.Get("from")), To: strings.TrimSpace(v.Get("to")), Text: v.Get("q"),
		ID: strings.TrimSpace(v.Get("id")),
	}
}

// filter returns the dlq.Filter the form describes.
func (f filterForm) filter() (dlq.Filter, error) {
	out := dlq.Filter{Reason: f.Reason, SourceTopic: f.Source, Text: f.Text, JobID: f.ID}
	for _, t := range []struct {
		s    string
		into *time.Time
		name string
	}{{f.From, &out.ParkedFrom, "from"}, {f.To, &out.ParkedTo, "to"}} {
		if t.s == "" {
			continue
		}
		v, err := time.Parse(timeLayout, t.s)
		if err != nil {
			if v, err = time.Parse(time.RFC3339, t.s); err != nil {
				return out, fmt.Errorf("parked %s %q: want a time such as 2026-05-01T12:00 (UTC)", t.name, t.s)
			}
		}
		*t.into = v.UTC()
	}
	return out, nil
}

// query returns the form as a query string ("" when empty).
func (f filterForm) query() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"reason": f.Reason, "source": f.Source, "from": f.From, "to": f.To, "q": f.Text, "id": f.ID} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

func (f filterForm) Empty() bool { return f == filterForm{} }

// cursor is where a DLQ page starts, per partition: the offset the page
// reads back from (exclusive). A partition missing starts at its end.
type cursor map[int32]int64

func parseCursor(s string) (cursor, error) {
	c := cursor{}
	if s == "" {
		return c, nil
	}
	for _, part := range strings.Split(s, ",") {
		p, o, ok := strings.Cut(part, ":")
		pn, perr := strconv.ParseInt(p, 10, 32)
		on, oerr := strconv.ParseInt(o, 10, 64)
		if !ok || perr != nil || oerr != nil || pn < 0 || on < 0 {
			return nil, fmt.Errorf("page %q: want partition:offset,...", s)
		}
		c[int32(pn)] = on
	}
	return c, nil
}

func (c cursor) String() string {
	ps := make([]int32, 0, len(c))
	for p := range c {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%d:%d", p, c[p])
	}
	return strings.Join(parts, ",")
}

// pageResult is one page of a DLQ topic, newest first.
type pageResult struct {
	Jobs []dlq.Parked
	// Next is the cursor of the next (older) page; More reports whether
	// there is one.
	Next cursor
	More bool
	// Scanned is the offsets read looking for the page's jobs, per
	// partition, and Capped whether a partition's scan stopped at the
	// scan limit before it filled the page.
	Scanned int64
	Capped  bool
	// Reads is the windows the page read (dlq.Backward.Reads).
	Reads int
}

// readPage reads one page of topic, newest first: n jobs passing f from
// below cur in each partition (dlq.ListBackward, which stops at
// scanLimit offsets a partition), merged by parked time; a page never
// reads a partition from its start unless it is that deep.
func readPage(ctx context.Context, cl *kgo.Client, topic string, f dlq.Filter, cur cursor, n, scanLimit int) (pageResult, error) {
	var res pageResult
	bs, err := dlq.ListBackward(ctx, cl, topic, f, cur, n, scanLimit)
	if err != nil {
		return res, err
	}
	parts := map[int32]*dlq.Backward{}
	for i := range bs {
		b := &bs[i]
		parts[b.Partition] = b
		res.Scanned += b.Scanned()
		res.Reads += b.Reads
		res.Capped = res.Capped || b.Capped
	}
	// Merge the partitions newest first, taking from each a prefix of
	// its jobs (in offset order, newest first), so that its cursor can
	// stop at the last one taken whatever the parked times say.
	at := func(j *dlq.Parked) time.Time {
		if !j.ParkedAt.IsZero() {
			return j.ParkedAt
		}
		return j.Timestamp
	}
	ps := slices.Sorted(maps.Keys(parts))
	taken := map[int32]int{}
	for len(res.Jobs) < n {
		best := int32(-1)
		for _, p := range ps {
			k := taken[p]
			if k == len(parts[p].Jobs) {
				continue
			}
			if best < 0 || at(&parts[p].Jobs[k]).After(at(&parts[best].Jobs[taken[best]])) {
				best = p
			}
		}
		if best < 0 {
			break
		}
		res.Jobs = append(res.Jobs, parts[best].Jobs[taken[best]])
		taken[best]++
	}
	res.Next = cursor{}
	for p, pt := range parts {
		next := pt.From
		if k := taken[p]; k < len(pt.Jobs) {
			next = pt.End
			if k > 0 {
				next = pt.Jobs[k-1].Offset
			}
		}
		res.Next[p] = next
		if next > pt.Start {
			res.More = true
		}
	}
	return res, nil
}

type dlqPage struct {
	Topic     string
	Filter    filterForm
	NewestURL string // the first page with the filter
	Page      pageResult
	NextURL   string
	First     bool
	Now       string
}

func (s *server) dlqList(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	topic := r.PathValue("topic")
	q := r.URL.Query()
	ff := readFilterForm(q)
	f, err := ff.filter()
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	cur, err := parseCursor(q.Get("before"))
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	cl, err := s.newClient()
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	defer cl.Close()
	res, err := readPage(ctx, cl, topic, f, cur, s.cfg.pageSize, s.cfg.scan)
	if errors.Is(err, dlq.ErrNoTopic) {
		err = &notFound{err.Error()}
	}
	if errors.Is(err, dlq.ErrNotDLQ) {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	if err != nil {
		s.fail(w, r, statusOf(err), err)
		return
	}
	p := dlqPage{Topic: topic, Filter: ff, Page: res, First: len(cur) == 0}
	p.NewestURL = s.cfg.prefix + "/dlq/" + url.PathEscape(topic)
	if q := ff.query().Encode(); q != "" {
		p.NewestURL += "?" + q
	}
	if res.More {
		nq := ff.query()
		nq.Set("before", res.Next.String())
		p.NextURL = s.cfg.prefix + "/dlq/" + url.PathEscape(topic) + "?" + nq.Encode()
	}
	s.render(w, r, http.StatusOK, "dlq", "DLQ "+topic, "topics", p)
}

// jobPage is one parked job.
type jobPage struct {
	Job     *dlq.Parked
	Payload payloadView
	Key     payloadView
	Headers []headerView
}

type headerView struct {
	Key   string
	Value payloadView
}

func (s *server) job(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	topic := r.PathValue("topic")
	partition, perr := strconv.ParseInt(r.PathValue("partition"), 10, 32)
	offset, oerr := strconv.ParseInt(r.PathValue("offset"), 10, 64)
	if perr != nil || oerr != nil || partition < 0 || offset < 0 {
		s.fail(w, r, http.StatusBadRequest, errors.New("want /dlq/TOPIC/PARTITION/OFFSET"))
		return
	}
	cl, err := s.newClient()
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	defer cl.Close()
	p, err := dlq.Get(ctx, cl, topic, int32(partition), offset)
	switch {
	case errors.Is(err, dlq.ErrMarker):
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("%w: it records a replay of an earlier record of partition %d", err, partition))
		return
	case errors.Is(err, dlq.ErrNoTopic), errors.Is(err, dlq.ErrNoRecord):
		s.fail(w, r, http.StatusNotFound, err)
		return
	case errors.Is(err, dlq.ErrMalformed):
		p.Err = err
	case err != nil:
		s.fail(w, r, statusOf(err), err)
		return
	}
	jp := jobPage{Job: &p, Payload: renderPayload(p.Value, s.cfg.payload), Key: renderPayload(p.Key, 1024)}
	if p.ValueOmitted {
		jp.Payload = payloadView{Omitted: true, Size: p.ValueSize}
	} else {
		jp.Payload.Size = p.ValueSize
	}
	for _, h := range p.Headers {
		jp.Headers = append(jp.Headers, headerView{h.Key, renderPayload(h.Value, 1024)})
	}
	s.render(w, r, http.StatusOK, "job", "Job "+p.Location(), "topics", jp)
}
