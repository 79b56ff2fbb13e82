#!/usr/bin/env bash
# The whole test suite, the one command README names and `.ci/run` runs: the Rust crate
# (unit, integration and doc tests, with the time-boxed crash sweeps, kill -9 rounds, byte
# sweeps and fuzz regressions), then the Python package, built into a fresh virtualenv.
# Long runs: scripts/torture.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
# `tokio`: the async API's tests (the other features are the default ones).
cargo test --release --features tokio
bash scripts/test-python.sh
