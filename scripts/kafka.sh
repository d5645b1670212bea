#!/usr/bin/env bash
# Runs a single-node Apache Kafka broker (KRaft, combined broker+controller)
# for the integration tests, without Docker: the broker jars come from Maven
# and the JVM runs straight from them.
#
#   scripts/kafka.sh up [--fresh]  start (clean data) or reuse a healthy broker
#   scripts/kafka.sh down          stop it (idempotent)
#   scripts/kafka.sh status        exit 0 if running and serving, else 1
#   scripts/kafka.sh logs [-f|N]   tail the server log (follow, or last N lines)
#   scripts/kafka.sh env           print SHAREQ_TEST_KAFKA=host:port
#   scripts/kafka.sh jars          only fetch the broker jars (KAFKA_VERSION)
#
# Versions and ports: scripts/versions.env. Broker settings:
# scripts/kafka/server.properties. Everything it writes is under .cache/ at
# the repository root:
#   .cache/kafka-<version>/libs   the broker classpath (kept between runs)
#   .cache/kafka-run/             server.properties, data, server.log (wiped
#                                 by every `up` that starts a broker)
#   .cache/kafka.pid              pid of the broker this script started
#
# Environment: SHAREQ_CACHE_DIR (default <repo>/.cache), KAFKA_START_TIMEOUT
# (seconds, default 90), KAFKA_JAVA_OPTS (extra JVM flags); KAFKA_RUN_DIR and
# KAFKA_PID_FILE, with other ports, run a second broker beside the first
# (scripts/compat.sh does).
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$script_dir/.." && pwd)
# shellcheck source=env.sh source-path=SCRIPTDIR
. "$script_dir/env.sh"

cache_dir=${SHAREQ_CACHE_DIR:-$repo_root/.cache}
jars_dir=$cache_dir/kafka-$KAFKA_VERSION
libs_dir=$jars_dir/libs
run_dir=${KAFKA_RUN_DIR:-$cache_dir/kafka-run}
pid_file=${KAFKA_PID_FILE:-$cache_dir/kafka.pid}
server_log=$run_dir/server.log
start_timeout=${KAFKA_START_TIMEOUT:-90}
stop_timeout=30

log() { printf 'kafka.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# shellcheck source=kafka/common.sh source-path=SCRIPTDIR
. "$script_dir/kafka/common.sh"

# broker_pid: print the pid from the pid file if that process is still the
# broker this script started (guards against a recycled pid); else fail.
broker_pid() { pid_running "$pid_file" "$run_dir/server.properties"; }

# right_version: the broker this script started runs KAFKA_VERSION's jars
# (its classpath is $libs_dir, which names the version).
right_version() {
  local pid
  pid=$(broker_pid) || return 1
  [[ $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) == *"$libs_dir/*"* ]]
}

# healthy: our broker runs KAFKA_VERSION, finished starting and accepts
# connections.
healthy() {
  right_version &&
    grep -q 'Kafka Server started' "$server_log" 2>/dev/null &&
    port_open "$KAFKA_PORT"
}

print_env() {
  printf 'SHAREQ_TEST_KAFKA=127.0.0.1:%s\n' "$KAFKA_PORT"
}

cmd_down() {
  local pid
  if ! pid=$(broker_pid); then
    rm -f "$pid_file"
    log "not running"
    return 0
  fi
  log "stopping broker (pid $pid)"
  stop_pid "$pid" "$stop_timeout"
  rm -f "$pid_file"
  log "stopped"
}

