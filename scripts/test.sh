#!/usr/bin/env bash
# The project's test command (make test): vet, then every test with the
# race detector against an in-process kfake cluster, then the Kafka suite
# again against a real Apache Kafka broker. Postgres and the broker are
# installed and started here when they are not already running, and the
# ones this script started are stopped at the end.
#
# Full logs: .cache/test-logs/. SHAREQ_TEST_REAL=0 skips the real-broker pass
# (never in CI).
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo_root"
# shellcheck source=env.sh source-path=SCRIPTDIR
. scripts/env.sh
# shellcheck source=testlib.sh source-path=SCRIPTDIR
. scripts/testlib.sh
trap stop_started EXIT

# Every module of go.work (scripts/modules.sh): the root's ./... alone
# would skip the nested ones. Read once, here, where set -e sees a failure.
module_list patterns

say "go vet"
go vet "${patterns[@]}"

# Every module on its own (GOWORK=off: tidy, go vet), the published ones
# reading each other from a file:// module proxy built from the tree at
# the version they require, then a user's go get and go install of that
# version (internal/cmd/releasecheck; docs/development.md, "Module
# versions"). Network: the usual GOPROXY only, for what the module cache
# lacks.
say "every module on its own, and the release check (make release-check)"
go run ./internal/cmd/releasecheck

say "API baseline (api/shareq.txt): every feature of the published packages still there (make api rewrites it)"
go run ./internal/cmd/apicheck -check api/shareq.txt

say "services"
ensure postgres
SHAREQ_TEST_DATABASE_URL=$(scripts/postgres.sh url)
export SHAREQ_TEST_DATABASE_URL
real=${SHAREQ_TEST_REAL:-1}
if [[ ${CI:-} == true ]]; then real=1; fi
if [[ $real == 1 ]]; then
  ensure kafka
fi

# The console's test in a real browser (internal/consolebrowser) runs in both
# passes below, with Debian's chromium.
say "chromium, for the console's browser test"
(
  log() { echo "test.sh: $*" >&2; }
  die() { echo "test.sh: $*" >&2; exit 1; }
  # shellcheck source=tools.sh source-path=SCRIPTDIR
  . scripts/tools.sh
  ensure_chromium
)
export SHAREQ_TEST_BROWSER=1

say "all tests, Kafka suite on kfake"
# The tests that need the secure broker run in its own step below.
secure_only='^TestSecure(CLI|RelayCommand|Clients|ConnectErrors)$'
SHAREQ_TEST_BROKERS=kfake gotest kfake -skip "$secure_only" "${patterns[@]}"

# Benchmarks are timed by hand (BENCHMARKS.md), never here; run once each
# (-benchtime 1x) they keep building and working: one broke unseen before.
mapfile -t bench_pkgs < <(bench_packages)
say "every benchmark once (-benchtime 1x), on kfake: ${bench_pkgs[*]}"
SHAREQ_TEST_BROKERS=kfake gotest bench-1x -run '^$' -bench . -benchtime 1x "${bench_pkgs[@]}"

if [[ $real == 1 ]]; then
  # Packages whose tests reach Kafka through internal/kafkatest.
  kafka_packages kafka_pkgs "${patterns[@]}"
  say "Kafka suite on Apache Kafka $KAFKA_VERSION (127.0.0.1:$KAFKA_PORT): ${kafka_pkgs[*]}"
  SHAREQ_TEST_BROKERS=127.0.0.1:$KAFKA_PORT gotest kafka -skip "$secure_only" "${kafka_pkgs[@]}"
fi

# --- Postgres over TLS (docs/security.md) -----------------------------------
# The pgstore and outbox tests again, connecting with sslmode=verify-full
# and the test cluster's own CA; pgtest.NewPool checks each pool's
# connection is encrypted. `postgres.sh up` is idempotent and turns TLS
# on (by a reload) in a cluster reused from before it had TLS.
say "Postgres over TLS (sslmode=verify-full): pgstore, pgoutbox"
scripts/postgres.sh up >/dev/null
SHAREQ_TEST_DATABASE_URL=$(scripts/postgres.sh tls-url) gotest pg-tls ./idempotency/pgstore ./enqueue/pgoutbox
# --- end Postgres over TLS ---------------------------------------------------

