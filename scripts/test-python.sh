#!/usr/bin/env bash
# Builds the Python package (python/) into a fresh virtualenv under target/pyenv and runs its
# tests. Fails on the first error. Needs python3 (>= 3.9) with venv, cargo, and PyPI (pip
# installs maturin, pytest and the pinned LangGraph packages that the checkpointer's tests
# use: langgraph-checkpoint, its conformance suite, and langgraph for a real graph).
# The tests of agentwal.PgStore and of the saver on PostgreSQL use the server that
# AGENTWAL_PG_HOST names; when it is unset, this script starts a throwaway cluster
# (scripts/pg-cluster.sh) and removes it at the end. A cluster that cannot start fails the
# run: those tests never skip.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/pyenv
# Versions verified with this script (Python 3.11, Rust 1.95).
maturin_version=1.16.0
pytest_version=9.2.0
langgraph_checkpoint_version=4.3.2
langgraph_conformance_version=0.0.2
langgraph_version=1.2.24

start=$(date +%s)
step() { echo "== python: $1 ($(( $(date +%s) - start ))s)"; }

step "virtualenv in $venv"
rm -rf "$venv"
python3 -m venv "$venv"
# maturin's PEP 517 hooks run the `maturin` command: the venv's bin must be on PATH.
export PATH="$PWD/$venv/bin:$PATH"
export VIRTUAL_ENV="$PWD/$venv"

step "pip install maturin==$maturin_version pytest==$pytest_version"
pip install --quiet --disable-pip-version-check "maturin==$maturin_version" "pytest==$pytest_version"

step "pip install langgraph-checkpoint==$langgraph_checkpoint_version langgraph-checkpoint-conformance==$langgraph_conformance_version langgraph==$langgraph_version"
pip install --quiet --disable-pip-version-check \
    "langgraph-checkpoint==$langgraph_checkpoint_version" \
    "langgraph-checkpoint-conformance==$langgraph_conformance_version" \
    "langgraph==$langgraph_version"
python -c 'import langgraph.checkpoint.conformance, langgraph.graph'

step "build and install ./python (release build of the extension)"
pip install --disable-pip-version-check --no-build-isolation ./python
python -c 'import agentwal; print("agentwal imported from", agentwal.__file__)'

if [ -z "${AGENTWAL_PG_HOST:-}" ]; then
    step "a throwaway PostgreSQL cluster (scripts/pg-cluster.sh)"
    if ! cluster_env=$(bash scripts/pg-cluster.sh start); then
        echo "FAILED: could not start a throwaway PostgreSQL cluster (see above); the Python tests did not run" >&2
        exit 1
    fi
    eval "$cluster_env"
    trap 'bash scripts/pg-cluster.sh stop "$AGENTWAL_PG_HOST"' EXIT
fi
echo "PostgreSQL for the Python tests at $AGENTWAL_PG_HOST"

step "pytest python/tests"
# From the repository root, so that python/agentwal (the sources, without the built
# extension) does not shadow the installed package.
# -rs: a skipped test would be listed (none may skip; the LangGraph tests fail, not skip,
# without their packages). -s is not used: the conformance report goes to the captured
# output of its test, shown on failure.
pytest -q -rs python/tests

step "ok"
