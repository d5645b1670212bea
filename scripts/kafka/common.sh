# Functions shared by scripts/kafka.sh and scripts/kafka-cluster.sh, which
# source this file after setting script_dir, jars_dir, libs_dir and the
# versions (versions.env), and defining log and die.
# shellcheck shell=bash disable=SC2154 # the sourcing script sets jars_dir, libs_dir, script_dir

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_open() {
  # shellcheck disable=SC2016 # $1 expands in the inner bash, on purpose.
  timeout 2 bash -c ': <>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null
}

# fetch_jars: copy the broker's runtime classpath into $libs_dir with Maven,
# unless a previous run already did it for the same versions (marker file).
fetch_jars() {
  local want marker=$jars_dir/.complete tmp=$jars_dir/libs.tmp
  want="kafka=$KAFKA_VERSION log4j=$LOG4J_VERSION slf4j=$SLF4J_VERSION"
  if [[ -f $marker && $(<"$marker") == "$want" ]]; then
    return 0
  fi
  command -v mvn >/dev/null || die "mvn not found (install Maven 3.8+)"
  log "resolving Kafka $KAFKA_VERSION jars with Maven into $libs_dir"
  mkdir -p "$jars_dir"
  rm -rf "$tmp"
  if ! mvn -q -B -f "$script_dir/kafka/pom.xml" \
    dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$tmp" \
    -Dkafka.version="$KAFKA_VERSION" \
    -Dlog4j.version="$LOG4J_VERSION" \
    -Dslf4j.version="$SLF4J_VERSION" \
    </dev/null >"$jars_dir/mvn.log" 2>&1; then
    tail -n 40 "$jars_dir/mvn.log" >&2
    die "Maven could not resolve the Kafka jars (full log: $jars_dir/mvn.log)"
  fi
  # Swap in the new classpath only once it is complete.
  rm -rf "$libs_dir"
  mv "$tmp" "$libs_dir"
  printf '%s\n' "$want" >"$marker"
}

# new_cluster_id: what `StorageTool random-uuid` prints (16 random bytes,
# URL-safe base64 without padding, not starting with '-'), without paying
# for a JVM start.
new_cluster_id() {
  local id
  while :; do
    id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
    [[ $id == -* ]] || break
  done
  printf '%s\n' "$id"
}

# pid_running PIDFILE PROPERTIES: print the pid in PIDFILE if that process
# is still a broker started with PROPERTIES (guards against a recycled
# pid); else fail.
pid_running() {
  local pid cmdline
  [[ -f $1 ]] || return 1
  pid=$(<"$1")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmdline == *"kafka.Kafka $2"* ]] || return 1
  printf '%s\n' "$pid"
}

# stop_pid PID SECONDS: SIGTERM the broker PID, wait up to SECONDS for it
# to exit, then SIGKILL it and wait a moment more.
stop_pid() {
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < $2 * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  log "broker did not stop within ${2}s; killing it"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
}

# show_log FILE [-f|N]: the last 100 (or N) lines of a broker's log, or
# follow it with -f.
show_log() {
  local f=$1
  [[ -f $f ]] || die "no log yet ($f)"
  case ${2:-} in
    -f) exec tail -n 50 -F "$f" ;;
    "") tail -n 100 "$f" ;;
    *) tail -n "$2" "$f" ;;
  esac
}