# --- secure broker (scripts/kafka-secure.sh, docs/security.md) --------------
# SASL_SSL (SCRAM-SHA-512), mTLS and the StandardAuthorizer: the worker,
# CLI, dlq, enqueue and lag-collector tests named TestSecure*, left out of
# the passes above (or, for the ACL tests, run there on kfake only). This step starts its own
# broker (fresh CA, certificates and password) and stops it when done.
# SHAREQ_TEST_SECURE_RUN=0 skips it (never in CI).
if [[ $real == 1 ]] && [[ ${SHAREQ_TEST_SECURE_RUN:-1} == 1 || ${CI:-} == true ]]; then
  say "secure broker: SASL_SSL, mTLS and ACLs (scripts/kafka-secure.sh)"
  secure_began=$SECONDS
  started+=(kafka-secure)
  scripts/kafka-secure.sh up >/dev/null
  secure_env=$(scripts/kafka-secure.sh env)
  # The outbox relay among them reaches Postgres over TLS too.
  SHAREQ_TEST_SECURE=${secure_env#SHAREQ_TEST_SECURE=} SHAREQ_TEST_DATABASE_URL=$(scripts/postgres.sh tls-url) \
    gotest secure -run '^TestSecure' ./internal/secure ./cmd/shareq
  scripts/kafka-secure.sh down
  echo "secure step: $((SECONDS - secure_began))s"
fi
# --- end secure broker -------------------------------------------------------

# --- the stall heal on a private broker (worker.HealStalls; RELIABILITY.md) --
# Kafka's stalled share partition (a broker SIGKILL and restart leaves a
# partition that acquires nothing more), made on a one-node broker the test
# starts, SIGKILLs and stops on ports from SHAREQ_TEST_STALL_BROKER_PORT_BASE
# + 100 (default 27300: below Linux's ephemeral ports, 32768 and up, which the
# suites' kfake listeners and client connections take at random: the broker
# exited at start once with a base up there while the kfake suite ran), then
# freed by two workers with HealStalls on.
# About a minute.
if [[ $real == 1 ]]; then
  say "stall heal: a stalled share partition made on a private broker, freed by the workers"
  SHAREQ_TEST_STALL_BROKER_PORT_BASE=${SHAREQ_TEST_STALL_BROKER_PORT_BASE:-27300} \
    gotest stall-heal -run '^TestWorkersHealAStalledPartition$' ./worker
fi
# --- end stall heal ------------------------------------------------------------

# --- a moved group coordinator on a private 3-node cluster ------------------
# The group's coordinator's node stopped and started again, then killed and
# left down: the worker finds the new coordinator and does not go on asking
# the old one (member: findCoordinator; RELIABILITY.md). The test starts the
# cluster on ports from SHAREQ_TEST_COORDINATOR_CLUSTER_PORT_BASE + 100
# (default 27600, below the ephemeral ports, as above) and stops it. About a
# minute and a half.
if [[ $real == 1 ]]; then
  say "moved coordinator: the coordinator's node of a private 3-node cluster stopped and started, then killed"
  SHAREQ_TEST_COORDINATOR_CLUSTER_PORT_BASE=${SHAREQ_TEST_COORDINATOR_CLUSTER_PORT_BASE:-27600} \
    gotest moved-coordinator -run '^TestWorkerFollowsAMovedCoordinator$' ./worker
fi
# --- end moved coordinator -----------------------------------------------------

# --- short chaos soak (internal/cmd/shareq-soak -short; RELIABILITY.md) ----
# Two worker processes against the broker and Postgres above, with one
# SIGKILL, one SIGTERM, one Postgres restart and one in-place broker restart
# that keeps the broker's data; then every job must have run exactly once
# or been parked. About two minutes; counts as one test. SHAREQ_TEST_SOAK=0
# skips it. -spare-deliveries 5 is the configuration RELIABILITY.md
# recommends (group limit 10, parked on delivery 5): a SIGKILL that lands
# on a poison job's last delivery would otherwise lose it (issue 1, the
# crash case no worker can fix), and fail the run at random.
if [[ $real == 1 && ${SHAREQ_TEST_SOAK:-1} == 1 ]]; then
  say "short chaos soak (internal/cmd/shareq-soak -short)"
  soak_log="$logs/soak.log"
  if go run ./internal/cmd/shareq-soak -short -spare-deliveries 5 -duration-limit 5m >"$soak_log" 2>&1; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
  sed -n '/^--- report/,/^RESULT/p' "$soak_log"
  grep -E '^(WARNING|shareq-soak: .* (PASS|FAIL|INCOMPLETE))' "$soak_log" || true
  echo "soak log: $soak_log"
fi
# --- end short chaos soak ----------------------------------------------------

say "total"
echo "$passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 ]]
