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
# and fencing, the async API on PostgreSQL, the CLI on PostgreSQL (read commands on a URL,
# `migrate`), then the fault probes (they kill and freeze the server, so they run last, with
# the host-loss and contending-worker probes).
# A cluster that cannot start fails the run here: these tests are never skipped.
if ! cluster_env=$(bash scripts/pg-cluster.sh start); then
    echo "FAILED: could not start a throwaway PostgreSQL cluster (see above); the PostgreSQL tests did not run" >&2
    exit 1
fi
eval "$cluster_env"
trap 'bash scripts/pg-cluster.sh stop "$AGENTWAL_PG_HOST"' EXIT
echo "PostgreSQL test cluster at $AGENTWAL_PG_HOST"
cargo test --release --features tokio,postgres --test task_store_api --test pg_model --test pg_lease --test pg_store --test pg_retention --test pg_async --test pg_cli --test pg_writes_pruned --test pg_commit
# One build, one test at a time, figures printed: the fault probes; host loss (each test
# makes its own primary and synchronous standby with pg-cluster.sh standby and removes them;
# a pair that cannot start fails the run); two worker processes contending for 100 tasks
# through leases, one SIGKILLed and frozen (on the restarted server, after the probes).
cargo test --release --features tokio,postgres --test pg_faults --test pg_host_loss --test pg_workers \
    -- --test-threads=1 --nocapture

# The Python package, on the same cluster (AGENTWAL_PG_HOST is exported: test-python.sh
# starts none of its own); the fault probes leave the server running.
bash scripts/test-python.sh
bash scripts/pg-cluster.sh stop "$AGENTWAL_PG_HOST"
trap - EXIT
