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

# module_list VAR [-dirs]: scripts/modules.sh's lines into the array VAR,
# failing the script when it fails or lists nothing (mapfile < <(...)
# would hide both).
module_list() {
  local -n _into=$1
  local out
  out=$(scripts/modules.sh "${@:2}") || exit 1
  mapfile -t _into <<<"$out"
  if [[ -z $out || ${#_into[@]} -eq 0 ]]; then
    echo "testlib.sh: scripts/modules.sh listed no module" >&2
    exit 1
  fi
}

# kafka_packages VAR PATTERN...: the packages matching the patterns whose
# tests reach Kafka through internal/kafkatest, into the array VAR;
# failing the script when go list fails or finds none (a Kafka pass over
# no package would pass having run nothing).
kafka_packages() {
  local -n _pkgs=$1
  local out
  out=$(go list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' "${@:2}") || exit 1
  mapfile -t _pkgs < <(awk '/internal\/kafkatest/ {print $1}' <<<"$out")
  if [[ ${#_pkgs[@]} -eq 0 ]]; then
    echo "testlib.sh: no package's tests import internal/kafkatest: the Kafka pass would run nothing" >&2
    exit 1
  fi
}
