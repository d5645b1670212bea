#!/usr/bin/env bash
# Runs a multi-node Apache Kafka cluster (KRaft, every node a broker and a
# controller) on 127.0.0.1 for the chaos soak (internal/cmd/shareq-soak
# -cluster3), without Docker, from the same Maven jars as scripts/kafka.sh.
# Nodes can be stopped and started one at a time with their data kept, to
# fail a partition leader over and bring it back.
#
#   scripts/kafka-cluster.sh up [--fresh]   start (clean data) or reuse a
#                                           healthy cluster
#   scripts/kafka-cluster.sh down           stop every node (idempotent)
#   scripts/kafka-cluster.sh status         exit 0 if every node serves
#   scripts/kafka-cluster.sh stop N [--kill]  stop node N, keeping its data
#                                           (SIGTERM: controlled shutdown;
#                                           --kill: SIGKILL, a crash)
#   scripts/kafka-cluster.sh start N        start a stopped node N on its
#                                           data, wait until it serves
#   scripts/kafka-cluster.sh restart N [--kill]
#   scripts/kafka-cluster.sh pid N          print node N's pid (exit 1 if down)
#   scripts/kafka-cluster.sh seeds          print host:port,host:port,...
#   scripts/kafka-cluster.sh logs N [-f|LINES]
#
# Nodes are numbered 1..KAFKA_CLUSTER_NODES (default 3). Node N listens on
# 127.0.0.1:(KAFKA_CLUSTER_PORT_BASE + 100*N) for clients and on the next
# port for controllers: 19192/19193, 19292/19293, 19392/19393 by default,
# clear of the single test broker (19092/19093). Replication factor
# min(3, nodes) and min ISR min(2, nodes) for user and internal topics.
# Broker settings: scripts/kafka/cluster/server.properties. Everything it
# writes is under .cache/kafka-cluster/ (node-N/ holds server.properties,
# data, server.log, kafka.out and the pid file); `up` wipes it when it
# starts a cluster. A second cluster needs its own KAFKA_CLUSTER_DIR and
# KAFKA_CLUSTER_PORT_BASE (the soak's -own-broker runs a one-node one).
#
# Environment: SHAREQ_CACHE_DIR (default <repo>/.cache), KAFKA_CLUSTER_DIR
# (default $SHAREQ_CACHE_DIR/kafka-cluster), KAFKA_CLUSTER_NODES,
# KAFKA_CLUSTER_PORT_BASE (default 19092), KAFKA_START_TIMEOUT (seconds per
# wait, default 120), KAFKA_JAVA_OPTS (extra JVM flags), KAFKA_CLUSTER_HEAP
# (default 512m).
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$script_dir/.." && pwd)
# shellcheck source=env.sh source-path=SCRIPTDIR
. "$script_dir/env.sh"

cache_dir=${SHAREQ_CACHE_DIR:-$repo_root/.cache}
jars_dir=$cache_dir/kafka-$KAFKA_VERSION
libs_dir=$jars_dir/libs
cluster_dir=${KAFKA_CLUSTER_DIR:-$cache_dir/kafka-cluster}
nodes=${KAFKA_CLUSTER_NODES:-3}
port_base=${KAFKA_CLUSTER_PORT_BASE:-19092}
start_timeout=${KAFKA_START_TIMEOUT:-120}
heap=${KAFKA_CLUSTER_HEAP:-512m}
stop_timeout=30

