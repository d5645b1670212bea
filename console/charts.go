package console

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/shareq/shareq/joblog/pgjoblog"
)

// Charts gives the console the sampler whose samples the group pages
// chart (lag and oldest waiting job, the last hour and day); run it
// beside the console ([Sampler.Run]). Without it the group charts say
// there are no samples; the topic charts read the job log, from the
// console's database ([Outbox]), and need no sampler.
func Charts(s *Sampler) Option {
	return optionFunc(func(c *config) { c.sampler, c.samplerSet = s, true })
}

// validateCharts returns what is wrong with the Charts option.
func (c *config) validateCharts() []error {
	if c.samplerSet && c.sampler == nil {
		return []error{errors.New("Charts(nil): give the *Sampler from NewSampler, or leave Charts out")}
	}
	return nil
}

// chartRange is the span a chart page shows: the last hour or day.
type chartRange struct {
	Name  string        // "1h" or "24h", the range parameter
	Label string        // for the title
	span  time.Duration // how far back
	step  time.Duration // the step of the job counts (a bar)
}

var chartRanges = []chartRange{
	{Name: "1h", Label: "last hour", span: time.Hour, step: time.Minute},
	{Name: "24h", Label: "last day", span: 24 * time.Hour, step: 10 * time.Minute},
}

// parseRange reads the range parameter: 1h (the default) or 24h.
func parseRange(r *http.Request) (chartRange, error) {
	v := r.URL.Query().Get("range")
	if v == "" {
		return chartRanges[0], nil
	}
	for _, cr := range chartRanges {
		if cr.Name == v {
			return cr, nil
		}
	}
	return chartRange{}, fmt.Errorf("range %q: give 1h or 24h", v)
}

// chartsPage is a page of charts: a group's or a topic's.
type chartsPage struct {
	Ranges  []rangeLink
	Refresh string // how often the page reloads, "10s"
	Back    string // the page of the group or topic
	BackTo  string
	Charts  []template.HTML
}

type rangeLink struct {
	Label   string
	URL     string
	Current bool
}

// refreshEvery is how often a chart page reloads: the sampler's step,
// or 10 s without one.
func (s *server) refreshEvery() time.Duration {
	if s.cfg.sampler != nil {
		return s.cfg.sampler.every
	}
	return SampleEveryDefault
}

// chartPage renders a chart page, which reloads itself (the Refresh
// header: the console runs no script) every refreshEvery.
func (s *server) chartPage(w http.ResponseWriter, r *http.Request, title, nav, path, back, backTo string, cr chartRange, charts []template.HTML) {
	p := chartsPage{Refresh: s.refreshEvery().String(), Back: back, BackTo: backTo, Charts: charts}
	for _, o := range chartRanges {
		p.Ranges = append(p.Ranges, rangeLink{Label: o.Name, URL: s.cfg.prefix + path + "?range=" + o.Name, Current: o.Name == cr.Name})
	}
	w.Header().Set("Refresh", strconv.Itoa(int(s.refreshEvery()/time.Second)))
	s.render(w, r, http.StatusOK, "charts", title, nav, p)
}

// groupCharts serves a group's charts page.
func (s *server) groupCharts(w http.ResponseWriter, r *http.Request) {
	cr, err := parseRange(r)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	name := r.PathValue("group")
	path := "/groups/" + url.PathEscape(name)
	s.chartPage(w, r, "Share group "+name+" over the "+cr.Label, "groups", path+"/charts", s.cfg.prefix+path, "the group's page", cr, s.groupChartsHTML(name, cr))
}

