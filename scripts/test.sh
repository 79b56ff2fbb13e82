#!/usr/bin/env bash
# The whole test suite, the one command README names and `.ci/run` runs: the Rust crate
# (unit, integration and doc tests, with the time-boxed crash sweeps, kill -9 rounds, byte
# sweeps and fuzz regressions), then the PostgreSQL backend against a throwaway cluster this
# script starts and stops itself (scripts/pg-cluster.sh), then the Python package, built
# into a fresh virtualenv, whose PostgreSQL tests use the same cluster. Long runs: scripts/torture.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
# `tokio`: the async API's tests (the other features are the default ones).
cargo test --release --features tokio

# The PostgreSQL backend: the API suite and the model-based test on both backends, leases
# and fencing, then the fault probes (they kill and freeze the server, so they run last).
# A cluster that cannot start fails the run here: these tests are never skipped.
if ! cluster_env=$(bash scripts/pg-cluster.sh start); then
    echo "FAILED: could not start a throwaway PostgreSQL cluster (see above); the PostgreSQL tests did not run" >&2
    exit 1
fi
eval "$cluster_env"
trap 'bash scripts/pg-cluster.sh stop "$AGENTWAL_PG_HOST"' EXIT
echo "PostgreSQL test cluster at $AGENTWAL_PG_HOST"
cargo test --release --features tokio,postgres --test task_store_api --test pg_model --test pg_lease --test pg_store
cargo test --release --features tokio,postgres --test pg_faults -- --test-threads=1 --nocapture

# The Python package, on the same cluster (AGENTWAL_PG_HOST is exported: test-python.sh
# starts none of its own); the fault probes leave the server running.
bash scripts/test-python.sh
bash scripts/pg-cluster.sh stop "$AGENTWAL_PG_HOST"
trap - EXIT
