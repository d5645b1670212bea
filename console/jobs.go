package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/shareq/shareq/console/jobinfo"
	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/joblog/pgjoblog"
)

// jobIDMax caps the length of a job ID the search takes.
const jobIDMax = 512

// source is one store the job page reads, and what became of reading it.
type source struct {
	Name  string
	State string // "read", "partial" (DLQ topics only read in part), "not configured" or "failed"
	Note  string // why not configured, or the error
}

// timelinePage is the page of one job's whole life.
type timelinePage struct {
	ID      string
	Found   bool
	Events  []eventView
	Sources []source
	// NotSearched says, for each DLQ topic the search stopped short in,
	// which of its records it read (jobinfo.Search.NotSearched), with a
	// link to the topic's DLQ page filtered by the ID, which pages on.
	NotSearched []notSearched
	Job         jobinfo.Job
	// Group and Topic make the claim key (idempotency.Key) when both
	// are known; ClaimNote says why the claim was not read otherwise.
	Group, Topic string
	ClaimNote    string
	DBOK         bool
}

// jobSearch is the target of the layout's search box: it sends the
// browser to the job's page.
func (s *server) jobSearch(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimSpace(r.URL.Query().Get("q"))
	if id == "" || len(id) > jobIDMax {
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("give a job ID (its shareq-job-id, or TOPIC/PARTITION/OFFSET of its record), at most %d bytes", jobIDMax))
		return
	}
	http.Redirect(w, r, s.cfg.prefix+"/jobs/"+url.PathEscape(id), http.StatusSeeOther)
}

// jobTimeline serves /jobs/{id}: what the outbox, the relay's produced
// jobs, the claims, the job log and the DLQ topics know of job id, as
// one timeline. A source the console was not given is named, not
// skipped; a source that fails is named with its error.
func (s *server) jobTimeline(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id == "" || len(id) > jobIDMax {
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("want /jobs/ID with an ID of 1 to %d bytes", jobIDMax))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	p := timelinePage{ID: id, Group: strings.TrimSpace(r.URL.Query().Get("group"))}
	parked, dlqSrc, notSearched := s.findParked(ctx, id)
	p.NotSearched = notSearched
	p.readDB(ctx, s.cfg.outbox, parked)
	p.Sources = append(p.Sources, dlqSrc)
	p.Found = p.Job.Found() || len(parked) > 0
	for _, e := range jobinfo.Timeline(&p.Job, parked, s.now()) {
		p.Events = append(p.Events, viewEvent(e, s.cfg.prefix))
	}
	status, title := http.StatusOK, "Job "+id
	if !p.Found {
		status, title = http.StatusNotFound, "Job "+id+": not found anywhere"
	}
	s.render(w, r, status, "jobtimeline", title, "", p)
}

// findParked searches the cluster's DLQ topics for job id, newest first,
// at most s.cfg.scan records of each (ScanLimit). A topic it stopped
// short in makes the source "partial", and is named in the page's
// NotSearched.
func (s *server) findParked(ctx context.Context, id string) ([]dlq.Parked, source, []notSearched) {
	src := source{Name: "DLQ topics", State: "read"}
	cl, err := s.newClient()
	if err != nil {
		return nil, source{Name: src.Name, State: "failed", Note: err.Error()}, nil
	}
	defer cl.Close()
	parked, searched, err := jobinfo.FindParkedAll(ctx, cl, id, s.cfg.scan)
	if err != nil {
		return parked, source{Name: src.Name, State: "failed", Note: err.Error()}, nil
	}
	if len(searched) == 0 {
		return nil, source{Name: src.Name, State: "not configured", Note: "the cluster has no DLQ topic (named *" + dlq.TopicSuffix + " or dlq.*)"}, nil
	}
	src.Note = strings.Join(jobinfo.Names(searched), ", ")
	var short []notSearched
	for i := range searched {
		if n := searched[i].NotSearched(); n != "" {
			link := s.cfg.prefix + "/dlq/" + url.PathEscape(searched[i].Topic) + "?" + url.Values{"id": {id}}.Encode()
			short = append(short, notSearched{Text: n, Link: link})
		}
	}
	if len(short) > 0 {
		src.State = "partial"
	}
	return parked, src, short
}

// notSearched is a DLQ topic the job page searched in part.
type notSearched struct{ Text, Link string }

