#!/usr/bin/env bash
# Runs every fuzz target for N seconds each (default 60): `scripts/fuzz.sh [seconds]`.
#
# Needs the nightly toolchain (libFuzzer instrumentation); installs cargo-fuzz if missing.
# The corpus grows in fuzz/corpus/<target>/ (not committed). A crash stops the run and
# leaves its input in fuzz/artifacts/<target>/; after fixing the bug, copy that file into
# fuzz/regressions/<target>/ so `cargo test --test fuzz_regressions` replays it forever.
# Replay one input: `cargo +nightly fuzz run <target> fuzz/artifacts/<target>/<file>`.
#
# Environment: FUZZ_TARGETS="record_decode ..." picks the targets.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
targets="${FUZZ_TARGETS:-record_decode recover_dir store_ops}"

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz.sh: the nightly toolchain is needed (rustup toolchain install nightly)" >&2
    exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

echo "== building fuzz targets"
cargo +nightly fuzz build

for target in $targets; do
    echo "== fuzz $target for ${seconds}s"
    mkdir -p "fuzz/corpus/$target"
    log="fuzz/target/$target.log"
    # Saved crash inputs seed the corpus too.
    extra=()
    [ -d "fuzz/regressions/$target" ] && extra+=("fuzz/regressions/$target")
    set +e
    cargo +nightly fuzz run "$target" "fuzz/corpus/$target" "${extra[@]}" -- \
        -max_total_time="$seconds" -print_final_stats=1 \
        >"$log" 2>&1
    rc=$?
    set -e
    if [ "$rc" -ne 0 ]; then
        tail -n 60 "$log"
        echo "fuzz.sh: target $target FAILED (exit $rc); full log: $log" >&2
        exit "$rc"
    fi
    runs=$(awk '/^stat::number_of_executed_units:/ { n += $2 } END { print n }' "$log")
    echo "fuzz $target: ${runs:-?} executions in ${seconds}s, no failure"
done