// groupChartsHTML draws the group's lag and oldest waiting job from the
// sampler.
func (s *server) groupChartsHTML(group string, cr chartRange) []template.HTML {
	lag := chart{ID: "chart-lag", Title: "Lag (jobs not done) of " + group + ", " + cr.Label, Integer: true}
	oldest := chart{ID: "chart-oldest", Title: "Oldest job not done of " + group + ", " + cr.Label, Format: fmtAge}
	lag.Series = []series{{Name: "lag", Color: colorBlue}}
	oldest.Series = []series{{Name: "oldest waiting", Color: colorAmber}}
	if s.cfg.sampler == nil {
		lag.To = s.now()
		lag.From = lag.To.Add(-cr.span)
		lag.Empty = "No samples: the console runs without a sampler (console.Charts; shareq console samples)."
		oldest.From, oldest.To, oldest.Empty = lag.From, lag.To, lag.Empty
		return []template.HTML{lag.html(), oldest.html()}
	}
	h := s.cfg.sampler.history(group, cr.span > fineSpan)
	if h.since {
		what := "since " + fmtClock(h.from) + " UTC (the sampler's start)"
		lag.Title = "Lag (jobs not done) of " + group + ", " + what
		oldest.Title = "Oldest job not done of " + group + ", " + what
	}
	lag.From, lag.To, lag.Step, lag.Series[0].Points = h.from, h.to, h.step, h.lag
	oldest.From, oldest.To, oldest.Step, oldest.Series[0].Points = h.from, h.to, h.step, h.oldest
	empty := "No samples of this group yet: the console samples every " + s.cfg.sampler.every.String() + " from its start."
	lag.Note = "A partition the group has no start offset for yet counts the records waiting for it, when known: the group page's “≥ N”."
	if h.lastErr != nil {
		lag.Note = "The latest sample (" + fmtTime(h.lastAt) + ") failed: " + h.lastErr.Error()
	}
	lag.Empty, oldest.Empty = empty, empty
	oldest.Note = "The age of the first record of each partition's lag: the oldest job waiting or locked by a member, when jobs finish in about the order they came."
	return []template.HTML{lag.html(), oldest.html()}
}

// Outcomes of the job log, as the topic charts group them.
var (
	outcomesDone   = []string{"succeeded"}
	outcomesFailed = []string{"retried", "discarded"}
	outcomesParked = []string{"parked"}
)

// topicCharts serves a topic's charts page: its runs per outcome from
// the job log.
func (s *server) topicCharts(w http.ResponseWriter, r *http.Request) {
	cr, err := parseRange(r)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	topic := r.PathValue("topic")
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	c := s.topicChart(ctx, topic, cr)
	s.chartPage(w, r, "Topic "+topic+" over the "+cr.Label, "topics", "/topics/"+url.PathEscape(topic)+"/charts", s.cfg.prefix+"/topics", "the topics", cr, []template.HTML{c.html()})
}

// topicChart counts the topic's runs in the job log: done, failed and
// parked, per step of the range.
func (s *server) topicChart(ctx context.Context, topic string, cr chartRange) *chart {
	to := s.now().UTC().Truncate(cr.step).Add(cr.step)
	c := &chart{
		ID: "chart-runs", Title: "Runs of " + topic + " per " + stepName(cr.step) + ", " + cr.Label,
		From: to.Add(-cr.span), To: to, Bars: true, Step: cr.step, Integer: true,
		Series: []series{{Name: "done", Color: colorGreen}, {Name: "failed", Color: colorAmber}, {Name: "parked", Color: colorRed}},
		Note:   "From the job log: done is succeeded; failed is retried or discarded (failed without a DLQ); parked is dead-lettered. Runs of every group of the topic.",
	}
	db := s.cfg.outbox // the console's database
	if db == nil {
		c.Empty = "No job log: the console has no database (console.Outbox; shareq console -database)."
		return c
	}
	counts, err := pgjoblog.CountOutcomes(ctx, db, topic, c.From, c.To, cr.step)
	if err != nil {
		c.Empty = "The job log cannot be read: " + err.Error()
		return c
	}
	c.Empty = "No runs of this topic in the job log over the " + cr.Label + "."
	for _, n := range counts {
		i := seriesOf(n.Outcome)
		if i < 0 {
			continue
		}
		ps := c.Series[i].Points
		if k := len(ps) - 1; k >= 0 && ps[k].At.Equal(n.Start) {
			ps[k].V += float64(n.Runs) // failed: retried and discarded
			continue
		}
		c.Series[i].Points = append(ps, point{At: n.Start, V: float64(n.Runs)})
	}
	return c
}

// seriesOf returns the topic chart's series of a job log outcome, -1
// for the outcomes it leaves out (interrupted, cancelled, snoozed).
func seriesOf(outcome string) int {
	for i, os := range [][]string{outcomesDone, outcomesFailed, outcomesParked} {
		for _, o := range os {
			if o == outcome {
				return i
			}
		}
	}
	return -1
}

func stepName(d time.Duration) string {
	if d == time.Minute {
		return "minute"
	}
	return strconv.Itoa(int(d/time.Minute)) + " minutes"
}
