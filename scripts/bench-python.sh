#!/usr/bin/env bash
# The LangGraph benchmark: AgentwalSaver against SqliteSaver (langgraph-checkpoint-sqlite)
# on the same graph, disk and durability, in one run (python/bench/langgraph_bench.py).
# Builds the package (release build of the extension) into a fresh virtualenv under
# target/pybench, as scripts/test-python.sh does, plus the pinned SqliteSaver, then runs it.
#   bash scripts/bench-python.sh                 # full run (~10-20 min on 2 shared cores)
#   AGENTWAL_BENCH_QUICK=1 bash scripts/bench-python.sh   # seconds: only checks that it runs
#   AGENTWAL_BENCH_OUT=bench-results/langgraph.md bash scripts/bench-python.sh  # also write Markdown
# AGENTWAL_BENCH_REUSE_VENV=1 keeps an existing target/pybench (no rebuild).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/pybench
# The versions of scripts/test-python.sh, plus SqliteSaver's.
maturin_version=1.16.0
langgraph_checkpoint_version=4.3.2
langgraph_version=1.2.24
langgraph_sqlite_version=3.1.2

start=$(date +%s)
step() { echo "== bench-python: $1 ($(( $(date +%s) - start ))s)" >&2; }

export PATH="$PWD/$venv/bin:$PATH"
export VIRTUAL_ENV="$PWD/$venv"
if [ "${AGENTWAL_BENCH_REUSE_VENV:-0}" = 1 ] && [ -x "$venv/bin/python" ]; then
    step "reusing $venv"
else
    step "virtualenv in $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    step "pip install maturin, langgraph, langgraph-checkpoint-sqlite==$langgraph_sqlite_version"
    pip install --quiet --disable-pip-version-check "maturin==$maturin_version" \
        "langgraph-checkpoint==$langgraph_checkpoint_version" \
        "langgraph==$langgraph_version" \
        "langgraph-checkpoint-sqlite==$langgraph_sqlite_version"
    step "build and install ./python (release build of the extension)"
    pip install --quiet --disable-pip-version-check --no-build-isolation ./python
fi
# From the repository root, so that python/agentwal (the sources, without the built
# extension) does not shadow the installed package.
step "run python/bench/langgraph_bench.py"
python python/bench/langgraph_bench.py "$@"
step "ok"
