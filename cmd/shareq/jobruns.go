package main

import (
	"fmt"
	"time"

	"github.com/shareq/shareq/joblog/pgjoblog"
)

// jsonRun is a run of the job log as "show -json" prints it.
type jsonRun struct {
	Delivery int32     `json:"delivery"`
	Outcome  string    `json:"outcome"`
	Ack      string    `json:"ack"`
	Started  time.Time `json:"started"`
	Ended    time.Time `json:"ended"`
	Duration string    `json:"duration"`
	Error    string    `json:"error,omitempty"`
	Worker   string    `json:"worker,omitempty"`
	TraceID  string    `json:"trace_id,omitempty"`
	Result   any       `json:"result,omitempty"`
	Progress *int      `json:"progress,omitempty"`
	Message  string    `json:"progress_message,omitempty"`
}

func toJSONRuns(runs []pgjoblog.Run) []jsonRun {
	out := []jsonRun{}
	for _, r := range runs {
		j := jsonRun{Delivery: r.DeliveryCount, Outcome: r.Outcome, Ack: r.Ack, Started: r.Started.UTC(), Ended: r.Ended.UTC(),
			Duration: r.Duration.String(), Error: r.Error, Worker: r.Worker, TraceID: r.TraceID}
		if r.Result != nil {
			j.Result = r.Result
		}
		if r.Progress != nil {
			j.Progress, j.Message = &r.Progress.Percent, r.Progress.Message
		}
		out = append(out, j)
	}
	return out
}

// printRuns prints the job log's runs of a job, newest first.
func printRuns(w *errWriter, runs []pgjoblog.Run) {
	if len(runs) == 0 {
		w.printf("runs         none in the job log (no worker with pgjoblog ran it within its retention)\n")
		return
	}
	w.printf("runs         %d in the job log, newest first\n", len(runs))
	for _, r := range runs {
		w.printf("  %s  delivery %d  %s (%s)  %s  on %s  %s\n", fmtTime(r.Ended), r.DeliveryCount, r.Outcome, r.Ack,
			r.Duration.Round(time.Millisecond), partitionText(r.Topic, r.Partition, r.Offset), strOrText(r.Worker, "worker unknown"))
		if r.Error != "" {
			w.printf("    error    %s\n", cell(r.Error, 200))
		}
		if r.Progress != nil {
			w.printf("    progress %d%% %s\n", r.Progress.Percent, r.Progress.Message)
		}
		if r.Result != nil {
			w.printf("    result   %s\n", cell(string(r.Result), 200))
		}
	}
}

func partitionText(topic string, partition int32, offset int64) string {
	return fmt.Sprintf("%s/%d@%d", topic, partition, offset)
}

func strOrText(s, none string) string {
	if s == "" {
		return none
	}
	return "worker " + s
}
