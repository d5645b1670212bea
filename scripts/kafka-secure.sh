#!/usr/bin/env bash
# Runs a secure single-node Apache Kafka broker (KRaft) for the security
# tests, from the same Maven jars as scripts/kafka.sh: a SASL_SSL listener
# (SCRAM-SHA-512), an mTLS listener (client certificate required), the
# StandardAuthorizer with allow.everyone.if.no.acl.found=false, and a
# PLAINTEXT listener whose clients are super users, for the tests' admin
# steps (creating topics and ACLs).
#
#   scripts/kafka-secure.sh up     start it with clean data, a new CA,
#                                  certificates and SCRAM password
#   scripts/kafka-secure.sh down   stop it (idempotent)
#   scripts/kafka-secure.sh status exit 0 if running and serving, else 1
#   scripts/kafka-secure.sh logs [-f|N]
#   scripts/kafka-secure.sh env    print SHAREQ_TEST_SECURE=<file>
#
# The CA and certificates are made with openssl and are thrown away with the
# data: nothing is downloaded but the broker jars (scripts/kafka.sh's). The
# SCRAM users KAFKA_SECURE_USER (the tests' workers) and
# KAFKA_SECURE_OPS_USER (their producers, lag collector and CLI, with
# narrower ACLs) are created when the storage is formatted (kafka-storage
# format --add-scram). Ports and names: scripts/versions.env
# (KAFKA_SECURE_*; the environment overrides them, see scripts/env.sh).
# Broker settings: scripts/kafka/secure/server.properties.
#
# Everything lives under .cache/kafka-secure/ (SHAREQ_CACHE_DIR moves
# .cache): server.properties, data, server.log, tls/ (ca.pem, the broker's
# keystore, the mTLS client's client.pem and client-key.pem, and an
# untrusted CA and client certificate, other-ca.pem, other-client*.pem),
# and secure.env: the addresses, file names, users and passwords the tests
# read (internal/kafkatest.Secure). The passwords exist only in that file
# (mode 0600) and the broker's metadata.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$script_dir/.." && pwd)
# shellcheck source=env.sh source-path=SCRIPTDIR
. "$script_dir/env.sh"

cache_dir=${SHAREQ_CACHE_DIR:-$repo_root/.cache}
jars_dir=$cache_dir/kafka-$KAFKA_VERSION
libs_dir=$jars_dir/libs
run_dir=$cache_dir/kafka-secure
tls_dir=$run_dir/tls
pid_file=$cache_dir/kafka-secure.pid
server_log=$run_dir/server.log
env_file=$run_dir/secure.env
start_timeout=${KAFKA_START_TIMEOUT:-90}
stop_timeout=30

