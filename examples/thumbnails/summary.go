package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// Summary is what a run did. It is printed at the end, as text or, with
// -json, as JSON for scripts.
type Summary struct {
	Run      string `json:"run,omitempty"` // the run's name, part of every job ID
	Brokers  string `json:"brokers"`
	Embedded bool   `json:"embedded_broker"`
	Topic    string `json:"topic"`
	DLQTopic string `json:"dlq_topic,omitempty"` // "" when jobs are rejected instead
	Store    string `json:"idempotency_store,omitempty"`

	Produced int `json:"produced"` // jobs produced by this process
	Expected int `json:"expected"` // final outcomes waited for (0: none)
	Finished int `json:"finished"` // jobs with a final outcome

	Done           int            `json:"done"`                  // succeeded
	Retried        int            `json:"retried"`               // done jobs that needed more than one delivery
	Released       int            `json:"released"`              // RELEASE acknowledgements sent
	Parked         map[string]int `json:"parked,omitempty"`      // reason → jobs parked in the DLQ
	Rejected       map[string]int `json:"rejected,omitempty"`    // reason → jobs rejected
	Archived       map[string]int `json:"archived,omitempty"`    // reason → jobs that failed their last delivery
	Duplicates     int            `json:"duplicates_suppressed"` // deliveries accepted without running: already done
	Renewals       int            `json:"lock_renewals"`         // locks of running jobs renewed
	RenewalsFailed int            `json:"lock_renewals_failed,omitempty"`
	Others         int            `json:"other_jobs,omitempty"` // final outcomes of jobs of other runs
	HandlerRuns    int64          `json:"handler_runs"`         // completed runs of the handler

	Images     int      `json:"images"`     // distinct images with thumbnails saved
	Thumbnails int      `json:"thumbnails"` // thumbnails saved
	Bytes      int64    `json:"thumbnail_bytes"`
	SavedTwice []string `json:"saved_twice,omitempty"` // images whose job completed more than once
	OutDir     string   `json:"out_dir,omitempty"`     // "" when kept in memory

	DBRows int `json:"db_rows,omitempty"` // rows of this run in the thumbnails table (-database)
	DBJobs int `json:"db_jobs,omitempty"` // distinct jobs among them

	Slow       []string      `json:"slow_jobs,omitempty"` // images with a simulated slow path
	SlowDelay  time.Duration `json:"-"`
	SlowestJob string        `json:"slowest_job,omitempty"`
	Slowest    time.Duration `json:"-"`
	Elapsed    time.Duration `json:"-"`            // from start to the last final outcome
	Throughput float64       `json:"jobs_per_sec"` // Finished / Elapsed
	Incomplete bool          `json:"incomplete,omitempty"`
	StopReason string        `json:"stop_reason,omitempty"`

	Group   string `json:"group"`
	Console string `json:"console_url,omitempty"` // the web console's URL, "" when it was not served
	Staying bool   `json:"staying,omitempty"`     // the console stays up after the summary, until interrupted

	// The durations above in seconds, for JSON.
	SlowDelaySeconds float64 `json:"slow_delay_seconds,omitempty"`
	SlowestSeconds   float64 `json:"slowest_seconds"`
	ElapsedSeconds   float64 `json:"elapsed_seconds"`
}

// add fills in the tracker's figures.
func (s *Summary) add(c counts) {
	s.Finished, s.Done = c.finished, c.done
	s.Retried, s.Released = c.retried, c.released
	s.Parked, s.Rejected, s.Archived = nonEmpty(c.parked), nonEmpty(c.rejected), nonEmpty(c.archived)
	s.Duplicates, s.Others = c.dupes, c.others
	s.Renewals, s.RenewalsFailed = c.renewals, c.renewalsFailed
	s.SlowestJob, s.Slowest = c.slowestID, c.slowest
	s.Elapsed = c.elapsed
	if c.elapsed > 0 {
		s.Throughput = float64(c.finished) / c.elapsed.Seconds()
	}
}

func nonEmpty(m map[string]int) map[string]int {
	if len(m) == 0 {
		return nil
	}
	return m
}

