"""The PostgreSQL server of the Python tests: the throwaway cluster of scripts/pg-cluster.sh,
whose socket directory ``AGENTWAL_PG_HOST`` names (scripts/test-python.sh starts one when the
variable is unset). Without it the PostgreSQL tests fail, saying how to run them: they never
skip. Each test works in a schema of its own, so tests never see each other's tasks.
"""

from __future__ import annotations

import glob
import os
import pathlib
import subprocess
import urllib.parse
import uuid

import pytest

HOST_ENV = "AGENTWAL_PG_HOST"
REPO = pathlib.Path(__file__).resolve().parents[2]


def host() -> str:
    """The cluster's socket directory; fails the test when there is none."""
    h = os.environ.get(HOST_ENV)
    if not h:
        pytest.fail(
            f"{HOST_ENV} is not set: these tests need a PostgreSQL server. Run "
            "`bash scripts/test-python.sh` (it starts a throwaway cluster), or "
            '`eval "$(bash scripts/pg-cluster.sh start)"` first.',
            pytrace=False,
        )
    return h


def url() -> str:
    """A ``postgresql://`` URL of the cluster (the socket directory as a percent-encoded host)."""
    return f"postgresql://postgres@{urllib.parse.quote(host(), safe='')}/postgres"


def fresh_schema(prefix: str = "py") -> str:
    """A schema name no other test uses."""
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


def _psql_bin() -> str:
    bin_dir = os.environ.get("AGENTWAL_PG_BIN")
    if bin_dir and os.path.exists(os.path.join(bin_dir, "psql")):
        return os.path.join(bin_dir, "psql")
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/psql"))
    if not found:
        pytest.fail("no psql found (AGENTWAL_PG_BIN, /usr/lib/postgresql/*/bin)", pytrace=False)
    return found[-1]


def psql(sql: str) -> str:
    """Runs ``sql`` on the cluster as ``postgres``; its unaligned, tuples-only output."""
    out = subprocess.run(
        [_psql_bin(), "-h", host(), "-U", "postgres", "-d", "postgres", "-X", "-At",
         "-v", "ON_ERROR_STOP=1", "-c", sql],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.stdout.strip()


def drop_schema(schema: str) -> None:
    psql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def server_pids() -> list:
    """The server's pids (postmaster first), from scripts/pg-cluster.sh."""
    out = subprocess.run(
        ["bash", str(REPO / "scripts" / "pg-cluster.sh"), "pids", host()],
        check=True,
        capture_output=True,
        text=True,
    )
    return [int(p) for p in out.stdout.split()]
