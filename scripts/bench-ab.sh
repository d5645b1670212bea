#!/usr/bin/env bash
# Runs internal/cmd/shareq-bench for two revisions in turns and prints
# their figures side by side (shareq-bench compare): each revision's
# median, range and run count, and the new median over the old. On a
# small machine that shares its cores with the broker a figure drifts
# 5-15 % between runs and days; only runs in turns, on the same broker,
# tell such a change from noise (BENCHMARKS.md, "Measuring a change").
#
#   scripts/bench-ab.sh OLD [NEW] [-- shareq-bench flags]
#
# OLD and NEW are git revisions; NEW defaults to the working tree as it
# is (uncommitted changes included). ROUNDS (default 3) is the number of
# runs of each; the order alternates each round (old then new, new then
# old) so that neither always runs on a broker the other warmed. The
# flags go to every run (default: -scenarios overhead on the broker of
# scripts/kafka.sh, its process's CPU measured too). Everything lands in
# .cache/ab/: the builds, each run's -out directory and log, and
# compare.txt. NEW_PATCH, a patch file, is applied to NEW's checkout
# (NEW then defaults to HEAD): a measurement-only change kept as a
# patch (docs/bench/*.patch) runs without being committed. make bench-ab
# wraps it and starts the broker if needed.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo_root"

usage() {
	echo "usage: scripts/bench-ab.sh OLD [NEW] [-- shareq-bench flags]" >&2
	exit 2
}
[ $# -ge 1 ] || usage
old_rev=$1
shift
new_rev=
if [ $# -ge 1 ] && [ "$1" != "--" ]; then
	new_rev=$1
	shift
fi
if [ $# -ge 1 ]; then
	[ "$1" = "--" ] || usage
	shift
fi
flags=("$@")
if [ ${#flags[@]} -eq 0 ]; then
	flags=(-broker 127.0.0.1:19092 -scenarios overhead)
	if [ -f .cache/kafka.pid ]; then
		flags+=(-broker-pid "$(cat .cache/kafka.pid)")
	fi
fi
new_patch=${NEW_PATCH:-}
if [ -n "$new_patch" ]; then
	new_patch=$(cd "$(dirname "$new_patch")" && pwd)/$(basename "$new_patch")
	new_rev=${new_rev:-HEAD}
fi
rounds=${ROUNDS:-3}
case $rounds in
'' | *[!0-9]* | 0)
	echo "bench-ab: ROUNDS=$rounds: want a whole number of 1 or more" >&2
	exit 2
	;;
esac

ab=.cache/ab
rm -rf "$ab"
mkdir -p "$ab"
worktrees=()
cleanup() {
	for wt in "${worktrees[@]}"; do
		git worktree remove --force "$wt" >/dev/null 2>&1 || true
	done
}
trap cleanup EXIT

# build REV OUT [PATCH]: builds shareq-bench at REV (empty: the working
# tree), with PATCH applied if given, into OUT.
build() {
	local rev=$1 out=$2 patch=${3:-} src=$repo_root
	if [ -n "$rev" ]; then
		src=$repo_root/$ab/wt-$(basename "$out" .bin)
		git worktree add --detach "$src" "$rev" >/dev/null 2>&1 || {
			echo "bench-ab: cannot check out $rev" >&2
			exit 1
		}
		worktrees+=("$src")
	fi
	if [ -n "$patch" ]; then
		git -C "$src" apply "$patch" || {
			echo "bench-ab: $patch does not apply to $rev" >&2
			exit 1
		}
	fi
	(cd "$src/internal/cmd/shareq-bench" && go build -o "$repo_root/$out" .)
}

echo "bench-ab: building $old_rev and ${new_rev:-the working tree}${new_patch:+ with $new_patch}" >&2
build "$old_rev" "$ab/old.bin"
build "$new_rev" "$ab/new.bin" "$new_patch"
# compare comes from the working tree's build: either revision may be
# older than it.
compare_bin=$ab/new.bin
if [ -n "$new_rev" ]; then
	build "" "$ab/tool.bin"
	compare_bin=$ab/tool.bin
fi

old_dirs=()
new_dirs=()
for ((i = 1; i <= rounds; i++)); do
	order=(old new)
	if ((i % 2 == 0)); then
		order=(new old)
	fi
	for which in "${order[@]}"; do
		dir=$ab/$which-$i
		echo "bench-ab: round $i of $rounds: $which" >&2
		"$ab/$which.bin" "${flags[@]}" -out "$dir" >"$dir.log" 2>&1 || {
			echo "bench-ab: the $which build's run $i failed; its log:" >&2
			tail -n 20 "$dir.log" >&2
			exit 1
		}
		if [ "$which" = old ]; then
			old_dirs+=("$dir")
		else
			new_dirs+=("$dir")
		fi
	done
done

join() {
	local IFS=,
	echo "$*"
}
"$compare_bin" compare "old=$(join "${old_dirs[@]}")" "new=$(join "${new_dirs[@]}")" | tee "$ab/compare.txt"
echo "bench-ab: $old_rev against ${new_rev:-the working tree}, $rounds runs each in turns; $ab/compare.txt" >&2
