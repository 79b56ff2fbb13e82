#!/usr/bin/env bash
# The long crash-safety run: at least 1,000,000 crash images, 1,000 kill -9
# rounds and every fuzz target for 10 minutes. CI runs the same tests time-boxed. The
# workloads hold states larger than a segment (in segments of their own), forks of them,
# and compactions whose retired segment files rotations recycle (each sweep fails if its
# recordings stop covering them); the I/O-error sweep runs 32 workloads of 80 steps
# here (CI: 8 of 40).
#
#   scripts/torture.sh                 # defaults below
#   AGENTWAL_CRASH_IMAGES=2000000 scripts/torture.sh
#
# Every test prints the seeds it used; a failure prints the seed that replays it. Built
# with `--features tokio`, as CI builds them (scripts/test.sh): one build, and kill -9
# rounds through the async API too.
set -euo pipefail
cd "$(dirname "$0")/.."
export AGENTWAL_CRASH_IMAGES="${AGENTWAL_CRASH_IMAGES:-1000000}"
export AGENTWAL_KILL_ROUNDS="${AGENTWAL_KILL_ROUNDS:-1000}"
export AGENTWAL_RO_STRESS_SECS="${AGENTWAL_RO_STRESS_SECS:-60}"
export AGENTWAL_CLI_STRESS_SECS="${AGENTWAL_CLI_STRESS_SECS:-60}"
export AGENTWAL_IO_ERRORS_SEEDS="${AGENTWAL_IO_ERRORS_SEEDS:-32}"
export AGENTWAL_IO_ERRORS_STEPS="${AGENTWAL_IO_ERRORS_STEPS:-80}"
fuzz_seconds="${FUZZ_SECONDS:-600}"

echo "== crash sweep: $AGENTWAL_CRASH_IMAGES images"
cargo test --release --features tokio --test crash_sweep -- --nocapture
echo "== kill -9: $AGENTWAL_KILL_ROUNDS rounds (every other one through the async API)"
cargo test --release --features tokio --test kill9 -- --nocapture
echo "== byte sweeps, large-batch crash sweep, injected I/O errors ($AGENTWAL_IO_ERRORS_SEEDS \
workloads of $AGENTWAL_IO_ERRORS_STEPS steps), large states, recycled segments"
cargo test --release --features tokio --test log_faults --test store_byte_sweep \
  --test crash_sweep_large_batches --test io_errors --test large_states --test recycled_segments \
  -- --nocapture
echo "== read-only handles beside a compacting writer: ${AGENTWAL_RO_STRESS_SECS}s per test"
cargo test --release --features tokio --test read_only_views -- --nocapture
cargo test --release --features tokio --test cli read_commands_beside -- --nocapture
echo "== fuzzing: ${fuzz_seconds}s per target"
bash scripts/fuzz.sh "$fuzz_seconds"
