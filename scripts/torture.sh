#!/usr/bin/env bash
# The long crash-safety run (issue 5): at least 1,000,000 crash images, 1,000 kill -9
# rounds and every fuzz target for 10 minutes. CI runs the same tests time-boxed.
#
#   scripts/torture.sh                 # defaults below
#   AGENTWAL_CRASH_IMAGES=2000000 scripts/torture.sh
#
# Every test prints the seeds it used; a failure prints the seed that replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
export AGENTWAL_CRASH_IMAGES="${AGENTWAL_CRASH_IMAGES:-1000000}"
export AGENTWAL_KILL_ROUNDS="${AGENTWAL_KILL_ROUNDS:-1000}"
export AGENTWAL_RO_STRESS_SECS="${AGENTWAL_RO_STRESS_SECS:-60}"
export AGENTWAL_CLI_STRESS_SECS="${AGENTWAL_CLI_STRESS_SECS:-60}"
fuzz_seconds="${FUZZ_SECONDS:-600}"

echo "== crash sweep: $AGENTWAL_CRASH_IMAGES images"
cargo test --release --test crash_sweep -- --nocapture
echo "== kill -9: $AGENTWAL_KILL_ROUNDS rounds"
cargo test --release --test kill9 -- --nocapture
echo "== byte sweeps, large-batch crash sweep and injected I/O errors"
cargo test --release --test log_faults --test store_byte_sweep --test crash_sweep_large_batches \
  --test io_errors -- --nocapture
echo "== read-only handles beside a compacting writer: ${AGENTWAL_RO_STRESS_SECS}s per test"
cargo test --release --test read_only_views -- --nocapture
cargo test --release --test cli read_commands_beside -- --nocapture
echo "== fuzzing: ${fuzz_seconds}s per target"
bash scripts/fuzz.sh "$fuzz_seconds"
