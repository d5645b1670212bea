# make test   vet + every test under -race on kfake, then the Kafka suite on a
#             real Apache Kafka broker, with Postgres (both installed and
#             started as needed by scripts/test.sh)
# make compat the Kafka suite again on the older Kafka releases shareq
#             supports (KAFKA_COMPAT_VERSIONS in scripts/versions.env), each
#             on a broker of its own; docs/compatibility.md
# make unit   the fast part only: vet + tests on kfake, no services
#             (every module of go.work: scripts/modules.sh)
# make bench  the framework-overhead benchmark (no-op handler vs raw franz-go)
# make bench-all, make bench-scale, make bench-ab  internal/cmd/shareq-bench (below)
# make api    rewrite api/shareq.txt, the baseline of the published
#             packages' exported API that make test checks the code
#             against (internal/cmd/apicheck; docs/development.md)
# make release-check  the release check make test runs: every module
#             tidy and vetted on its own, then the published modules
#             fetched with go get and go install from a file:// proxy
#             built from the tree (internal/cmd/releasecheck)
# make tidy   go mod tidy in every module (the published ones against
#             that proxy; their go.sum keeps no line for our modules)
# make release VERSION=vX.Y.Z  every requirement between our modules
#             set to VERSION, tidy, the release check, then the tags to
#             push (docs/development.md, "Releasing")

.PHONY: test compat unit bench example api release-check tidy release kafka-up kafka-down pg-up pg-down

test:
	bash scripts/test.sh

compat:
	bash scripts/compat.sh

unit:
	go vet $$(scripts/modules.sh)
	go test -race -count=1 $$(scripts/modules.sh)

bench:
	go test -run '^$$' -bench Noop -benchtime 20000x ./worker

example:
	go run ./examples/thumbnails

api:
	go run ./internal/cmd/apicheck -w api/shareq.txt

release-check:
	go run ./internal/cmd/releasecheck

tidy:
	go run ./internal/cmd/releasecheck -tidy

release:
	@test -n "$(VERSION)" || { echo "make release VERSION=vX.Y.Z"; exit 2; }
	go run ./internal/cmd/releasecheck -set $(VERSION)
	go run ./internal/cmd/releasecheck -tidy
	go run ./internal/cmd/releasecheck
	@echo "after the release commit is merged, tag it and push the tags:"
	@go run ./internal/cmd/releasecheck -tags

kafka-up:
	scripts/kafka.sh up
kafka-down:
	scripts/kafka.sh down
pg-up:
	scripts/postgres.sh up
pg-down:
	scripts/postgres.sh down

# make bench-all  internal/cmd/shareq-bench on kfake and on the real broker, with
#                 Postgres (about 2 minutes): starts the test broker and
#                 Postgres if they are not running and stops only what it
#                 started. Table on stdout; CSV and PNG charts in bench-out/.
#                 BENCH_FLAGS=-quick for a short run. See BENCHMARKS.md.
.PHONY: bench-all
bench-all:
	@kafka_started=; pg_started=; \
	stop_started() { \
	  if [ -n "$$kafka_started" ]; then scripts/kafka.sh down; fi; \
	  if [ -n "$$pg_started" ]; then scripts/postgres.sh down; fi; \
	}; \
	trap stop_started EXIT; \
	if ! scripts/kafka.sh status 2>/dev/null; then \
	  kafka_started=1; scripts/kafka.sh up >/dev/null || exit 1; \
	fi; \
	if ! scripts/postgres.sh status 2>/dev/null; then \
	  pg_started=1; scripts/postgres.sh up >/dev/null || exit 1; \
	fi; \
	env $$(scripts/kafka.sh env) go run ./internal/cmd/shareq-bench -broker both -database "$$(scripts/postgres.sh url)" -out bench-out $(BENCH_FLAGS)

# make bench-scale  internal/cmd/shareq-bench's producer and scale scenarios (cost as
#                   work grows: partitions, worker processes, brokers,
#                   topics, an idle worker, start time) on kfake, on the
#                   real broker and, for the brokers row, on the 3-node
#                   cluster of scripts/kafka-cluster.sh, with Postgres: a
#                   few minutes a backend. Starts the broker, the cluster
#                   and Postgres if they are not running and stops only
#                   what it started. BENCH_FLAGS=-quick for a short run.
#                   See BENCHMARKS.md section 9.
.PHONY: bench-scale
bench-scale:
	@kafka_started=; cluster_started=; pg_started=; \
	stop_started() { \
	  if [ -n "$$kafka_started" ]; then scripts/kafka.sh down; fi; \
	  if [ -n "$$cluster_started" ]; then scripts/kafka-cluster.sh down; fi; \
	  if [ -n "$$pg_started" ]; then scripts/postgres.sh down; fi; \
	}; \
	trap stop_started EXIT; \
	if ! scripts/kafka.sh status 2>/dev/null; then \
	  kafka_started=1; scripts/kafka.sh up >/dev/null || exit 1; \
	fi; \
	if ! scripts/kafka-cluster.sh status 2>/dev/null; then \
	  cluster_started=1; scripts/kafka-cluster.sh up >/dev/null || exit 1; \
	fi; \
	if ! scripts/postgres.sh status 2>/dev/null; then \
	  pg_started=1; scripts/postgres.sh up >/dev/null || exit 1; \
	fi; \
	env $$(scripts/kafka.sh env) go run ./internal/cmd/shareq-bench -broker both -cluster "$$(scripts/kafka-cluster.sh seeds)" \
	  -database "$$(scripts/postgres.sh url)" -scenarios producer,scale -out bench-out $(BENCH_FLAGS)