// readDB reads what Postgres holds of the job, with its claim when the
// claim key is known: idempotency.Key(group, topic, ID), the key of
// idempotency.Middleware with its defaults, as "shareq jobs show -group
// -topic" makes it. The group comes from the page's ?group= or from a
// DLQ record of the job; the topic from its outbox row, its runs or a DLQ
// record.
func (p *timelinePage) readDB(ctx context.Context, db OutboxDB, parked []dlq.Parked) {
	const name = "Postgres: outbox, produced jobs, claims"
	if db == nil {
		const why = "the console was started without a database (console.Outbox, shareq console -database)"
		p.Sources = append(p.Sources, source{Name: name, State: "not configured", Note: why}, source{Name: jobLogSource, State: "not configured", Note: why})
		p.ClaimNote = "not read: no database"
		return
	}
	for i := range parked {
		if p.Group == "" {
			p.Group = parked[i].Group
		}
		if p.Topic == "" {
			p.Topic = parked[i].SourceTopic
		}
	}
	job, err := jobinfo.Find(ctx, db, p.ID, "")
	if err != nil {
		p.Sources = append(p.Sources, source{Name: name, State: "failed", Note: err.Error()})
		return
	}
	p.DBOK = true
	if len(job.Outbox) > 0 {
		p.Topic = job.Outbox[0].Topic
	} else if len(job.Runs) > 0 {
		p.Topic = job.Runs[0].Topic
	}
	switch {
	case p.Topic == "":
		p.ClaimNote = "not read: the job's topic is not known (no outbox row, run or DLQ record)"
	case p.Group == "":
		p.ClaimNote = "not read: the share group that runs the job is not known; give it below"
	default:
		if job.Claim, err = jobinfo.ReadClaim(ctx, db, idempotency.Key(p.Group, p.Topic, p.ID)); err != nil {
			p.Sources = append(p.Sources, source{Name: name, State: "failed", Note: err.Error()})
			return
		}
	}
	p.Job = job
	p.Sources = append(p.Sources, source{Name: name, State: "read"})
	if !job.JobLog {
		p.Sources = append(p.Sources, source{Name: jobLogSource, State: "not configured",
			Note: "no job log in this database (migration 0008), or the database given to console.Outbox is no pool"})
	} else {
		p.Sources = append(p.Sources, source{Name: jobLogSource, State: "read"})
	}
}

// jobLogSource names the job log among the job page's sources.
const jobLogSource = "Job log (joblog/pgjoblog)"

// eventView is an event of the timeline as the page shows it.
type eventView struct {
	At      time.Time
	Kind    string
	Future  bool
	Title   string
	Facts   []fact
	Link    string // the DLQ record's page
	Error   string
	Result  string
	Outcome string // a run's outcome, for its style
}

type fact struct{ Name, Value string }

// viewEvent says what e is, in the page's words.
func viewEvent(e jobinfo.Event, base string) eventView {
	v := eventView{At: e.At, Kind: string(e.Kind), Future: e.Future}
	add := func(name, value string) {
		if value != "" {
			v.Facts = append(v.Facts, fact{name, value})
		}
	}
	switch {
	case e.Kind == jobinfo.EventEnqueued && e.Row == nil:
		v.Title = "Enqueued for " + e.Parked.SourceTopic
		add("when", "its record's timestamp, read from its DLQ record")
	case e.Kind == jobinfo.EventEnqueued:
		v.Title = "Enqueued in the outbox for " + e.Row.Topic
		add("row", strconv.FormatInt(e.Row.ID, 10))
		if e.Row.UniqueKey != nil {
			add("unique key", *e.Row.UniqueKey)
		}
		if e.Row.Attempts > 0 {
			add("failed produces", strconv.Itoa(e.Row.Attempts))
		}
		if e.Row.LastError != nil {
			v.Error = *e.Row.LastError
		}
	case e.Kind == jobinfo.EventDue:
		v.Title = "Due: a relay produces it"
		if e.Future {
			v.Title = "Due (to come): a relay produces it then"
		}
	case e.Kind == jobinfo.EventProduced:
		v.Title = "Produced to Kafka by a relay"
	case e.Kind == jobinfo.EventCancelled:
		v.Title = "Cancelled: its claim is marked cancelled, a worker accepts it without running it"
	case e.Kind == jobinfo.EventClaimed:
		v.Title = "A run committed its idempotency claim"
	case e.Kind == jobinfo.EventRun:
		viewRun(&v, e.Run, add)
	case e.Kind == jobinfo.EventParked:
		p := e.Parked
		v.Title = "Parked in " + p.Topic
		v.Link = base + "/dlq/" + url.PathEscape(p.Topic) + "/" + strconv.Itoa(int(p.Partition)) + "/" + strconv.FormatInt(p.Offset, 10)
		add("reason", p.Reason)
		add("record", fmt.Sprintf("%s/%d/%d", p.Topic, p.Partition, p.Offset))
		if p.DeliveryCount > 0 {
			add("delivery", strconv.Itoa(int(p.DeliveryCount)))
		}
		add("group", p.Group)
		add("worker host", p.WorkerHost)
		v.Error = p.Error
	case e.Kind == jobinfo.EventReplayed:
		v.Title = fmt.Sprintf("Replayed to %s/%d/%d", e.Replay.Topic, e.Replay.Partition, e.Replay.Offset)
		add("from", fmt.Sprintf("%s/%d/%d", e.Parked.Topic, e.Parked.Partition, e.Parked.Offset))
	}
	return v
}

// viewRun sets v to the view of run r of the job log, its facts through
// add.
func viewRun(v *eventView, r *pgjoblog.Run, add func(name, value string)) {
	v.Title = fmt.Sprintf("Run, delivery %d: %s", r.DeliveryCount, r.Outcome)
	v.Outcome = r.Outcome
	add("ack", r.Ack)
	add("duration", r.Duration.Round(time.Millisecond).String())
	add("worker", r.Worker)
	add("record", fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset))
	add("ended", fmtTime(r.Ended))
	if r.Progress != nil {
		add("last progress", strings.TrimSpace(fmt.Sprintf("%d%% %s", r.Progress.Percent, r.Progress.Message)))
	}
	add("trace ID", r.TraceID)
	v.Error = r.Error
	if r.Result != nil {
		v.Result = string(r.Result)
	}
}
