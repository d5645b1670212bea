package console

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/shareq/shareq/console/jobinfo"
	"github.com/shareq/shareq/dlq"
)

// topicRow is a job topic on the topics page, with its DLQ topic.
type topicRow struct {
	Name       string
	Partitions int
	Records    int64 // end offsets minus start offsets, summed
	DLQ        string
	DLQRecords int64
}

type topicsPage struct {
	Topics []topicRow
	// DLQs are dead-letter topics without a job topic of their own:
	// the broker's ("dlq.<group>", Kafka 4.4+) and orphans.
	DLQs []topicRow
}

func (s *server) topics(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	adm, _, release, err := s.admin()
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	defer release()
	details, err := adm.ListTopics(ctx)
	if err != nil {
		s.fail(w, r, statusOf(err), err)
		return
	}
	names := details.Names()
	starts, serr := adm.ListStartOffsets(ctx, names...)
	ends, eerr := adm.ListEndOffsets(ctx, names...)
	records := func(t string) int64 {
		if serr != nil || eerr != nil {
			return -1
		}
		var n int64
		for p, e := range ends[t] {
			if st, ok := starts.Lookup(t, p); ok && e.Err == nil && st.Err == nil {
				n += e.Offset - st.Offset
			}
		}
		return n
	}
	isDLQ := jobinfo.IsDLQTopic
	var page topicsPage
	used := map[string]bool{}
	for _, t := range names {
		if isDLQ(t) || strings.HasPrefix(t, "__") {
			continue
		}
		row := topicRow{Name: t, Partitions: len(details[t].Partitions), Records: records(t)}
		if d := t + dlq.TopicSuffix; slices.Contains(names, d) {
			row.DLQ, row.DLQRecords, used[d] = d, records(d), true
		}
		page.Topics = append(page.Topics, row)
	}
	for _, t := range names {
		if isDLQ(t) && !used[t] {
			page.DLQs = append(page.DLQs, topicRow{Name: t, Partitions: len(details[t].Partitions), Records: records(t)})
		}
	}
	s.render(w, r, http.StatusOK, "topics", "Topics", "topics", page)
}
