#!/usr/bin/env bash
# The repository's Go modules (go.work lists them all; see README.md,
# "Modules"). Prints the package pattern of each, ./... for the root and
# ./<dir>/... for the others, for go vet and go test run from the root in
# workspace mode; with -dirs, prints their directories instead. Fails
# when a go.mod in the tree is missing from go.work, so that no module is
# left out of make test.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo_root"

mapfile -t dirs < <(GOWORK="$repo_root/go.work" go list -m -f '{{.Dir}}' | sed "s|^$repo_root\$|.|; s|^$repo_root/|./|")
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