# make bench-ab OLD=<rev> [NEW=<rev>] [NEW_PATCH=<file>] [ROUNDS=3] [BENCH_FLAGS=...]
#                 scripts/bench-ab.sh: shareq-bench at OLD and at NEW (default:
#                 the working tree; NEW_PATCH applied to it) in turns, ROUNDS runs each, then their
#                 medians side by side and NEW's over OLD's. BENCH_FLAGS
#                 default to the overhead scenario on the test broker (its
#                 CPU too). Starts the broker if it is not running and stops
#                 it only if it started it. See BENCHMARKS.md, "Measuring a
#                 change".
.PHONY: bench-ab
bench-ab:
	@if [ -z "$(OLD)" ]; then echo "make bench-ab: set OLD to the revision to compare with, e.g. OLD=HEAD~1" >&2; exit 2; fi; \
	kafka_started=; \
	stop_started() { if [ -n "$$kafka_started" ]; then scripts/kafka.sh down; fi; }; \
	trap stop_started EXIT; \
	if ! scripts/kafka.sh status 2>/dev/null; then \
	  kafka_started=1; scripts/kafka.sh up >/dev/null || exit 1; \
	fi; \
	ROUNDS="$(ROUNDS)" NEW_PATCH="$(NEW_PATCH)" bash scripts/bench-ab.sh "$(OLD)" $(NEW) $(if $(BENCH_FLAGS),-- $(BENCH_FLAGS))

# make soak  the chaos soak (internal/cmd/shareq-soak, see RELIABILITY.md): worker
#            processes on the real test broker, then on a 3-node cluster
#            (scripts/kafka-cluster.sh), with Postgres; workers, brokers and
#            Postgres are killed and restarted while they work, then every
#            job is checked to have run exactly once or been parked; between
#            the two phases, the overload phase (make soak-overload). About 13
#            minutes; stops every process it started. SOAK_FLAGS=-short
#            for the 2-minute run that make test does; -own-broker to leave
#            the shared test broker alone; -spare-deliveries 0 to run on
#            the broker's delivery limit alone (a SIGKILL on a job's last
#            delivery then loses it, RELIABILITY.md issue 1).
.PHONY: soak
soak:
	go run ./internal/cmd/shareq-soak $(SOAK_FLAGS)

# make soak-overload   the soak's overload phase alone (RELIABILITY.md,
#                      "Overload"): jobs at 10x the workers' measured rate
#                      until the lag stands for 90 s of work, then the lag
#                      must drain; peak RSS against MaxBytesInHand, no
#                      goroutine or connection growth. About 3 minutes.
# make soak-endurance  the single-broker phase's jobs and faults over and
#                      over for SOAK_DURATION (default 1h), with the
#                      sampler: the slopes of goroutines, fds, connections
#                      and RSS per hour of a worker never signalled. Both
#                      take SOAK_FLAGS (e.g. -own-broker).
SOAK_DURATION ?= 1h
.PHONY: soak-overload soak-endurance
soak-overload:
	go run ./internal/cmd/shareq-soak -overload $(SOAK_FLAGS)
soak-endurance:
	go run ./internal/cmd/shareq-soak -duration $(SOAK_DURATION) $(SOAK_FLAGS)

# make soak-broker-probe  Apache Kafka alone, no shareq code: can a share
#                      partition stop delivering after a broker crash? A
#                      private one-node broker (SOAK_FLAGS=-own-broker-port-base
#                      N; default 29192), a share-group member speaking the
#                      protocol itself, records held across a SIGKILL and a
#                      restart; prints STALLED or OK per variant
#                      (internal/cmd/shareq-soak/broker_probe.go). About 8 minutes.
#                      SOAK_FLAGS=-probe-remedies leave-5s,reconnect-2s,...
#                      tries client moves on each stall instead of the freeing
#                      restart (broker_probe_remedy.go; RELIABILITY.md).
.PHONY: soak-broker-probe
soak-broker-probe:
	go run ./internal/cmd/shareq-soak -broker-probe $(SOAK_FLAGS)

# make scheduler-soak  the periodic scheduler over minutes: three scheduler
#                      processes (the scheduler's test binary re-executed),
#                      the active one SIGKILLed every 15 s and restarted
#                      (every third fault a SIGSTOP instead, and a SIGCONT
#                      once another process has fired), then every firing
#                      checked to be in the outbox once, and the missed
#                      ones to be what each policy says
#                      (TestKilledAndFrozenSchedulerProcesses;
#                      RELIABILITY.md).
#                      SCHEDULER_SOAK=3m by default (SCHEDULER_SOAK_TIMEOUT
#                      30m bounds the run); make test runs a 12 s version.
#                      Starts Postgres if it is not running, and stops it
#                      then.
SCHEDULER_SOAK ?= 3m
SCHEDULER_SOAK_TIMEOUT ?= 30m
.PHONY: scheduler-soak
scheduler-soak:
	@pg_started=; \
	trap 'if [ -n "$$pg_started" ]; then scripts/postgres.sh down; fi' EXIT; \
	if ! scripts/postgres.sh status 2>/dev/null; then \
	  pg_started=1; scripts/postgres.sh up >/dev/null || exit 1; \
	fi; \
	SHAREQ_SCHEDULER_SOAK=$(SCHEDULER_SOAK) SHAREQ_TEST_DATABASE_URL="$$(scripts/postgres.sh url)" \
	  go test -race -count=1 -timeout $(SCHEDULER_SOAK_TIMEOUT) -run '^TestKilledAndFrozenSchedulerProcesses$$' -v ./scheduler/