log() { printf 'kafka-cluster.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# shellcheck source=kafka/common.sh source-path=SCRIPTDIR
. "$script_dir/kafka/common.sh"

[[ $nodes =~ ^[1-9]$ ]] || die "KAFKA_CLUSTER_NODES=$nodes: want 1..9"

node_dir() { printf '%s/node-%s\n' "$cluster_dir" "$1"; }
node_port() { printf '%s\n' $((port_base + 100 * $1)); }
node_cport() { printf '%s\n' $((port_base + 100 * $1 + 1)); }

check_node() {
  if ! [[ ${1:-} =~ ^[1-9]$ ]] || (($1 > nodes)); then
    die "node '${1:-}': want 1..$nodes"
  fi
}

# node_pid N: print node N's pid if that process is still the broker this
# script started for it (guards against a recycled pid); else fail.
node_pid() {
  local dir
  dir=$(node_dir "$1")
  pid_running "$dir/pid" "$dir/server.properties"
}

# started_since N OFFSET: node N's server.log says "Kafka Server started"
# after byte OFFSET (so an earlier start in the same log does not count).
started_since() {
  local f
  f=$(node_dir "$1")/server.log
  # grep reads to the end (no -q): grep -q would exit at the first match,
  # tail would die of SIGPIPE and pipefail fail the check on a long log.
  [[ -f $f ]] && tail -c +"$(($2 + 1))" "$f" 2>/dev/null | grep 'Kafka Server started' >/dev/null
}

log_size() {
  local f
  f=$(node_dir "$1")/server.log
  if [[ -f $f ]]; then stat -c %s "$f"; else echo 0; fi
}

node_healthy() {
  node_pid "$1" >/dev/null && started_since "$1" 0 && port_open "$(node_port "$1")"
}

seeds() {
  local i out=()
  for ((i = 1; i <= nodes; i++)); do
    out+=("127.0.0.1:$(node_port "$i")")
  done
  (IFS=,; printf '%s\n' "${out[*]}")
}

# launch N: start node N's JVM on its existing data; print nothing.
launch() {
  local dir pid
  dir=$(node_dir "$1")
  # setsid: the broker outlives this shell; every stream redirected so a
  # caller reading our output through a pipe does not wait for the broker.
  # shellcheck disable=SC2086 # KAFKA_JAVA_OPTS is split on purpose.
  setsid java -Xmx"$heap" -Xms128m ${KAFKA_JAVA_OPTS:-} \
    -Dkafka.logs.dir="$dir" \
    -Dlog4j2.configurationFile="$script_dir/kafka/log4j2.properties" \
    -cp "$libs_dir/*" \
    kafka.Kafka "$dir/server.properties" \
    </dev/null >>"$dir/kafka.out" 2>&1 &
  pid=$!
  printf '%s\n' "$pid" >"$dir/pid"
}

# wait_started N OFFSET: wait until node N logs its start after OFFSET and
# accepts connections.
wait_started() {
  local n=$1 off=$2 pid deadline dir
  dir=$(node_dir "$n")
  pid=$(<"$dir/pid")
  deadline=$((SECONDS + start_timeout))
  until started_since "$n" "$off" && port_open "$(node_port "$n")"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 30 "$dir/server.log" "$dir/kafka.out" >&2 2>/dev/null || true
      die "node $n exited during start-up (logs above, in $dir)"
    fi
    if ((SECONDS >= deadline)); then
      tail -n 30 "$dir/server.log" >&2 2>/dev/null || true
      die "node $n did not start within ${start_timeout}s (log: $dir/server.log)"
    fi
    sleep 0.25
  done
}

cmd_stop() {
  local n=$1 sig=TERM pid i
  check_node "$n"
  [[ ${2:-} == --kill ]] && sig=KILL
  if ! pid=$(node_pid "$n"); then
    log "node $n: not running"
    return 0
  fi
  log "node $n: stopping (pid $pid, SIG$sig)"
  kill -"$sig" "$pid" 2>/dev/null || true
  for ((i = 0; i < stop_timeout * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "node $n: did not stop within ${stop_timeout}s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
  fi
  rm -f "$(node_dir "$n")/pid"
  log "node $n: stopped"
}

cmd_start() {
  local n=$1 off dir
  check_node "$n"
  dir=$(node_dir "$n")
  [[ -f $dir/server.properties ]] || die "node $n has no data; run '$0 up' first"
  if node_pid "$n" >/dev/null; then
    log "node $n: already running (pid $(<"$dir/pid"))"
    return 0
  fi
  port_open "$(node_port "$n")" && die "port $(node_port "$n") is in use by a process this script did not start"
  off=$(log_size "$n")
  launch "$n"
  log "node $n: starting (pid $(<"$dir/pid")) on its existing data"
  wait_started "$n" "$off"
  log "node $n: serving on 127.0.0.1:$(node_port "$n")"
}

cmd_down() {
  local i
  for ((i = 1; i <= nodes; i++)); do
    cmd_stop "$i"
  done
}

cmd_status() {
  local i bad=0
  for ((i = 1; i <= nodes; i++)); do
    if node_healthy "$i"; then
      log "node $i: running (pid $(node_pid "$i")) on 127.0.0.1:$(node_port "$i")"
    else
      log "node $i: not serving"
      bad=1
    fi
  done
  return $bad
}

cmd_up() {
  local fresh=false i healthy=true any=false cluster_id voters dir rf min_isr p
  local -a offs=()
  case ${1:-} in
    --fresh) fresh=true ;;
    "") ;;
    *) die "usage: $0 up [--fresh]" ;;
  esac
  for ((i = 1; i <= nodes; i++)); do
    node_pid "$i" >/dev/null && any=true
    node_healthy "$i" || healthy=false
  done
  if $any && $healthy && ! $fresh; then
    log "already running on $(seeds); 'up --fresh' restarts it with clean data"
    seeds
    return 0
  fi
  $any && cmd_down
  for ((i = 1; i <= nodes; i++)); do
    for p in "$(node_port "$i")" "$(node_cport "$i")"; do
      port_open "$p" && die "port $p on 127.0.0.1 is in use by a process this script did not start"
    done
  done
  command -v java >/dev/null || die "java not found (install a JDK 17+)"
  fetch_jars

  rm -rf "$cluster_dir"
  rf=$((nodes < 3 ? nodes : 3))
  min_isr=$((nodes < 2 ? 1 : 2))
  voters=
  for ((i = 1; i <= nodes; i++)); do
    voters+="${voters:+,}$i@127.0.0.1:$(node_cport "$i")"
  done
  cluster_id=$(new_cluster_id)
  for ((i = 1; i <= nodes; i++)); do
    dir=$(node_dir "$i")
    mkdir -p "$dir"
    sed -e "s|@NODE_ID@|$i|g" \
      -e "s|@PORT@|$(node_port "$i")|g" \
      -e "s|@CONTROLLER_PORT@|$(node_cport "$i")|g" \
      -e "s|@VOTERS@|$voters|g" \
      -e "s|@RF@|$rf|g" \
      -e "s|@MIN_ISR@|$min_isr|g" \
      -e "s|@DATA_DIR@|$dir|g" \
      "$script_dir/kafka/cluster/server.properties" >"$dir/server.properties"
    # A static voter set: format takes only the cluster id.
    if ! java -XX:TieredStopAtLevel=1 -cp "$libs_dir/*" \
      kafka.tools.StorageTool format \
      --cluster-id "$cluster_id" --config "$dir/server.properties" \
      </dev/null >>"$dir/format.log" 2>&1; then
      cat "$dir/format.log" >&2
      die "formatting node $i failed"
    fi
  done
  # Start every node before waiting: the controllers need a quorum.
  for ((i = 1; i <= nodes; i++)); do
    offs[i]=$(log_size "$i")
    launch "$i"
    log "node $i: starting (pid $(<"$(node_dir "$i")/pid"))"
  done
  for ((i = 1; i <= nodes; i++)); do
    if ! (wait_started "$i" "${offs[i]}"); then
      cmd_down
      die "cluster did not start"
    fi
  done
  log "cluster ready on $(seeds) (replication factor $rf, min ISR $min_isr)"
  seeds
}

cmd_logs() {
  check_node "${1:-}"
  show_log "$(node_dir "$1")/server.log" "${2:-}"
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  stop) shift; cmd_stop "$@" ;;
  start) shift; cmd_start "${1:-}" ;;
  restart) shift; cmd_stop "$@"; cmd_start "$1" ;;
  pid) check_node "${2:-}"; node_pid "$2" ;;
  seeds) seeds ;;
  logs) shift; cmd_logs "$@" ;;
  *)
    echo "usage: $0 up [--fresh] | down | status | stop N [--kill] | start N | restart N [--kill] | pid N | seeds | logs N [-f|LINES]" >&2
    exit 2
    ;;
esac