cmd_up() {
  local fresh=false cluster_id pid deadline p
  case ${1:-} in
    --fresh) fresh=true ;;
    "") ;;
    *) die "usage: $0 up [--fresh]" ;;
  esac

  if broker_pid >/dev/null; then
    if ! $fresh && healthy; then
      log "Kafka $KAFKA_VERSION already running (pid $(<"$pid_file")) on 127.0.0.1:$KAFKA_PORT; 'up --fresh' restarts it with clean data"
      print_env
      return 0
    fi
    cmd_down
  fi
  rm -f "$pid_file"
  for p in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT"; do
    if port_open "$p"; then
      die "port $p on 127.0.0.1 is in use by a process this script did not start"
    fi
  done
  command -v java >/dev/null || die "java not found (install a JDK 17+)"

  fetch_jars

  # Tests want a clean broker: new data directory and cluster id every time.
  rm -rf "$run_dir"
  mkdir -p "$run_dir"
  sed -e "s|@KAFKA_PORT@|$KAFKA_PORT|g" \
    -e "s|@KAFKA_CONTROLLER_PORT@|$KAFKA_CONTROLLER_PORT|g" \
    -e "s|@DATA_DIR@|$run_dir|g" \
    "$script_dir/kafka/server.properties" >"$run_dir/server.properties"

  # StorageTool format runs without a log4j2 config (its warnings go to
  # format.log) and with the C1 JIT only, which roughly halves its start-up.
  cluster_id=$(new_cluster_id)
  if ! java -XX:TieredStopAtLevel=1 -cp "$libs_dir/*" \
    kafka.tools.StorageTool format --standalone \
    --cluster-id "$cluster_id" --config "$run_dir/server.properties" \
    </dev/null >>"$run_dir/format.log" 2>&1; then
    cat "$run_dir/format.log" >&2
    die "formatting the broker storage failed"
  fi

  # setsid: own session, so the broker outlives this shell and its terminal
  # or CI step. All three standard streams are redirected so a caller that
  # reads our output through a pipe does not wait for the broker to exit.
  # (The word splitting of KAFKA_JAVA_OPTS is intended.)
  # shellcheck disable=SC2086
  setsid java -Xmx512m -Xms256m ${KAFKA_JAVA_OPTS:-} \
    -Dkafka.logs.dir="$run_dir" \
    -Dlog4j2.configurationFile="$script_dir/kafka/log4j2.properties" \
    -cp "$libs_dir/*" \
    kafka.Kafka "$run_dir/server.properties" \
    </dev/null >"$run_dir/kafka.out" 2>&1 &
  pid=$!
  printf '%s\n' "$pid" >"$pid_file"
  log "starting broker (pid $pid), waiting up to ${start_timeout}s"

  deadline=$((SECONDS + start_timeout))
  until grep -q 'Kafka Server started' "$server_log" 2>/dev/null && port_open "$KAFKA_PORT"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$pid_file"
      tail -n 40 "$server_log" "$run_dir/kafka.out" >&2 2>/dev/null || true
      die "broker exited during start-up (logs above, in $run_dir)"
    fi
    if ((SECONDS >= deadline)); then
      tail -n 40 "$server_log" "$run_dir/kafka.out" >&2 2>/dev/null || true
      cmd_down
      die "broker did not start within ${start_timeout}s (logs above, in $run_dir)"
    fi
    sleep 0.25
  done
  log "Kafka $KAFKA_VERSION ready on 127.0.0.1:$KAFKA_PORT"
  print_env
}

cmd_status() {
  local pid
  if healthy; then
    pid=$(<"$pid_file")
    log "running (pid $pid) on 127.0.0.1:$KAFKA_PORT"
    return 0
  fi
  if pid=$(broker_pid) && ! right_version; then
    log "process $pid runs another Kafka version than $KAFKA_VERSION ('up' replaces it)"
  elif pid=$(broker_pid); then
    log "process $pid exists but is not serving on 127.0.0.1:$KAFKA_PORT"
  else
    log "not running"
  fi
  return 1
}

cmd_logs() { show_log "$server_log" "$@"; }

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  logs) shift; cmd_logs "$@" ;;
  env) print_env ;;
  jars) fetch_jars; log "Kafka $KAFKA_VERSION jars in $libs_dir" ;;
  *)
    echo "usage: $0 up [--fresh] | down | status | logs [-f|N] | env | jars" >&2
    exit 2
    ;;
esac