log() { printf 'kafka-secure.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# shellcheck source=tools.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/tools.sh"

# shellcheck source=kafka/common.sh source-path=SCRIPTDIR
. "$script_dir/kafka/common.sh"

ports=("$KAFKA_SECURE_PORT" "$KAFKA_SECURE_SASL_PORT" "$KAFKA_SECURE_MTLS_PORT" "$KAFKA_SECURE_CONTROLLER_PORT")

broker_pid() { pid_running "$pid_file" "$run_dir/server.properties"; }

healthy() {
  local p
  broker_pid >/dev/null && grep -q 'Kafka Server started' "$server_log" 2>/dev/null || return 1
  for p in "$KAFKA_SECURE_PORT" "$KAFKA_SECURE_SASL_PORT" "$KAFKA_SECURE_MTLS_PORT"; do
    port_open "$p" || return 1
  done
}

print_env() { printf 'SHAREQ_TEST_SECURE=%s\n' "$env_file"; }

# make_certs: a CA, the broker's certificate and PKCS#12 keystore, the mTLS
# client's certificate, and a second CA with a client certificate of its
# own that the broker does not trust.
make_certs() {
  local pw=$1 ossl=(openssl)
  mkdir -p "$tls_dir"
  (
    cd "$tls_dir"
    "${ossl[@]}" req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=shareq test CA" \
      -keyout ca-key.pem -out ca.pem
    "${ossl[@]}" req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=shareq untrusted CA" \
      -keyout other-ca-key.pem -out other-ca.pem
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >broker.ext
    "${ossl[@]}" req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout broker-key.pem -out broker.csr
    "${ossl[@]}" x509 -req -in broker.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 \
      -extfile broker.ext -out broker.pem
    "${ossl[@]}" pkcs12 -export -in broker.pem -inkey broker-key.pem -certfile ca.pem \
      -name broker -passout "pass:$pw" -out broker.p12
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    "${ossl[@]}" req -newkey rsa:2048 -nodes -subj "/CN=$KAFKA_SECURE_MTLS_CN" -keyout client-key.pem -out client.csr
    "${ossl[@]}" x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 \
      -extfile client.ext -out client.pem
    "${ossl[@]}" req -newkey rsa:2048 -nodes -subj "/CN=$KAFKA_SECURE_MTLS_CN" -keyout other-client-key.pem -out other-client.csr
    "${ossl[@]}" x509 -req -in other-client.csr -CA other-ca.pem -CAkey other-ca-key.pem -CAcreateserial -days 2 \
      -extfile client.ext -out other-client.pem
    rm -f ./*.csr ./*.ext ./*.srl
  ) >"$run_dir/certs.log" 2>&1 || { cat "$run_dir/certs.log" >&2; die "making the test certificates with openssl failed"; }
}

cmd_down() {
  local pid
  if ! pid=$(broker_pid); then
    rm -f "$pid_file"
    log "not running"
    return 0
  fi
  log "stopping secure broker (pid $pid)"
  stop_pid "$pid" "$stop_timeout"
  rm -f "$pid_file"
  log "stopped"
}

cmd_up() {
  local cluster_id pid deadline p password ops_password keystore_pw
  if broker_pid >/dev/null; then
    cmd_down
  fi
  rm -f "$pid_file"
  for p in "${ports[@]}"; do
    if port_open "$p"; then
      die "port $p on 127.0.0.1 is in use by a process this script did not start (set KAFKA_SECURE_*_PORT)"
    fi
  done
  command -v java >/dev/null || die "java not found (install a JDK 17+)"
  ensure_openssl
  fetch_jars

  rm -rf "$run_dir"
  mkdir -p "$run_dir"
  chmod 700 "$run_dir"
  # Random, and of characters that need no quoting in a SCRAM spec or a
  # properties file.
  password=$(head -c 18 /dev/urandom | base64 | tr '+/' 'xy')
  ops_password=$(head -c 18 /dev/urandom | base64 | tr '+/' 'xy')
  keystore_pw=$(head -c 18 /dev/urandom | base64 | tr '+/' 'xy')
  make_certs "$keystore_pw"
  sed -e "s|@KAFKA_SECURE_PORT@|$KAFKA_SECURE_PORT|g" \
    -e "s|@KAFKA_SECURE_SASL_PORT@|$KAFKA_SECURE_SASL_PORT|g" \
    -e "s|@KAFKA_SECURE_MTLS_PORT@|$KAFKA_SECURE_MTLS_PORT|g" \
    -e "s|@KAFKA_SECURE_CONTROLLER_PORT@|$KAFKA_SECURE_CONTROLLER_PORT|g" \
    -e "s|@KEYSTORE_PASSWORD@|$keystore_pw|g" \
    -e "s|@DATA_DIR@|$run_dir|g" \
    "$script_dir/kafka/secure/server.properties" >"$run_dir/server.properties"

  cluster_id=$(new_cluster_id)
  if ! java -XX:TieredStopAtLevel=1 -cp "$libs_dir/*" \
    kafka.tools.StorageTool format --standalone \
    --cluster-id "$cluster_id" --config "$run_dir/server.properties" \
    --add-scram "SCRAM-SHA-512=[name=$KAFKA_SECURE_USER,password=$password]" \
    --add-scram "SCRAM-SHA-512=[name=$KAFKA_SECURE_OPS_USER,password=$ops_password]" \
    </dev/null >>"$run_dir/format.log" 2>&1; then
    cat "$run_dir/format.log" >&2
    die "formatting the broker storage failed"
  fi

  umask 077
  cat >"$env_file" <<ENV
# Written by scripts/kafka-secure.sh up; read by internal/kafkatest.Secure.
SHAREQ_SECURE_ADMIN=127.0.0.1:$KAFKA_SECURE_PORT
SHAREQ_SECURE_SASL=127.0.0.1:$KAFKA_SECURE_SASL_PORT
SHAREQ_SECURE_MTLS=127.0.0.1:$KAFKA_SECURE_MTLS_PORT
SHAREQ_SECURE_CA=$tls_dir/ca.pem
SHAREQ_SECURE_CERT=$tls_dir/client.pem
SHAREQ_SECURE_KEY=$tls_dir/client-key.pem
SHAREQ_SECURE_OTHER_CA=$tls_dir/other-ca.pem
SHAREQ_SECURE_OTHER_CERT=$tls_dir/other-client.pem
SHAREQ_SECURE_OTHER_KEY=$tls_dir/other-client-key.pem
SHAREQ_SECURE_USER=$KAFKA_SECURE_USER
SHAREQ_SECURE_PASSWORD=$password
SHAREQ_SECURE_MTLS_USER=$KAFKA_SECURE_MTLS_CN
SHAREQ_SECURE_OPS_USER=$KAFKA_SECURE_OPS_USER
SHAREQ_SECURE_OPS_PASSWORD=$ops_password
ENV
  umask 022

  # shellcheck disable=SC2086
  setsid java -Xmx512m -Xms256m ${KAFKA_JAVA_OPTS:-} \
    -Dkafka.logs.dir="$run_dir" \
    -Dlog4j2.configurationFile="$script_dir/kafka/log4j2.properties" \
    -cp "$libs_dir/*" \
    kafka.Kafka "$run_dir/server.properties" \
    </dev/null >"$run_dir/kafka.out" 2>&1 &
  pid=$!
  printf '%s\n' "$pid" >"$pid_file"
  log "starting secure broker (pid $pid), waiting up to ${start_timeout}s"

  deadline=$((SECONDS + start_timeout))
  until healthy; do
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
  log "Kafka $KAFKA_VERSION ready: PLAINTEXT (admin) 127.0.0.1:$KAFKA_SECURE_PORT, SASL_SSL 127.0.0.1:$KAFKA_SECURE_SASL_PORT, mTLS 127.0.0.1:$KAFKA_SECURE_MTLS_PORT"
  print_env
}

cmd_status() {
  if healthy; then
    log "running (pid $(<"$pid_file")) on 127.0.0.1:$KAFKA_SECURE_PORT,$KAFKA_SECURE_SASL_PORT,$KAFKA_SECURE_MTLS_PORT"
    return 0
  fi
  log "not running"
  return 1
}

cmd_logs() { show_log "$server_log" "$@"; }

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  logs) shift; cmd_logs "$@" ;;
  env) print_env ;;
  *)
    echo "usage: $0 up | down | status | logs [-f|N] | env" >&2
    exit 2
    ;;
esac
