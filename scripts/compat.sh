#!/usr/bin/env bash
# make compat: the Kafka suite (every package whose tests reach Kafka
# through internal/kafkatest, with real Postgres) on each older Apache
# Kafka release shareq supports, KAFKA_COMPAT_VERSIONS in versions.env.
# Each runs on a broker of its own beside the test broker (ports
# KAFKA_COMPAT_PORT and KAFKA_COMPAT_CONTROLLER_PORT), started clean and
# stopped after its run; Postgres is reused or started and stopped like
# make test does. Tests that need a newer broker's feature read it from
# kafkatest.Cluster and check what the older broker does instead (a
# clear error, or the feature off): docs/compatibility.md.
#
# Logs: .cache/test-logs/compat-<version>.log.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo_root"
# shellcheck source=env.sh source-path=SCRIPTDIR
. scripts/env.sh
# shellcheck source=testlib.sh source-path=SCRIPTDIR
. scripts/testlib.sh

cache_dir=${SHAREQ_CACHE_DIR:-$repo_root/.cache}
compat_broker() {
  KAFKA_VERSION=$1 KAFKA_PORT=$KAFKA_COMPAT_PORT KAFKA_CONTROLLER_PORT=$KAFKA_COMPAT_CONTROLLER_PORT \
    KAFKA_RUN_DIR=$cache_dir/kafka-run-compat KAFKA_PID_FILE=$cache_dir/kafka-compat.pid \
    scripts/kafka.sh "${@:2}"
}
running=
cleanup() {
  if [[ -n $running ]]; then compat_broker "$running" down || true; fi
  stop_started
}
trap cleanup EXIT

say "services"
ensure postgres
SHAREQ_TEST_DATABASE_URL=$(scripts/postgres.sh url)
export SHAREQ_TEST_DATABASE_URL
# The console's browser test (internal/consolebrowser) runs in make test;
# here, on the older releases, its packages' other tests do not need it.
module_list patterns
kafka_packages all_kafka_pkgs "${patterns[@]}"
kafka_pkgs=()
for p in "${all_kafka_pkgs[@]}"; do
  [[ $p == github.com/shareq/shareq/internal/consolebrowser ]] || kafka_pkgs+=("$p")
done

IFS=, read -r -a versions <<<"$KAFKA_COMPAT_VERSIONS"
for v in "${versions[@]}"; do
  say "Kafka suite on Apache Kafka $v (127.0.0.1:$KAFKA_COMPAT_PORT)"
  running=$v
  compat_broker "$v" up --fresh >/dev/null
  start=$SECONDS
  SHAREQ_TEST_BROKERS=127.0.0.1:$KAFKA_COMPAT_PORT gotest "compat-$v" -skip '^TestSecure(CLI|RelayCommand|Clients|ConnectErrors)$' "${kafka_pkgs[@]}"
  echo "Kafka $v: $((SECONDS - start)) s"
  compat_broker "$v" down
  running=
done

say "total (compat: ${versions[*]})"
echo "$passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 ]]
