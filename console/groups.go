package console

import (
	"context"
	"errors"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/internal/sharegroup"
)

// requestTimeout bounds the broker calls of one page.
const requestTimeout = 30 * time.Second

// groupRow is one share group on the overview.
type groupRow struct {
	Name       string
	State      string
	Members    int
	Lag        string // sharegroup.Status.LagText: never "0" while a partition's lag is unknown
	NoStart    int    // partitions without a start offset
	NotStarted string // sharegroup.Status.NotStartedText
	Rate       string // jobs/s from the lag's movement, "" until known
	Err        string
}

// rateSample is a group's done count (end offsets minus lag, summed) at a
// time, kept between two views of the overview to show jobs/s.
type rateSample struct {
	at   time.Time
	done int64
}

func (s *server) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	adm, cl, release, err := s.admin()
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	defer release()
	listed, err := adm.ListGroupsByType(ctx, []string{"share"})
	if err != nil && len(listed) == 0 {
		s.fail(w, r, statusOf(err), err)
		return
	}
	var rows []groupRow
	for _, name := range listed.Groups() {
		row := groupRow{Name: name}
		g, err := sharegroup.Describe(ctx, adm, name)
		if err == nil {
			var st *sharegroup.Status
			if st, err = sharegroup.Gather(ctx, cl, g); err == nil {
				row.State, row.Members, row.Lag = st.State, len(st.Members), st.LagText()
				row.NoStart, row.NotStarted = st.NoStartOffset, st.NotStartedText()
				row.Rate = s.rate(name, st)
			}
		}
		if err != nil {
			row.Err = err.Error()
		}
		rows = append(rows, row)
	}
	slices.SortFunc(rows, func(a, b groupRow) int { return strings.Compare(a.Name, b.Name) })
	s.render(w, r, http.StatusOK, "overview", "Share groups", "groups", rows)
}

// rate returns the group's jobs done per second since the previous
// sample, and keeps this one.
func (s *server) rate(group string, st *sharegroup.Status) string {
	var done int64
	for _, p := range st.Partitions {
		if p.HighWatermark == nil || p.Lag == nil {
			return ""
		}
		done += *p.HighWatermark - *p.Lag
	}
	now := s.now()
	s.mu.Lock()
	prev, ok := s.rates[group]
	s.rates[group] = rateSample{at: now, done: done}
	s.mu.Unlock()
	el := now.Sub(prev.at).Seconds()
	if !ok || el < 1 || done < prev.done {
		return ""
	}
	return formatRate(float64(done-prev.done) / el)
}

// groupConfigs are the group configs the group page shows.
var groupConfigs = []string{
	groupcfg.DeliveryCountLimit, groupcfg.RecordLockDurationMs, groupcfg.RenewAckEnable,
	groupcfg.AutoOffsetReset, groupcfg.SessionTimeoutMs, groupcfg.HeartbeatIntervalMs, groupcfg.DLQTopicName,
}

type groupPage struct {
	Status     *sharegroup.Status
	Configs    []kv
	ConfigsErr string
	BrokerDLQ  string   // the group's broker dead-letter topic, "" when none is set
	DLQs       []string // the DLQ topics (<topic>.dlq) of the group's topics that exist
	Paused     pauseView
	Charts     []template.HTML // the last hour's lag and oldest job (charts.go)
	Refresh    string          // how often the group's chart page reloads
}

type kv struct{ Key, Value string }

func (s *server) group(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	name := r.PathValue("group")
	adm, cl, release, err := s.admin()
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	defer release()
	g, err := sharegroup.Describe(ctx, adm, name)
	if nf := new(sharegroup.NotFoundError); errors.As(err, &nf) {
		s.fail(w, r, http.StatusNotFound, err)
		return
	}
	if err != nil {
		s.fail(w, r, statusOf(err), err)
		return
	}
	st, err := sharegroup.Gather(ctx, cl, g)
	if err != nil {
		s.fail(w, r, statusOf(err), err)
		return
	}
	p := groupPage{Status: st, Paused: s.pausesOf(ctx, cl, st), Refresh: s.refreshEvery().String()}
	if s.cfg.sampler != nil { // without one, a line says so instead of two empty charts
		p.Charts = s.groupChartsHTML(name, chartRanges[0])
	}
	var dlqs []string
	for _, ps := range st.Partitions {
		if d := ps.Topic + dlq.TopicSuffix; !slices.Contains(dlqs, d) {
			dlqs = append(dlqs, d)
		}
	}
	if len(dlqs) > 0 {
		if md, err := adm.ListTopics(ctx, dlqs...); err == nil {
			for _, d := range dlqs {
				if t, ok := md[d]; ok && t.Err == nil {
					p.DLQs = append(p.DLQs, d)
				}
			}
		}
	}
	vals, err := groupcfg.Describe(ctx, cl, name, groupConfigs...)
	if err != nil {
		p.ConfigsErr = err.Error()
	}
	for _, k := range groupConfigs {
		v, ok := vals[k]
		if !ok {
			v = "(broker default)"
		}
		if k == groupcfg.DLQTopicName && ok && v != "" {
			p.BrokerDLQ = v
		}
		p.Configs = append(p.Configs, kv{k, v})
	}
	s.render(w, r, http.StatusOK, "group", "Share group "+name, "groups", p)
}
