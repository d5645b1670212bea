# Functions shared by scripts/test.sh (make test) and scripts/compat.sh
# (make compat). Source after cd to the repository root; logs go to
# $logs, counts add up in passed/failed/skipped.
# shellcheck shell=bash

logs=${logs:-.cache/test-logs}
mkdir -p "$logs"
started=()
passed=0 failed=0 skipped=0

# stop_started: stop the services this script started, newest first.
stop_started() {
  local i
  for ((i = ${#started[@]} - 1; i >= 0; i--)); do
    "scripts/${started[i]}.sh" down || true
  done
}

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
gotest() {
  local label=$1 log="$logs/$1.log" rc=0
  shift
  go test -race -count=1 -v "$@" >"$log" 2>&1 || rc=$?
  # Package results, failed tests and what the failing tests said.
  grep -E '^(ok|FAIL|panic:)|^\s*--- FAIL|^\s+[A-Za-z0-9_]+_test\.go:[0-9]+: ' "$log" | grep -v '^=== ' || true
  local p f s
  # A benchmark that ran prints its result line (Name-N  iterations  ...).
  p=$(grep -cE '^\s*--- PASS|^Benchmark[^ ]+[[:space:]]+[0-9]+[[:space:]]' "$log" || true)
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

# bench_packages: the package directories holding a benchmark, one per
# line (./dir, every module).
bench_packages() {
  grep -rlE --include='*_test.go' --exclude-dir=.cache --exclude-dir=node_modules '^func Benchmark' . |
    xargs -n1 dirname | sort -u
}

# kafka_packages: the packages of every module (scripts/modules.sh) whose
# tests reach Kafka through internal/kafkatest, one per line.
kafka_packages() {
  local patterns
  mapfile -t patterns < <(scripts/modules.sh)
  go list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' "${patterns[@]}" |
    awk '/internal\/kafkatest/ {print $1}'
}
