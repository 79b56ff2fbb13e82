#!/usr/bin/env bash
# The workload bench of an earlier engine and of this checkout, run alternately (A B, B A,
# A B, ...), so that both see the same disk and the same neighbours: the way to judge a
# "no regression" target, such as p99 at 64 tasks, against an earlier version. A figure
# from a run made hours earlier is no baseline on this shared machine (bench-results/
# format-v2.md, "p99 at 64 tasks": the same engine's p99 moved 2x between two days).
#
#   bash scripts/ab-engines.sh REV [PAIRS]
#
# REV is checked out into $AB_DIR/REV (a git worktree; AB_DIR defaults to /tmp/agentwal-ab,
# outside this checkout so that cargo does not take it for a member of this workspace) and
# built with its own target directory there; PAIRS (default 4) pairs of runs follow, in one
# process each, in-process mode.
# Environment: A_BACKENDS (the earlier engine's; default agentwal,fsync-floor-group),
# B_BACKENDS (this checkout's; default agentwal,agentwal-uncompressed,fsync-floor-group),
# and AGENTWAL_BENCH_THREADS (default 8,16,64), AGENTWAL_BENCH_ROUNDS (default 9),
# AGENTWAL_BENCH_CALM_US (default 600). Prints, per T and backend, each run's median
# commits/s and p99; every run's report stays in $AB_DIR/out/.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: scripts/ab-engines.sh REV [PAIRS]}
pairs=${2:-4}
root=$PWD
ab=${AB_DIR:-/tmp/agentwal-ab}
tree=$ab/$rev
out=$ab/out
export AGENTWAL_BENCH_THREADS=${AGENTWAL_BENCH_THREADS:-8,16,64}
export AGENTWAL_BENCH_ROUNDS=${AGENTWAL_BENCH_ROUNDS:-9}
export AGENTWAL_BENCH_CALM_US=${AGENTWAL_BENCH_CALM_US:-600}
# Neither experiment is needed to compare commit latency; both take minutes.
export AGENTWAL_BENCH_LARGE_MIB=0 AGENTWAL_BENCH_INDEX_TASKS=0
a_backends=${A_BACKENDS:-agentwal,fsync-floor-group}
b_backends=${B_BACKENDS:-agentwal,agentwal-uncompressed,fsync-floor-group}

mkdir -p "$ab"
[ -d "$tree" ] || git worktree add --detach "$tree" "$rev" >/dev/null
rm -rf "$out"
mkdir -p "$out"
echo "== building $rev and this checkout"
(cd "$tree" && CARGO_TARGET_DIR="$ab/target-a" cargo bench --bench workload --no-run --quiet)
cargo bench --bench workload --no-run --quiet

# run SIDE PAIR: one run of side a (REV) or b (this checkout), each from the target
# directory it was built into above, so that no run rebuilds.
run() {
    local side=$1 i=$2 dir=$root target=${CARGO_TARGET_DIR:-$root/target} backends=$b_backends
    if [ "$side" = a ]; then dir=$tree target=$ab/target-a backends=$a_backends; fi
    (cd "$dir" && AGENTWAL_BENCH_BACKENDS=$backends AGENTWAL_BENCH_OUT="$out/$side-$i" \
        CARGO_TARGET_DIR=$target cargo bench --bench workload >"$out/$side-$i.log" 2>&1)
    echo "$side-$i done, $(uptime | sed 's/.*load/load/')"
}
for i in $(seq 1 "$pairs"); do
    if [ $((i % 2)) = 1 ]; then run a "$i"; run b "$i"; else run b "$i"; run a "$i"; fi
done

python3 - "$out" "$rev" <<'EOF'
import glob, json, statistics, sys

out, rev = sys.argv[1], sys.argv[2]
rows = {}
for path in sorted(glob.glob(f"{out}/*/workload.json")):
    side = path.split("/")[-2].split("-")[0]
    for run in json.load(open(path))["runs"]:
        r = run["rounds"]
        key = (run["threads"], side, run["backend"])
        rows.setdefault(key, []).append(
            (statistics.median(x["commits_per_s"] for x in r), statistics.median(x["p99_ms"] for x in r))
        )
print(f"\na = {rev}, b = this checkout; per run: median commits/s and median p99 over its rounds")
print("| T | side | backend | commits/s per run | p99 per run (ms) |")
print("|---:|---|---|---|---|")
for (t, side, backend), v in sorted(rows.items()):
    cps = ", ".join(f"{c / 1000:.1f}k" for c, _ in v)
    p99 = ", ".join(f"{p:.2f}" for _, p in v)
    print(f"| {t} | {side} | {backend} | {cps} | {p99} |")
EOF
