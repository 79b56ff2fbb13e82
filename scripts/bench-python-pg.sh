#!/usr/bin/env bash
# The LangGraph benchmark on PostgreSQL: AgentwalSaver against PostgresSaver
# (langgraph-checkpoint-postgres) on the same server, graph and durability, in one run
# (python/bench/pg_bench.py). Builds the package (release build of the extension) into a
# fresh virtualenv under target/pybench-pg, as scripts/bench-python.sh does, plus the pinned
# PostgresSaver and psycopg, then runs it.
#   bash scripts/bench-python-pg.sh                        # full run (~5-15 min on 2 shared cores)
#   AGENTWAL_BENCH_QUICK=1 bash scripts/bench-python-pg.sh # seconds: only checks that it runs
#   AGENTWAL_BENCH_OUT=bench-results/langgraph-pg.md bash scripts/bench-python-pg.sh  # also write Markdown
# AGENTWAL_BENCH_REUSE_VENV=1 keeps an existing target/pybench-pg (no rebuild).
# The server: the one whose socket directory AGENTWAL_PG_HOST names (or the URL
# AGENTWAL_PG_URL); when neither is set, a throwaway cluster (scripts/pg-cluster.sh), started
# with pg_stat_statements preloaded (tracking off except in the bench's diagnostic pass) and
# removed at the end. A cluster that cannot start fails the run. The bench makes its schemas
# (one per saver and measurement) and drops them.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/pybench-pg
# The versions of scripts/bench-python.sh, plus PostgresSaver's and psycopg's.
maturin_version=1.16.0
langgraph_checkpoint_version=4.3.2
langgraph_version=1.2.24
langgraph_postgres_version=3.0.5
psycopg_version=3.3.9
psycopg_pool_version=3.3.3

start=$(date +%s)
step() { echo "== bench-python-pg: $1 ($(( $(date +%s) - start ))s)" >&2; }

export PATH="$PWD/$venv/bin:$PATH"
export VIRTUAL_ENV="$PWD/$venv"
if [ "${AGENTWAL_BENCH_REUSE_VENV:-0}" = 1 ] && [ -x "$venv/bin/python" ]; then
    step "reusing $venv"
else
    step "virtualenv in $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    step "pip install maturin, langgraph, langgraph-checkpoint-postgres==$langgraph_postgres_version, psycopg[binary]==$psycopg_version, psycopg-pool==$psycopg_pool_version"
    pip install --quiet --disable-pip-version-check "maturin==$maturin_version" \
        "langgraph-checkpoint==$langgraph_checkpoint_version" \
        "langgraph==$langgraph_version" \
        "langgraph-checkpoint-postgres==$langgraph_postgres_version" \
        "psycopg[binary]==$psycopg_version" \
        "psycopg-pool==$psycopg_pool_version"
    step "build and install ./python (release build of the extension)"
    pip install --quiet --disable-pip-version-check --no-build-isolation ./python
fi

if [ -z "${AGENTWAL_PG_HOST:-}" ] && [ -z "${AGENTWAL_PG_URL:-}" ]; then
    step "a throwaway PostgreSQL cluster (scripts/pg-cluster.sh)"
    if ! cluster_env=$(bash scripts/pg-cluster.sh start); then
        echo "FAILED: could not start a throwaway PostgreSQL cluster (see above); the benchmark did not run" >&2
        exit 1
    fi
    eval "$cluster_env"
    trap 'bash scripts/pg-cluster.sh stop "$AGENTWAL_PG_HOST"' EXIT
    # Ours to reconfigure: the diagnostic pass may turn tracking on (never on a server
    # handed in through AGENTWAL_PG_HOST or AGENTWAL_PG_URL).
    export AGENTWAL_BENCH_OWN_CLUSTER=1
    # pg_stat_statements for the statement counts of the diagnostic pass (tracking is off
    # while timing: the bench turns it on around that pass only). Needs a restart.
    if [ -f "$AGENTWAL_PG_BIN/../lib/pg_stat_statements.so" ]; then
        printf "shared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.track = 'none'\n" \
            >>"$AGENTWAL_PG_DATA/postgresql.conf"
        owner=()
        [ "$(id -u)" -ne 0 ] || owner=(runuser -u postgres --)
        "${owner[@]}" "$AGENTWAL_PG_BIN/pg_ctl" -D "$AGENTWAL_PG_DATA" -l "$AGENTWAL_PG_HOST/log" \
            -w -t 60 restart >/dev/null \
            || { tail -20 "$AGENTWAL_PG_HOST/log" >&2 || true; echo "FAILED: the cluster did not restart with pg_stat_statements" >&2; exit 1; }
    else
        echo "(no pg_stat_statements.so: the report will have no statement counts)" >&2
    fi
fi
echo "PostgreSQL for the benchmark at ${AGENTWAL_PG_URL:-$AGENTWAL_PG_HOST}" >&2

# From the repository root, so that python/agentwal (the sources, without the built
# extension) does not shadow the installed package.
step "run python/bench/pg_bench.py"
python python/bench/pg_bench.py "$@"
step "ok"
