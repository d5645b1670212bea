# Sourced by the scripts that need tools beyond bash, Go and Java; the
# sourcing script defines log and die.
# shellcheck shell=bash

# ensure_openssl: openssl makes the throw-away test certificates; install it
# with apt-get (as root) when it is missing, as for postgresql.
ensure_openssl() {
  command -v openssl >/dev/null && return 0
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    log "installing openssl with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q openssl </dev/null >&2 ||
      { apt-get update -q >&2 && apt-get install -y -q openssl </dev/null >&2; } || true
  fi
  command -v openssl >/dev/null || die "openssl not found; as root run: apt-get install -y openssl"
}

# ensure_chromium: the console's browser test (internal/consolebrowser) drives
# Debian's chromium headless; install it with apt-get (as root) when it is
# missing, as for postgresql.
ensure_chromium() {
  command -v chromium >/dev/null && return 0
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    log "installing chromium with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends chromium </dev/null >&2 ||
      { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends chromium </dev/null >&2; } || true
  fi
  command -v chromium >/dev/null || die "chromium not found; as root run: apt-get install -y chromium"
}
