#!/usr/bin/env bash
# Runs a private PostgreSQL cluster for the integration tests, without Docker
# and without touching Debian's system cluster (the one on port 5432).
#
#   scripts/postgres.sh up [--fresh]  install if needed, start (or reuse) the
#                                     cluster, create the test role and db
#   scripts/postgres.sh down          stop it (idempotent)
#   scripts/postgres.sh status        exit 0 if running and accepting
#                                     connections, else 1
#   scripts/postgres.sh url           print the connection URL for the tests
#   scripts/postgres.sh tls-url       the same over TLS, verified:
#                                     sslmode=verify-full with the cluster's
#                                     own CA (sslrootcert)
#
# TLS: `up` makes a throw-away CA and a server certificate for 127.0.0.1
# and localhost with openssl (in <cluster dir>/tls, once per cluster) and
# turns ssl on; clients choose (url: sslmode=disable, tls-url: verify-full).
#
# Port, database, user and password: scripts/versions.env. The test role owns
# the test database and may create databases (for per-test databases).
#
# Where the cluster lives: /tmp/shareq-pg-<PG_PORT> (override with
# SHAREQ_PG_DIR), not .cache/ in the checkout. Run as root, the server runs
# as the `postgres` OS user (initdb and postgres refuse to run as root), and
# that user must be able to traverse every directory above its data dir; a
# checkout under /root or in a 0700 CI workspace does not allow that, /tmp
# always does. The data is kept between `up`s; `up --fresh` wipes it.
# Run as a normal user, the server simply runs as that user.
#
# Speed over durability: fsync, synchronous_commit and full_page_writes are
# off. Never point this at data you want to keep.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=env.sh source-path=SCRIPTDIR
. "$script_dir/env.sh"

pg_root=${SHAREQ_PG_DIR:-/tmp/shareq-pg-$PG_PORT}
data_dir=$pg_root/data
sock_dir=$pg_root/run
log_file=$pg_root/postgres.log
url="postgres://$PG_USER:$PG_PASSWORD@127.0.0.1:$PG_PORT/$PG_DB?sslmode=disable"
tls_dir=$pg_root/tls
tls_url="postgres://$PG_USER:$PG_PASSWORD@127.0.0.1:$PG_PORT/$PG_DB?sslmode=verify-full&sslrootcert=$tls_dir/ca.pem"

