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
logs=.cache/test-logs
mkdir -p "$logs"

started=()
cleanup() {
  local s
  for s in "${started[@]}"; do
    "scripts/$s.sh" down || true
  done
}
trap cleanup EXIT

say() { printf '\n== %s\n' "$*"; }

# ensure NAME: reuse a running service, else start it and stop it at exit.
ensure() {
  if "scripts/$1.sh" status >/dev/null 2>&1; then
    echo "$1: reusing the running instance"
  else
    started+=("$1")
    "scripts/$1.sh" up
  fi
}

# gotest LABEL ARGS...: run go test verbosely into a log, show the result
# lines and failures, and add to the pass/fail counts.
passed=0 failed=0 skipped=0
gotest() {
  local label=$1 log="$logs/$1.log" rc=0
  shift
  go test -race -count=1 -v "$@" >"$log" 2>&1 || rc=$?
  # Package results, failed tests and what the failing tests said.
  grep -E '^(ok|FAIL|panic:)|^\s*--- FAIL|^\s+[A-Za-z0-9_]+_test\.go:[0-9]+: ' "$log" | grep -v '^=== ' || true
  local p f s
  p=$(grep -cE '^\s*--- PASS' "$log" || true)
  f=$(grep -cE '^\s*--- FAIL' "$log" || true)
  s=$(grep -cE '^\s*--- SKIP' "$log" || true)
  echo "$label: $p passed, $f failed, $s skipped (log: $log)"
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
  if [[ $rc -ne 0 && $f -eq 0 ]]; then
    # A build failure, panic or timeout fails no named test; count it.
    failed=$((failed + 1))
    tail -40 "$log"
  fi
}

# Every module of go.work (scripts/modules.sh): the root's ./... alone
# would skip the nested ones.
mapfile -t patterns < <(scripts/modules.sh)
mapfile -t module_dirs < <(scripts/modules.sh -dirs)

say "go vet, and every module on its own (GOWORK=off: its go.mod, replace directives and go.sum, tidy)"
go vet "${patterns[@]}"
for d in "${module_dirs[@]}"; do
  if ! GOWORK=off go -C "$d" mod tidy -diff >/dev/null; then
    echo "$d: go.mod or go.sum is not tidy; run: (cd $d && GOWORK=off go mod tidy)"
    GOWORK=off go -C "$d" mod tidy -diff || true
    exit 1
  fi
  GOWORK=off go -C "$d" vet ./...
done

say "services"
ensure postgres
SHAREQ_TEST_DATABASE_URL=$(scripts/postgres.sh url)
export SHAREQ_TEST_DATABASE_URL
real=${SHAREQ_TEST_REAL:-1}
if [[ ${CI:-} == true ]]; then real=1; fi
if [[ $real == 1 ]]; then
  ensure kafka
fi

say "all tests, Kafka suite on kfake"
SHAREQ_TEST_BROKERS=kfake gotest kfake "${patterns[@]}"

if [[ $real == 1 ]]; then
  # Packages whose tests reach Kafka through internal/kafkatest.
  mapfile -t kafka_pkgs < <(go list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' "${patterns[@]}" |
    awk '/internal\/kafkatest/ {print $1}')
  say "Kafka suite on Apache Kafka $KAFKA_VERSION (127.0.0.1:$KAFKA_PORT): ${kafka_pkgs[*]}"
  SHAREQ_TEST_BROKERS=127.0.0.1:$KAFKA_PORT gotest kafka "${kafka_pkgs[@]}"
fi

# --- short chaos soak (cmd/shareq-soak -short; RELIABILITY.md) -------------
# Two worker processes against the broker and Postgres above, with one
# SIGKILL, one SIGTERM, one Postgres restart and one in-place broker restart
# that keeps the broker's data; then every job must have run exactly once
# or been parked. About two minutes; counts as one test. SHAREQ_TEST_SOAK=0
# skips it. -spare-deliveries 5 is the configuration RELIABILITY.md
# recommends (group limit 10, parked on delivery 5): a SIGKILL that lands
# on a poison job's last delivery would otherwise lose it (issue 1, the
# crash case no worker can fix), and fail the run at random.
if [[ $real == 1 && ${SHAREQ_TEST_SOAK:-1} == 1 ]]; then
  say "short chaos soak (cmd/shareq-soak -short)"
  soak_log="$logs/soak.log"
  if go run ./cmd/shareq-soak -short -spare-deliveries 5 -duration-limit 5m >"$soak_log" 2>&1; then
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
