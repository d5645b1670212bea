#!/usr/bin/env bash
# The repository's Go modules (go.work lists them all; see
# docs/installing.md, "Modules"). Prints the package pattern of each, ./... for the root and
# ./<dir>/... for the others, for go vet and go test run from the root in
# workspace mode; with -dirs, prints their directories instead. Fails
# when a go.mod in the tree is missing from go.work, so that no module is
# left out of make test.
#
# It reads go.work's use lines (go work edit -json), not the module graph
# (go list -m), and fails with the go command's error rather than print
# nothing: a caller reading it through mapfile < <(...) cannot see its
# exit code, and an empty list made make test run no Kafka test at all
# (CI of 1158b57).
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo_root"

if ! work=$(go work edit -json "$repo_root/go.work" 2>&1); then
  echo "modules.sh: go work edit -json go.work failed: $work" >&2
  exit 1
fi
mapfile -t dirs < <(printf '%s\n' "$work" | sed -n 's/^[[:space:]]*"DiskPath": "\(.*\)",\{0,1\}$/\1/p' | sed 's|/$||')
if [[ ${#dirs[@]} -eq 0 || ${dirs[0]} != . ]]; then
  echo "modules.sh: go.work's use list does not start with the root module (.): ${dirs[*]:-empty}" >&2
  exit 1
fi
mapfile -t found < <(find . -name go.mod -not -path './.cache/*' -not -path '*/testdata/*' -printf '%h\n' | sort)
for d in "${found[@]}"; do
  if ! printf '%s\n' "${dirs[@]}" | grep -qxF "$d"; then
    echo "modules.sh: $d/go.mod is not in go.work; add it: go work use $d" >&2
    exit 1
  fi
done

if [[ ${1:-} == -dirs ]]; then
  printf '%s\n' "${dirs[@]}"
else
  printf '%s/...\n' "${dirs[@]}"
fi
