#!/usr/bin/env bash
# kafka-init of docker-compose.yml: creates the thumbnails example's topics
# and sets its share group's configs, then exits. Safe to run again: existing
# topics are left as they are and the configs are set to the same values.
#
# It runs in the apache/kafka image, whose tools are in /opt/kafka/bin.
# Environment: BOOTSTRAP_SERVER (default kafka:19092), KAFKA_BIN (default
# /opt/kafka/bin), INIT_TIMEOUT (seconds to wait for the broker, default 120).
#
# The names are the example's (examples/thumbnails/main.go, the dlq
# package's "<topic>.dlq", and worker.BrokerDLQTopic's "dlq.<group>");
# deploy/kafka_test.go checks that they match.
set -euo pipefail

readonly TOPIC=thumbnails
readonly PARTITIONS=6
readonly DLQ_TOPIC=thumbnails.dlq
readonly DLQ_PARTITIONS=1
readonly GROUP=thumbnails
readonly BROKER_DLQ_TOPIC=dlq.thumbnails

bootstrap=${BOOTSTRAP_SERVER:-kafka:19092}
bin=${KAFKA_BIN:-/opt/kafka/bin}
timeout=${INIT_TIMEOUT:-120}

log() { printf 'kafka-init: %s\n' "$*" >&2; }

# Compose starts this once the broker's health check passes; wait anyway, so
# the script also works on its own.
deadline=$((SECONDS + timeout))
until "$bin/kafka-topics.sh" --bootstrap-server "$bootstrap" --list >/dev/null 2>&1; do
  if ((SECONDS >= deadline)); then
    log "broker $bootstrap not reachable within ${timeout}s"
    exit 1
  fi
  log "waiting for $bootstrap"
  sleep 2
done

# create_topic NAME PARTITIONS [ARGS...]: create the topic unless it exists.
create_topic() {
  "$bin/kafka-topics.sh" --bootstrap-server "$bootstrap" --create --if-not-exists \
    --topic "$1" --partitions "$2" --replication-factor 1 "${@:3}"
}

create_topic "$TOPIC" "$PARTITIONS"
create_topic "$DLQ_TOPIC" "$DLQ_PARTITIONS"
# The share group's dead-letter topic (Kafka 4.4+, KIP-1191): the broker
# writes every record the group archives there, such as a job whose last
# delivery died with its worker. The workers find it at start and point the
# group at it (worker.BrokerDLQ).
create_topic "$BROKER_DLQ_TOPIC" "$DLQ_PARTITIONS" --config errors.deadletterqueue.group.enable=true

# Share-group configs, set before the first member joins:
#   share.auto.offset.reset=earliest       jobs produced before the workers
#                                          started are worked too (a new
#                                          group starts at the latest record
#                                          by default)
#   share.renew.acknowledge.enable=true    long jobs may renew their locks
#                                          (Kafka 4.3+; the worker checks it)
"$bin/kafka-configs.sh" --bootstrap-server "$bootstrap" \
  --entity-type groups --entity-name "$GROUP" --alter \
  --add-config share.auto.offset.reset=earliest,share.renew.acknowledge.enable=true

"$bin/kafka-topics.sh" --bootstrap-server "$bootstrap" --describe --topic "$TOPIC" >&2
"$bin/kafka-configs.sh" --bootstrap-server "$bootstrap" \
  --entity-type groups --entity-name "$GROUP" --describe >&2
log "done"