log() { printf 'postgres.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

is_root() { [[ $(id -u) == 0 ]]; }

# shellcheck source=tools.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/tools.sh"

# as_pg CMD...: run CMD as the server's OS user, from a directory it can read.
as_pg() {
  if is_root; then
    (cd / && runuser -u postgres -- "$@")
  else
    (cd / && "$@")
  fi
}

# find_bindir: print the directory holding initdb, pg_ctl and psql. Debian
# keeps the server tools off PATH in /usr/lib/postgresql/<major>/bin. Prefer
# 15 (as in docker-compose.yml), else the newest installed major.
find_bindir() {
  local d i cands=(/usr/lib/postgresql/15/bin) dirs=(/usr/lib/postgresql/*/bin)
  # The glob lists majors (two digits since 10) oldest first: append newest first.
  for ((i = ${#dirs[@]} - 1; i >= 0; i--)); do
    cands+=("${dirs[i]}")
  done
  for d in "${cands[@]}"; do
    if [[ -x $d/initdb && -x $d/pg_ctl && -x $d/psql ]]; then
      printf '%s\n' "$d"
      return 0
    fi
  done
  return 1
}

ensure_installed() {
  if bindir=$(find_bindir); then
    return 0
  fi
  is_root || die "PostgreSQL server not installed; as root run: apt-get install -y postgresql"
  log "installing PostgreSQL with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >&2
  apt-get install -y -q postgresql </dev/null >&2
  bindir=$(find_bindir) || die "installed postgresql but found no initdb/pg_ctl under /usr/lib/postgresql"
}

running() {
  [[ -f $data_dir/PG_VERSION ]] && as_pg "$bindir/pg_ctl" -D "$data_dir" status >/dev/null 2>&1
}

accepting() {
  "$bindir/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -d postgres
}

port_open() {
  # shellcheck disable=SC2016 # $1 expands in the inner bash, on purpose.
  timeout 2 bash -c ': <>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null
}

init_cluster() {
  log "creating cluster in $data_dir"
  mkdir -p "$pg_root"
  if is_root; then
    chown postgres:postgres "$pg_root"
  fi
  chmod 700 "$pg_root"
  as_pg mkdir -p "$sock_dir"
  # Superuser `postgres` over the Unix socket (trust: only this OS user can
  # reach the socket dir); password (SCRAM) for everyone over TCP.
  as_pg "$bindir/initdb" -D "$data_dir" -U postgres -E UTF8 --no-locale \
    --auth-local=trust --auth-host=scram-sha-256 >"$pg_root/initdb.log" 2>&1 ||
    { cat "$pg_root/initdb.log" >&2; die "initdb failed"; }
  as_pg tee -a "$data_dir/postgresql.conf" >/dev/null <<EOF

# --- shareq test cluster (scripts/postgres.sh) ---
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$sock_dir'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
}

# ensure_tls: a CA and a server certificate for the cluster, and ssl on in
# its configuration (once); a running server reloads to pick it up.
ensure_tls() {
  if [[ ! -f $tls_dir/server.crt ]]; then
    ensure_openssl
    log "making a test CA and server certificate in $tls_dir"
    as_pg mkdir -p "$tls_dir"
    # shellcheck disable=SC2016 # expanded by the inner shell
    as_pg bash -c 'set -e; cd "$1"
      openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=shareq test Postgres CA" -keyout ca.key -out ca.pem
      openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server.key -out server.csr
      printf "subjectAltName=IP:127.0.0.1,DNS:localhost\n" >server.ext
      openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 -extfile server.ext -out server.crt
      chmod 600 server.key ca.key; chmod 644 ca.pem server.crt; rm -f server.csr server.ext ca.srl' _ "$tls_dir" \
      >"$pg_root/tls.log" 2>&1 || { cat "$pg_root/tls.log" >&2; die "making the TLS certificate failed"; }
    # Clients that are not the postgres user read the CA.
    chmod 755 "$pg_root" "$tls_dir" 2>/dev/null || true
  fi
  if ! grep -q '^ssl = on' "$data_dir/postgresql.conf"; then
    as_pg tee -a "$data_dir/postgresql.conf" >/dev/null <<EOF
ssl = on
ssl_cert_file = '$tls_dir/server.crt'
ssl_key_file = '$tls_dir/server.key'
EOF
    if running; then
      as_pg "$bindir/pg_ctl" -D "$data_dir" reload >/dev/null
    fi
  fi
}

# ensure_db: create the test role and database if missing, (re)set the
# password. Safe to run every time.
ensure_db() {
  as_pg "$bindir/psql" -X -q -h "$sock_dir" -p "$PG_PORT" -U postgres -d postgres \
    -v ON_ERROR_STOP=1 -v user="$PG_USER" -v pw="$PG_PASSWORD" -v db="$PG_DB" >/dev/null <<'SQL'
SELECT format('CREATE ROLE %I', :'user')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'user') \gexec
SELECT format('ALTER ROLE %I LOGIN CREATEDB PASSWORD %L', :'user', :'pw') \gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'user')
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
SQL
}

cmd_up() {
  local fresh=false
  case ${1:-} in
    --fresh) fresh=true ;;
    "") ;;
    *) die "usage: $0 up [--fresh]" ;;
  esac
  ensure_installed

  if running; then
    if ! $fresh; then
      log "already running on 127.0.0.1:$PG_PORT ($data_dir); reusing it"
      ensure_tls
      ensure_db
      printf 'SHAREQ_TEST_POSTGRES=%s\n' "$url"
      return 0
    fi
    cmd_down
  fi
  if $fresh; then
    rm -rf "$pg_root"
  fi
  if port_open "$PG_PORT"; then
    die "port $PG_PORT on 127.0.0.1 is in use by a server this script did not start"
  fi
  if [[ -e $pg_root ]] && is_root && [[ $(stat -c %U "$pg_root") != postgres ]]; then
    die "$pg_root exists but is not owned by postgres; remove it or use 'up --fresh'"
  fi
  if [[ ! -f $data_dir/PG_VERSION ]]; then
    rm -rf "$data_dir"
    init_cluster
  fi

  ensure_tls
  log "starting PostgreSQL on 127.0.0.1:$PG_PORT"
  if ! as_pg "$bindir/pg_ctl" -D "$data_dir" -l "$log_file" -w -t 60 start >/dev/null; then
    tail -n 30 "$log_file" >&2 || true
    die "PostgreSQL did not start (log: $log_file)"
  fi
  ensure_db
  log "ready"
  printf 'SHAREQ_TEST_POSTGRES=%s\n' "$url"
}

cmd_down() {
  if ! bindir=$(find_bindir) || ! running; then
    log "not running"
    return 0
  fi
  log "stopping PostgreSQL"
  as_pg "$bindir/pg_ctl" -D "$data_dir" -m fast -w -t 60 stop >/dev/null
  log "stopped"
}

cmd_status() {
  if bindir=$(find_bindir) && running && accepting; then
    log "running on 127.0.0.1:$PG_PORT ($data_dir)"
    return 0
  fi
  log "not running"
  return 1
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  url) printf '%s\n' "$url" ;;
  tls-url) printf '%s\n' "$tls_url" ;;
  *)
    echo "usage: $0 up [--fresh] | down | status | url | tls-url" >&2
    exit 2
    ;;
esac
