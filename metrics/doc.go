// Package metrics exports a shareq worker's events and a share group's
// backlog as Prometheus metrics.
//
// [New] registers the worker metrics with a prometheus.Registerer the
// application owns and returns a [Metrics], which is a worker.Observer:
//
//	reg := prometheus.NewRegistry()
//	m, err := metrics.New(reg)
//	if err != nil {
//		return err
//	}
//
// and is given to the worker with worker.Observers(m); it counts
// parked jobs from the worker's report. Its [Metrics.Duplicate] method
// fits the hook of the idempotency middleware, so suppressed duplicates
// are counted too:
//
//	park, err := dlq.Middleware(producer)
//	if err != nil {
//		return err
//	}
//	claim, err := idempotency.Middleware(store, idempotency.OnDuplicate(m.Duplicate))
//	if err != nil {
//		return err
//	}
//	w, err := worker.New(
//		worker.Brokers("localhost:9092"),
//		worker.Group("thumbnails"),
//		worker.Handle("images", handler.Func(resize), park, claim),
//		worker.Observers(m),
//	)
//
// [NewLagCollector] returns a prometheus.Collector that reads a share
// group's lag from the broker when it is scraped.
//
// # Worker metrics
//
// Every name starts with the namespace "shareq". Labels are few and
// bounded: topic, the acknowledgement, a result, a park reason. A record's
// key or a job ID is never a label.
//
//	shareq_jobs_total{topic,outcome,ack}
//	    Counter. Records acknowledged, by outcome (worker.Outcome) and by
//	    the ack the broker got:
//	      outcome="succeeded"   ack="accept"   the handler returned nil
//	      outcome="parked"      ack="accept"   parked in the DLQ by the dlq
//	                                           middleware: failed, not a success
//	      outcome="retried"     ack="release"  failed, to be delivered again
//	                                           (a job timeout included)
//	      outcome="discarded"   ack="reject"   failed permanently, no DLQ
//	      outcome="discarded"   ack="release"  released on its last delivery:
//	                                           the broker archives it
//	      outcome="interrupted" ack="release"  given back without a result
//	                                           (lock ran out, MaxHold, shutdown)
//	      outcome="cancelled"   ack="accept"   cancelled after it was produced
//	                                           (pgoutbox.CancelTx): not run
//	      outcome="snoozed"     ack="accept"   snoozed past what the worker
//	                                           holds (handler.Snooze), or
//	                                           waited for its key until
//	                                           MaxHold: copied to run later,
//	                                           no delivery spent
//	    One per delivery: a job retried once and then done counts one
//	    retried and one succeeded. Successes are
//	    shareq_jobs_total{outcome="succeeded"}; sum by (ack) for the
//	    acknowledgements.
//	shareq_job_duration_seconds{topic}
//	    Histogram. How long handlers ran; only records whose handler ran
//	    (see shareq_jobs_expired_total for the others). A handler that is
//	    abandoned (shutdown timeout, MaxHold, lost lock) counts the time
//	    until its record was released.
//	shareq_jobs_in_flight{topic}
//	    Gauge. Handlers started and not yet acknowledged.
//	shareq_lock_renewals_total{topic,result}
//	    Counter. Lock renewals of long-running jobs, by result: ok, or
//	    error when the broker did not confirm the renewal.
//	shareq_delivery_count{topic}
//	    Histogram, buckets 1 to 10. The delivery count of each acknowledged
//	    record: 1 on the first delivery. Its _count equals the sum of
//	    shareq_jobs_total over outcome and ack; mass in the higher buckets means jobs
//	    are failing and being retried.
//	shareq_ack_errors_total{topic}
//	    Counter. Acknowledgements the broker did not apply (the record's
//	    lock had run out, or its share session was gone). Those records
//	    are delivered again, so their jobs run again.
//	shareq_jobs_parked_total{topic,reason}
//	    Counter. Jobs parked in a dead-letter topic (outcome parked in the
//	    worker's report), by reason: permanent, decode, panic,
//	    delivery-limit, or a reason of the handler's own.
//	shareq_duplicates_suppressed_total{topic}
//	    Counter. Jobs accepted without running because the idempotency
//	    middleware found their key already claimed ([Metrics.Duplicate]).
//	shareq_lock_remaining_seconds{topic}
//	    Histogram. Time left on the record's lock when it was acknowledged.
//	    A lock that had already run out counts as 0 (the lowest bucket,
//	    le="0"): such an acknowledgement may come too late, and the job may
//	    run again elsewhere. Mass near 0 means the lock duration or the
//	    renewal margin is too short for the jobs.
//	shareq_jobs_expired_total{topic}
//	    Counter. Records released without running because their lock had
//	    run out before the worker could start them (Result.Ran false).
//	    They are also counted in shareq_jobs_total{outcome="interrupted"}
//	    (or "discarded" on their last delivery). A job snoozed without
//	    running (it waited for its key until MaxHold) is not counted.
//	shareq_topic_missing{topic}
//	    Gauge. 1 while a topic the worker consumes is deleted, else 0
//	    (the worker checks its topics every 10 s). Its jobs are gone;
//	    alert on it.
//	shareq_topic_recreations_total{topic}
//	    Counter. A consumed topic found deleted and re-created under a new
//	    ID; the worker consumes the new topic from then on.
//	shareq_partition_records_skipped_total{topic}
//	    Counter. At most how many records the share group skipped on
//	    partitions added to the topic while it ran: on Apache Kafka before
//	    4.4 a group with share.auto.offset.reset=latest starts an added
//	    partition at its latest offset (KAFKA-20742). The worker logs, at
//	    Error level, the command that delivers them again; alert on it.
//	shareq_partitions_stalled{topic}
//	    Gauge. Partitions of the topic assigned to the worker that records
//	    wait on and the broker gives none of: the group's start offset on
//	    the partition does not move and the records from it reach the
//	    share partition's in-flight limit (share.partition.max.record.locks,
//	    2,000 by default), so the broker acquires no more. A long job
//	    holding the record at the start offset does that until it ends;
//	    a broker whose share state is stuck does it for good (a Kafka
//	    defect seen on 4.3.1 and 4.4.0 after broker restarts). The worker logs, at Error
//	    level, what to do; alert on it staying above 0.
//	shareq_stall_heals_total{topic,result}
//	    Counter. Tries of worker.HealStalls (off by default) at a stalled
//	    partition of the topic, by result: "freed" (the group's start
//	    offset moved after the heal), "still_stalled" (restart the
//	    partition's leader) or "skipped" (nothing done: a pause of the
//	    group in force, a member holding records or publishing no status;
//	    the worker's Warn line says which). One try per partition per 10
//	    minutes in each worker.
//	shareq_worker_paused{dependency}
//	    Gauge. 1 while the worker is paused because a dependency every job
//	    needs is down (a handler returned handler.Unavailable, as the
//	    pgstore claim store does while Postgres is unreachable: dependency
//	    "postgres"), else 0. A paused worker holds its jobs on their
//	    deliveries and fetches nothing; it resumes by itself. Alert on it
//	    lasting (the dependency is down), not on it blinking.
//	shareq_worker_pauses_total{dependency}
//	    Counter. Pauses, by the dependency that went down.
//	shareq_worker_paused_seconds_total{dependency}
//	    Counter. Seconds spent paused, added when each pause ends.
//	shareq_topic_paused{topic}
//	    Gauge. 1 while an operator paused the topic for the worker's group
//	    (shareq pause, package control) and the worker applied it, else
//	    0: the worker fetches none of its records and starts none of its
//	    jobs (docs/operating.md, "Pause and resume"). [Metrics] implements
//	    [worker.PausedTopicObserver] for it.
//
// # Share-group member metrics
//
// [Metrics] implements [worker.PauseObserver] for the three worker_paused
// series, which have a dependency label (a short, fixed name per
// dependency) instead of a topic: the pause is worker-wide.
//
// A worker is one share-group member. [Metrics] implements
// [worker.MemberObserver], so it also gets a snapshot of the member about
// once a second:
//
//	shareq_member_state{state}
//	    Gauge. 1 for the member's state, 0 for the others: joining (no
//	    assignment yet), joined, fenced (the coordinator dropped it; it
//	    rejoins, and keeps acknowledging what it holds meanwhile), left.
//	    A member that stays in joining may be refused by the group
//	    (group.share.max.size): the worker logs why.
//	shareq_member_partitions
//	    Gauge. Partitions assigned to the member.
//	shareq_records_held
//	    Gauge. Records acquired and not yet acknowledged: running, buffered,
//	    or held for a retry backoff.
//	shareq_records_held_bytes
//	    Gauge. Bytes (keys, values and headers) of the records whose jobs
//	    have not ended; worker.MaxBytesInHand bounds them (plus one fetch's
//	    overshoot).
//	shareq_records_buffered
//	    Gauge. Records fetched ahead of free handler slots (the prefetch).
//	shareq_fetch_rtt_seconds
//	    Gauge. Moving average of the round trip of share fetches that
//	    returned records: a member runs about Concurrency ÷ this many
//	    short jobs a second.
//	shareq_fetches_total, shareq_records_fetched_total
//	    Counters. Share fetches answered; records acquired.
//	shareq_acks_total{ack}
//	    Counter. Acknowledgements the broker applied, by type (accept,
//	    release, reject); failures count in shareq_ack_errors_total.
//	shareq_records_lost_total
//	    Counter. Held records whose lock the member lost (its session or
//	    connection to a broker went away): another member may run them.
//	shareq_sessions_opened_total, shareq_sessions_reset_total
//	    Counters. Share sessions opened with brokers (one per broker that
//	    leads an assigned partition), and reopened after an error.
//	shareq_member_rejoins_total
//	    Counter. Rejoins after the coordinator fenced the member.
//	shareq_rate_limit_jobs_per_second{topic}, shareq_rate_share_jobs_per_second{topic}
//	    Gauges, only for a worker with worker.TopicRate: the topic's limit
//	    for the whole group, and this worker's share of it (0 while the
//	    worker waits to be counted among the members that share it; see
//	    docs/rate-limits.md).
//
// A process that runs several workers makes one [Metrics] for each, with
// distinct [ConstLabels], on the same registerer.
//
// # Key limits and snoozes
//
// [Metrics] implements [worker.KeyObserver] for the breakers of
// worker.KeyLimit, and takes three more gauges from the member snapshots.
// No series has a key label, whatever the keys (hosts, customers): the
// series are as few as the topics.
//
//	shareq_jobs_waiting_for_keys
//	    Gauge. Jobs waiting for their keys' limits (Keys.Concurrency,
//	    Keys.Rate) or open breakers: they hold no handler slot, their
//	    locks are renewed and they spend no delivery. Steadily high: jobs
//	    of some keys come faster than their limits let them run. With the
//	    snoozed jobs held, past 16 per handler slot (64 at least), they
//	    slow the worker's fetching.
//	shareq_jobs_snoozed_held
//	    Gauge. Snoozed jobs (handler.Snooze) the worker holds until they
//	    are due, without a handler slot; a snooze past what the worker
//	    holds is copied for later and counted in
//	    shareq_jobs_total{outcome="snoozed"}.
//	shareq_key_breakers_open
//	    Gauge. Keys whose breaker is open in the worker: their jobs wait
//	    while one of them probes the key now and then. Alert on it
//	    lasting, not on it blinking; the worker logs each opening (Warn)
//	    and closing (Info) with the key.
//	shareq_key_breakers_opened_total{topic}
//	    Counter. Breakers opened: a handler returned
//	    handler.KeyUnavailable, or Keys.BreakAfter failures of a key came
//	    in a row.
//	shareq_key_breakers_closed_total{topic}
//	    Counter. Breakers closed because a probe got through.
//	shareq_key_breakers_open_seconds_total{topic}
//	    Counter. Seconds breakers stayed open, added when each closes.
//
// # Share-group lag
//
// A [LagCollector] exports, for one group, read with
// DescribeShareGroupOffsets (Kafka 4.2+, KIP-1226):
//
//	shareq_share_group_lag{group,topic,partition}
//	    Gauge. Records of the share-partition that are not yet acknowledged
//	    or archived: waiting for delivery, or delivered and locked.
//	shareq_share_group_start_offset{group,topic,partition}
//	    Gauge. The share-partition start offset: every record before it is
//	    acknowledged or archived. Apache Kafka reports the offset it last
//	    persisted, which can trail the first unacknowledged record, so
//	    end offset minus start offset over-counts: use the lag.
//	shareq_share_group_lag_total{group,topic}
//	    Gauge. The sum of shareq_share_group_lag over the topic's
//	    partitions: the backlog to scale on.
//	shareq_lag_scrape_errors_total{group}
//	    Counter. Failed readings; the lag series are absent from a scrape
//	    whose reading failed (see [LagCollector] for why).
//
// A partition that no member of the group has fetched from yet has no
// start offset, so the broker reports no lag for it: a group that has
// never run reports no lag at all, however many records wait for it.
// [LagTopics] names the group's topics so that such a partition counts its
// whole log instead (right for share.auto.offset.reset=earliest, the
// setting for a job queue); scale-from-zero needs it. kadm.Lag and consumer-group lag exporters do
// not understand share groups: a share group commits no offsets, so they
// see none.
//
// # Transactional outbox relay
//
// Package metrics/outboxmetrics (a package of its own, so that this one
// does not pull in pgx) has a prometheus.Collector for a relay of package
// enqueue/pgoutbox: it reads the relay's counters on every scrape, and the
// outbox table's backlog (one aggregate query) at most once per
// outboxmetrics.MinInterval:
//
//	reg.MustRegister(outboxmetrics.NewCollector(relay))
//
// Its metrics:
//
//	shareq_outbox_rows
//	    Gauge. Committed jobs in the outbox table not yet relayed, due or
//	    not. It grows while Kafka or the relays are down; nothing is lost
//	    meanwhile.
//	shareq_outbox_rows_scheduled
//	    Gauge. Jobs among them not due yet (pgoutbox.At, pgoutbox.In).
//	shareq_outbox_rows_failing
//	    Gauge. Jobs among them whose produce has failed at least once (a
//	    deleted topic, a broker refusing them); each is retried with
//	    backoff and its last error is in the row (last_error).
//	shareq_outbox_oldest_row_age_seconds
//	    Gauge. How long the job that has been due longest has been due
//	    (since its insert, for a job without a due time), 0 when none is
//	    due: the delay the slowest job is seeing. Jobs scheduled for
//	    later do not age. Alert on it.
//	shareq_relay_produced_total
//	    Counter. Jobs the relay produced, had acknowledged and deleted.
//	shareq_relay_failures_total
//	    Counter. Produce failures of jobs (each failed attempt counts).
//	shareq_relay_db_errors_total
//	    Counter. Relay rounds and listening connections that failed on
//	    Postgres; the relay retries by itself.
//	shareq_relay_due_delay_seconds
//	    Summary (sum and count, no quantiles). For each job the relay
//	    produced, the time from its due time to its delete after the
//	    broker's acknowledgement, on Postgres's clock: how late jobs for
//	    later reach Kafka. A job without a due time is due at its insert,
//	    so its delay includes the rest of its transaction. rate(_sum) /
//	    rate(_count) is the mean delay.
//	shareq_outbox_scrape_errors_total
//	    Counter. Failed backlog readings; the four outbox gauges are
//	    absent from a scrape whose reading failed.
//
// The counters are one relay's; the gauges describe the table that every
// relay on it shares. With a relay in each of several processes, sum the
// counters and take the max of the gauges. This collector is the one
// place the metrics package imports pgoutbox (and so pgx).
//
// # Periodic scheduler
//
// outboxmetrics.NewSchedulerCollector exports a scheduler of package
// scheduler (which itself imports no Prometheus): it reads the
// scheduler's Stats on every scrape and queries nothing.
//
//	reg.MustRegister(outboxmetrics.NewSchedulerCollector(sched))
//
// Its metrics, labelled by app (scheduler.App) and, per schedule, by the
// schedule's name:
//
//	shareq_scheduler_leading{app}
//	    Gauge. 1 while this process is its app's active scheduler (it
//	    holds the app's advisory lock), else 0. max by (app) is 1 while
//	    the app has one; alert on it being 0 for longer than a failover
//	    (scheduler.RetryInterval) takes.
//	shareq_scheduler_elections_total{app}
//	    Counter. Times this process became the active scheduler: more
//	    than one per process start means leadership moved (lost
//	    connections, restarts elsewhere).
//	shareq_scheduler_errors_total{app}
//	    Counter. Database errors that ended a term of leading or of
//	    trying for the lock (a lost connection, a failed check or firing
//	    transaction); the scheduler tries again by itself.
//	shareq_scheduler_firings_total{app,schedule,result}
//	    Counter. Firings whose transaction committed, by result: enqueued;
//	    duplicate (already enqueued, refused by its unique key: another
//	    scheduler led alongside for a moment, or one died after its
//	    commit); skipped (the schedule's job could not be built or
//	    encoded, logged at Error, not retried: alert on it).
//	shareq_scheduler_enqueue_delay_seconds{app,schedule}
//	    Summary (sum and count, no quantiles). For each enqueued firing,
//	    the time from the firing's time to its commit in the outbox, on
//	    the scheduler's clock: how late the scheduler enqueues. A missed
//	    firing run by scheduler.RunLast counts its whole lateness. The
//	    rest of the way to Kafka is shareq_relay_due_delay_seconds.
//	shareq_scheduler_last_firing_timestamp_seconds{app,schedule}
//	    Gauge. Unix time of the latest firing this process enqueued or
//	    found enqueued; absent before its first. time() minus it, over
//	    the processes' max, says how long a schedule has not fired.
//	shareq_scheduler_next_firing_timestamp_seconds{app,schedule}
//	    Gauge. Unix time of the schedule's next firing; only from the
//	    active scheduler.
//
// The counters are each process's; every process of an app runs the
// scheduler and only the active one fires: sum them over the processes.
// The CLI shows the same from the database: shareq jobs schedules.
//
// # Autoscaling with KEDA
//
// KEDA's Prometheus scaler can size a worker Deployment by the backlog:
//
//	triggers:
//	  - type: prometheus
//	    metadata:
//	      serverAddress: http://prometheus.monitoring.svc:9090
//	      query: sum(shareq_share_group_lag_total{group="thumbnails"})
//	      threshold: "50"          # backlog per replica
//	      ignoreNullValues: "false"
//
// The full ScaledObject, with the fallback for failed readings and a note
// on scaling to zero, is in keda-example.yaml in this package's directory.
package metrics
