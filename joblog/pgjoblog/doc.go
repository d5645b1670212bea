// Package pgjoblog is the job log: a [worker.Observer] that records every
// finished delivery of a job in Postgres (table shareq_job_runs, created
// by migration 0008 of the migrations package), for finding what
// happened to a job after the broker forgot it: its outcome and
// acknowledgement, its delivery count, when it started and ended, its
// error, the worker that ran it and its trace.
//
//	if err := migrations.Up(ctx, pool); err != nil {
//		return err
//	}
//	jl, err := pgjoblog.New(pool) // options: Retention, Buffer, FlushEvery, BatchRows, Logger
//	if err != nil {
//		return err
//	}
//	go jl.Run(ctx) // returns when ctx ends, after writing what is left (at most 10 s)
//	w, err := worker.New(
//		worker.Brokers(brokers...),
//		worker.Group("images"),
//		worker.Handle("images", thumbnail),
//		worker.Observers(jl),
//	)
//
// The worker's loop never waits for Postgres: [Log.JobFinished] appends
// the run to a bounded buffer in memory ([Buffer] rows), and [Log.Run]
// writes the buffer in batches, every [FlushEvery] or [BatchRows] rows,
// in one INSERT each. When the buffer is full the oldest row is dropped
// and counted ([Log.Dropped]; one Warn line a minute while rows are
// dropped). When Postgres is down the worker goes on at full speed: the
// buffer keeps the newest rows, the log says once (Warn) that writing
// fails and once (Info) that it is back.
//
// A row is written at least once: a batch whose commit was not confirmed
// is written again, and the table's primary key (topic, partition,
// offset, delivery count, end time) makes the second copy no row (ON
// CONFLICT DO NOTHING).
//
// Retention costs nothing per row: the table is partitioned by day, Run
// creates the partitions of the next days ahead and drops those older
// than [Retention] (default 7 days), at start and every hour.
//
// A handler's result (handler.Job.SetResult) and last progress
// (handler.Job.Progress) are kept with its run; the progress of running
// jobs is written at most once a second per job, to shareq_job_progress.
//
// [Log.Runs] lists the runs of one job, newest first; [Log.Recent] the
// latest runs, filtered; [Log.Progress] a running job's progress;
// [CountOutcomes] a topic's runs per outcome over time (the console's
// charts).
package pgjoblog
