# Sourced by the scripts in this directory: loads scripts/versions.env,
# keeping any of its variables already set in the environment, so that
#   KAFKA_VERSION=4.2.2 scripts/kafka.sh up
#   KAFKA_PORT=29092 KAFKA_CONTROLLER_PORT=29093 PG_PORT=25432 make test
# run another broker version or a second copy of the services beside the
# first (make compat does the former).
_shareq_env_file=$(dirname "${BASH_SOURCE[0]}")/versions.env
while IFS='=' read -r _k _v; do
  [[ $_k =~ ^[A-Z][A-Z0-9_]*$ ]] || continue
  if [[ -z ${!_k:-} ]]; then
    printf -v "$_k" '%s' "$_v"
  fi
  export "${_k?}"
done <"$_shareq_env_file"
unset _k _v _shareq_env_file
