#!/usr/bin/env bash
# The workload bench in both process modes, one after the other, written into one Markdown
# file: how bench-results/workload-v1-baseline.md was made, and how a later engine (format
# v2) is measured against it with the same commands.
#
#   bash scripts/workload-modes.sh [OUT.md [BASELINE.md]]
#
# OUT.md (default bench-results/workload-v1-baseline.md) gets both reports; beside it go
# OUT.in-process.json and OUT.fresh.json (every round of each mode). With BASELINE.md (an
# earlier OUT.md), each mode's p99 no-regression target is judged against that run's JSON of
# the same mode (AGENTWAL_BENCH_BASELINE). ROUNDS and FRESH_ROUNDS (default 9 each) set the
# rounds; AGENTWAL_BENCH_CALM_US defaults to 600, as for bench-results/workload.md. Other
# AGENTWAL_BENCH_* variables (THREADS, STEPS, BACKENDS, ...) pass through to both modes.
# About 4-5 minutes for the in-process run and 3-4 for the fresh-process one on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-bench-results/workload-v1-baseline.md}
baseline=${2:-}
stem=${out%.md}
rounds=${ROUNDS:-9}
fresh_rounds=${FRESH_ROUNDS:-9}
export AGENTWAL_BENCH_CALM_US=${AGENTWAL_BENCH_CALM_US:-600}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Built first, so that neither mode's timing or machine load includes the build.
cargo bench --bench workload --no-run --quiet

# run MODE ROUNDS: one mode's full run; its report, JSON and progress land in $tmp/MODE.
run() {
    local mode=$1 n=$2 base=()
    [ -z "$baseline" ] || base=(AGENTWAL_BENCH_BASELINE="${baseline%.md}.$mode.json")
    local t0
    t0=$(date +%s)
    env "${base[@]}" AGENTWAL_BENCH_PROCESS="$mode" AGENTWAL_BENCH_ROUNDS="$n" \
        AGENTWAL_BENCH_OUT="$tmp/$mode" cargo bench --bench workload \
        >"$tmp/$mode.stdout" 2> >(tee "$tmp/$mode.stderr" >&2)
    echo $(( $(date +%s) - t0 )) >"$tmp/$mode.seconds"
}

up_before=$(uptime)
run in-process "$rounds"
up_between=$(uptime)
run fresh "$fresh_rounds"
up_after=$(uptime)

md_in=$tmp/in-process/workload.md
md_fresh=$tmp/fresh/workload-fresh.md
# A report's section from its "## NAME" heading to the next heading of that level.
section() { awk -v h="## $2" '$0 == h {on=1; next} on && /^## / {exit} on' "$1"; }
# A report without its title, one heading level down, to sit under this file's headings.
demote() { awk 'NR == 1 && /^# / {title = 1; next} NR == 2 && title && $0 == "" {next} {sub(/^#/, "##"); print}' "$1"; }
cmd() {
    local mode=$1 n=$2
    local b=${baseline:+AGENTWAL_BENCH_BASELINE=${baseline%.md}.$mode.json }
    echo "${b}AGENTWAL_BENCH_PROCESS=$mode AGENTWAL_BENCH_ROUNDS=$n AGENTWAL_BENCH_CALM_US=$AGENTWAL_BENCH_CALM_US cargo bench --bench workload"
}

mkdir -p "$(dirname "$out")"
cp "$tmp/in-process/workload.json" "$stem.in-process.json"
cp "$tmp/fresh/workload-fresh.json" "$stem.fresh.json"
{
    echo "# Workload benchmark in both process modes: $(basename "$stem")"
    echo
    grep -m1 ' · commit ' "$md_in"
    echo
    echo "Written by \`bash scripts/workload-modes.sh${*:+ $*}\` (rerun it the same way; a"
    echo "later engine: \`bash scripts/workload-modes.sh bench-results/NEW.md $out\` judges"
    echo "its p99 against this file's runs). The two runs, one after the other:"
    echo
    echo '```text'
    cmd in-process "$rounds"
    cmd fresh "$fresh_rounds"
    echo '```'
    echo
    echo "In-process: every run in one process (the bench's default). Fresh: the bench"
    echo "re-executes itself once per (backend, T, round), the same rotating backend order,"
    echo "each child one run in a fresh directory under the same base. Every round of each"
    echo "mode: \`$stem.in-process.json\`, \`$stem.fresh.json\`."
    echo
    echo "Run times: in-process $(cat "$tmp/in-process.seconds") s (with the large-store and"
    echo "index-memory experiments), fresh $(cat "$tmp/fresh.seconds") s. Machine load (\`uptime\`):"
    echo
    echo '```text'
    echo "before:  $up_before"
    echo "between: $up_between"
    echo "after:   $up_after"
    echo '```'
    echo
    echo "## Figures of the v2 targets, per T: in-process ($rounds rounds)"
    section "$md_in" "Figures of the v2 targets, per T"
    echo "## Figures of the v2 targets, per T: fresh processes ($fresh_rounds rounds)"
    section "$md_fresh" "Figures of the v2 targets, per T"
    echo "## In-process run: the report"
    echo
    demote "$md_in"
    echo
    echo "## Fresh-process run: the report"
    echo
    demote "$md_fresh"
} >"$out"
echo "wrote $out, $stem.in-process.json and $stem.fresh.json" >&2