func (s *Summary) writeJSON(w io.Writer) error {
	s.SlowDelaySeconds = s.SlowDelay.Seconds()
	s.SlowestSeconds = s.Slowest.Seconds()
	s.ElapsedSeconds = s.Elapsed.Seconds()
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

func (s *Summary) writeText(w io.Writer) {
	line := func(label, format string, args ...any) {
		fmt.Fprintf(w, "  %-16s %s\n", label, fmt.Sprintf(format, args...))
	}
	head := fmt.Sprintf("%d jobs in %v", s.Finished, s.Elapsed.Round(time.Millisecond))
	if s.Elapsed > 0 {
		head += fmt.Sprintf(" (%.1f jobs/s)", s.Throughput)
	}
	if s.Incomplete {
		head += fmt.Sprintf(": stopped with %d of %d jobs finished (%s)", s.Finished, s.Expected, s.StopReason)
	}
	fmt.Fprintln(w, "thumbnails:", head)
	if s.Produced > 0 {
		line("produced", "%d jobs to %s (run %s)", s.Produced, s.Topic, s.Run)
	}
	done := fmt.Sprint(s.Done)
	if s.Retried > 0 {
		done += fmt.Sprintf(" (%d needed more than one delivery)", s.Retried)
	}
	line("done", "%s", done)
	line("released", "%d (each delivered again)", s.Released)
	if len(s.Parked) > 0 || s.DLQTopic != "" {
		line("parked", "%d in %s%s", sum(s.Parked), s.DLQTopic, reasons(s.Parked))
	}
	if len(s.Rejected) > 0 || s.DLQTopic == "" {
		line("rejected", "%d%s", sum(s.Rejected), reasons(s.Rejected))
	}
	if len(s.Archived) > 0 {
		line("archived", "%d failed on their last delivery%s", sum(s.Archived), reasons(s.Archived))
	}
	if s.Store != "" {
		line("duplicates", "%d suppressed by the idempotency claim (%s store)", s.Duplicates, s.Store)
	}
	if s.Others > 0 {
		line("other jobs", "%d from earlier runs also finished", s.Others)
	}
	where := "kept in memory"
	if s.OutDir != "" {
		where = "written to " + s.OutDir
	}
	// One thumbnail per size and image: the count of images is not the
	// count of thumbnails.
	line("saved", "%d thumbnails of %d images, %s, %s", s.Thumbnails, s.Images, size(s.Bytes), where)
	if s.DBRows > 0 {
		line("database", "%d rows for %d jobs in table thumbnails, written in the claim transactions", s.DBRows, s.DBJobs)
	}
	if len(s.SavedTwice) > 0 {
		line("saved twice", "%v (a job ran again after its lock ran out)", s.SavedTwice)
	}
	if len(s.Slow) > 0 {
		line("slow jobs", "%s (a simulated slow path of %v each)", strings.Join(s.Slow, " "), s.SlowDelay)
	}
	if s.Renewals > 0 || s.RenewalsFailed > 0 {
		failed := ""
		if s.RenewalsFailed > 0 {
			failed = fmt.Sprintf(", %d failed", s.RenewalsFailed)
		}
		line("lock renewals", "%d%s (jobs that ran past half their lock kept it)", s.Renewals, failed)
	}
	if s.SlowestJob != "" {
		line("slowest job", "%s, %v", s.SlowestJob, s.Slowest.Round(time.Millisecond))
	}
	switch {
	case s.Console != "" && s.Staying:
		line("web console", "%s (the share group %s and its lag, the job parked in %s)", s.Console, s.Group, s.DLQTopic)
		running := "the worker"
		if s.Embedded {
			running = "the worker and the in-process broker"
		}
		line("still running", "%s, for the console; Ctrl-C to stop", running)
		line("also try", "go run ./cmd/shareq status %s -brokers %s", s.Group, s.Brokers)
	case s.Console != "":
		line("web console", "was at %s while the demo ran (-stay keeps it up after the summary)", s.Console)
	}
}

// reasons renders reason counts as " (decode: 1, panic: 2)".
func reasons(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(m)) {
		name := r
		if name == "" {
			name = "no reason"
		}
		parts = append(parts, fmt.Sprintf("%s: %d", name, m[r]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func size(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
