"""AgentwalSaver on PostgreSQL against LangGraph's PostgresSaver, on one PostgreSQL server and
one LangGraph tool-calling loop.

Run it with ``bash scripts/bench-python-pg.sh`` (builds the venv, finds or starts the server,
then runs this file from the repository root). ``AGENTWAL_BENCH_QUICK=1``: small sizes, one
rep (CI checks that it runs). ``AGENTWAL_BENCH_OUT=path.md``: also write the Markdown report
there. ``AGENTWAL_BENCH_REPS``: the number of reps (default 5). The server: ``AGENTWAL_PG_URL``
(a ``postgresql://`` URL) or else ``AGENTWAL_PG_HOST`` (a unix-socket directory, as
scripts/pg-cluster.sh prints; the URL is then ``postgresql://postgres@<dir>/postgres``). The
role must be able to create and drop schemas.

The graph is python/bench/langgraph_bench.py's: one node, ``agent``, looping on itself; each
super-step (a "step") appends an AIMessage with a tool call (~300 B serialized) and a
ToolMessage (~1.5 KB) through ``add_messages`` and sets 3 other keys (``step``, ``last_tool``,
``phase``). The text is English-like: words drawn (fixed seed) from a list of common words, in
sentences with capitals, commas, numbers and full stops, different at every step, so that
neither saver (nor PostgreSQL's TOAST compression) gains from repeated bytes beyond what real
prose gives. It runs with ``durability="sync"``: each step's writes and checkpoint are
committed before the next step.

The savers, as users run them, each in a schema of its own made for the measurement and
dropped after it:

- ``AgentwalSaver(url, schema=...)``: the PgStore's defaults (one handle, its own pool of
  connections; ``synchronous_commit`` is the server's).
- ``PostgresSaver.from_conn_string(conninfo)`` (its documented constructor: one connection,
  ``autocommit=True``, ``prepare_threshold=0``, ``dict_row``) then ``setup()``, for the
  single-thread measurements; for the threaded one, what its docs show for concurrent use:
  ``PostgresSaver(ConnectionPool(conninfo, max_size=20, kwargs={autocommit, prepare_threshold:
  0, row_factory: dict_row}))``. Its tables go to their own schema through
  ``options=-c search_path=<schema>`` in the conninfo.

Each measurement runs both savers side by side in this one process, alternating which goes
first from rep to rep; figures are medians over the reps. ``InMemorySaver`` runs the time
measurements too, as a reference (LangGraph's own cost per step, no database).

After the reps, one more 200-step thread per saver counts what the server did per step:
transactions (``pg_stat_database.xact_commit``), WAL (``pg_stat_wal``) and, when the server
preloads ``pg_stat_statements`` (scripts/bench-python-pg.sh's throwaway cluster does, with
tracking off while timing), the statements and their server time.
"""

from __future__ import annotations

import datetime as _dt
import gc
import importlib.metadata as md
import os
import platform
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from typing import Annotated, Any, Callable, Dict, List, Optional, Tuple, TypedDict

import psycopg
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from agentwal.langgraph import AgentwalSaver

QUICK = os.environ.get("AGENTWAL_BENCH_QUICK") == "1"
REPS = int(os.environ.get("AGENTWAL_BENCH_REPS", "1" if QUICK else "5"))
STEPS = 20 if QUICK else 200  # the thread of the single-thread measurements
LAST = 5 if QUICK else 10  # its last steps timed
THREADS = 4 if QUICK else 16
THREAD_STEPS = 5 if QUICK else 50  # steps per graph in the threaded run
GET_WARM = 5 if QUICK else 30  # warm get_tuple calls, median taken
REOPENS = 2 if QUICK else 5  # fresh saver objects per rep, first get_tuple each
POOL_MAX = 20  # PostgresSaver's ConnectionPool in the threaded run (its docs' example)
NAMES = ("agentwal", "postgres")
ALL = NAMES + ("memory",)
LABEL = {"agentwal": "AgentwalSaver", "postgres": "PostgresSaver", "memory": "InMemorySaver"}


def server_url() -> str:
    url = os.environ.get("AGENTWAL_PG_URL")
    if url:
        return url
    host = os.environ.get("AGENTWAL_PG_HOST")
    if not host:
        sys.exit("pg_bench: set AGENTWAL_PG_HOST (a socket directory, e.g. from "
                 "`eval \"$(bash scripts/pg-cluster.sh start)\"`) or AGENTWAL_PG_URL, or run "
                 "`bash scripts/bench-python-pg.sh`")
    return f"postgresql://postgres@{urllib.parse.quote(host, safe='')}/postgres"


URL = server_url()


def with_search_path(url: str, schema: str) -> str:
    """``url`` with ``options=-c search_path=<schema>``: PostgresSaver's tables go there."""
    opt = "options=" + urllib.parse.quote(f"-c search_path={schema}", safe="")
    return url + ("&" if "?" in url else "?") + opt


# -- the text ---------------------------------------------------------------------------

_WORDS = """
the of and to in is that for it as with was on be by this are from at or an have not which
but they you we all were can there their has more one will would about been if when so what
some into other than its only then them these time may could new also out any first like
just over such our most even after where two because way through much many well before
should very those each between under still same while both during three last own found
system data file query result results table index server client request response error
value values record records search model agent tool tools step state message messages
thread node graph task tasks memory store write read order report user users service
network cache page pages line lines source code function method change changes update
version test tests build run runs running check time times number list key keys field
document documents answer question questions summary section example examples note notes
people city company market price prices year years month week day report study history
water energy policy research team project plan design review paper evidence source
customer product support account invoice payment travel flight hotel weather forecast
morning evening river mountain coast north south east west small large early late recent
important different possible available general public local national common similar
simple clear current total average higher lower better worse likely several certain
shows suggests includes provides requires describes returns contains reports explains
found made used known given shown listed called based noted added measured observed
""".split()


def _sentence(rng: random.Random) -> str:
    words = []
    for i in range(rng.randint(7, 18)):
        r = rng.random()
        if r < 0.06:
            words.append(str(rng.choice([rng.randint(2, 99), rng.randint(100, 9999),
                                         round(rng.uniform(0, 100), 1)])))
        else:
            words.append(rng.choice(_WORDS))
        if i > 2 and rng.random() < 0.08:
            words[-1] += ","
    words[-1] = words[-1].rstrip(",")
    s = " ".join(words)
    return s[0].upper() + s[1:] + rng.choice(".......?;:")


def _text(rng: random.Random, n: int) -> str:
    """English-like text of about ``n`` characters (whole sentences, the last one cut at a
    word)."""
    out = ""
    while len(out) < n:
        out += (" " if out else "") + _sentence(rng)
    cut = out.rfind(" ", 0, n)
    return out[: cut if cut > n // 2 else n].rstrip(",;:") + "."


# One text per step number, different at every step (a fixed seed: the same for every saver
# and run). ~60 B of text plus a tool call with ~40 B of args: ~300 B serialized with the
# message's other fields; tool results ~1.5 KB serialized.
_rng = random.Random(15)
_N_TEXTS = max(STEPS, THREAD_STEPS) + 2
_AI_TEXT = [_text(_rng, 60) for _ in range(_N_TEXTS)]
_QUERY = [_text(_rng, 40).rstrip(".") for _ in range(_N_TEXTS)]
_TOOL_TEXT = [_text(_rng, 1330) for _ in range(_N_TEXTS)]


class State(TypedDict):
    messages: Annotated[list, add_messages]
    step: int
    last_tool: str
    phase: str


def build_graph(saver: Any, stamps: List[float], steps: int):
    """The loop: ``agent`` runs ``steps`` times; ``stamps`` gets perf_counter at each run."""

    def agent(state: State):
        stamps.append(time.perf_counter())
        n = state.get("step", 0) + 1
        call = f"call-{n}"
        return {
            "messages": [
                AIMessage(
                    content=_AI_TEXT[n],
                    id=f"ai-{n}",
                    tool_calls=[{"id": call, "name": "search", "args": {"query": _QUERY[n]}}],
                ),
                ToolMessage(content=_TOOL_TEXT[n], tool_call_id=call, id=f"tool-{n}"),
            ],
            "step": n,
            "last_tool": "search",
            "phase": "working" if n < steps else "done",
        }

    def route(state: State):
        return "agent" if state["step"] < steps else END

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["agent", END])
    return g.compile(checkpointer=saver)


def run_thread(saver: Any, thread_id: str, steps: int) -> Tuple[float, List[float]]:
    """Runs one thread of ``steps`` steps; returns its wall time and each step's time (from
    one ``agent`` run to the next, the last one to the end of ``invoke``)."""
    stamps: List[float] = []
    app = build_graph(saver, stamps, steps)
    config = {"configurable": {"thread_id": thread_id}, "recursion_limit": steps + 10}
    t0 = time.perf_counter()
    out = app.invoke(
        {"messages": [HumanMessage(content="Find the recent reports on the river project.",
                                   id="h-0")],
         "step": 0, "last_tool": "", "phase": "start"},
        config,
        durability="sync",
    )
    t1 = time.perf_counter()
    assert out["step"] == steps and len(out["messages"]) == 2 * steps + 1, out["step"]
    stamps.append(t1)
    return t1 - t0, [b - a for a, b in zip(stamps, stamps[1:])]


# -- the database -----------------------------------------------------------------------

def admin() -> psycopg.Connection:
    return psycopg.connect(URL, autocommit=True)


def sql(q: str, *args: Any) -> List[Tuple[Any, ...]]:
    with admin() as c:
        cur = c.execute(q, args or None)
        return cur.fetchall() if cur.description is not None else []


class Saver:
    """One saver kind in a fresh schema; ``open()`` again gives a fresh saver object on it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.schema = f"{'awbench' if name == 'agentwal' else 'lgbench'}_{uuid.uuid4().hex[:16]}"
        self.conninfo = with_search_path(URL, self.schema)
        self._cm = None
        self._pool: Optional[ConnectionPool] = None
        if name == "postgres":
            sql(f'CREATE SCHEMA "{self.schema}"')

    def open(self, *, pool: bool = False, setup: bool = False) -> Any:
        """A new saver object. PostgresSaver: ``pool`` its docs' ConnectionPool (else
        ``from_conn_string``: one connection); ``setup`` creates its tables (first use)."""
        if self.name == "memory":
            self.obj = InMemorySaver()
        elif self.name == "agentwal":
            self.obj = AgentwalSaver(URL, schema=self.schema)
        elif pool:
            self._pool = ConnectionPool(
                self.conninfo, max_size=POOL_MAX, open=True,
                kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row})
            self.obj = PostgresSaver(self._pool)
        else:
            self._cm = PostgresSaver.from_conn_string(self.conninfo)
            self.obj = self._cm.__enter__()
        if setup and self.name == "postgres":
            self.obj.setup()
        return self.obj

    def close(self) -> None:
        if self.name == "agentwal":
            self.obj.close()
        elif self.name == "postgres":
            if self._pool is not None:
                self._pool.close()
                self._pool = None
            else:
                self._cm.__exit__(None, None, None)
                self._cm = None

    def tables(self) -> Dict[str, int]:
        """``pg_total_relation_size`` (heap, TOAST, indexes, free-space and visibility maps)
        of each table in the schema."""
        rows = sql(
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') ORDER BY c.relname", self.schema)
        return {r[0]: int(r[1]) for r in rows}

    def payload(self) -> int:
        """Bytes of the stored values: ``octet_length`` of the bytea value columns (their
        length before PostgreSQL's own TOAST compression), ``pg_column_size`` of the jsonb
        ones (PostgresSaver's checkpoint and metadata)."""
        s = f'"{self.schema}"'
        if self.name == "agentwal":
            q = (f"SELECT (SELECT coalesce(sum(octet_length(body)), 0) FROM {s}.checkpoints)"
                 f" + (SELECT coalesce(sum(octet_length(args) + coalesce(octet_length(result), 0)),"
                 f" 0) FROM {s}.calls)")
        else:
            q = (f"SELECT (SELECT coalesce(sum(pg_column_size(checkpoint) + pg_column_size(metadata)),"
                 f" 0) FROM {s}.checkpoints)"
                 f" + (SELECT coalesce(sum(coalesce(octet_length(blob), 0)), 0) FROM {s}.checkpoint_blobs)"
                 f" + (SELECT coalesce(sum(octet_length(blob)), 0) FROM {s}.checkpoint_writes)")
        return int(sql(q)[0][0])

    def drop(self) -> None:
        if self.name != "memory":
            sql(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


def order(rep: int) -> Tuple[str, ...]:
    """The savers in rep ``rep``'s order: agentwal and postgres swap places every rep."""
    pair = NAMES if rep % 2 == 0 else NAMES[::-1]
    return (pair + ("memory",)) if rep % 4 < 2 else (("memory",) + pair)


# -- the measurements -------------------------------------------------------------------

def fresh_get(s: Saver, config: Dict[str, Any], n_msgs: int) -> Tuple[float, float]:
    """Opens a fresh saver object on ``s`` and calls its first ``get_tuple(config)``, whose
    checkpoint must hold ``n_msgs`` messages; returns the seconds each took (a collection
    before each, so that none runs inside them)."""
    gc.collect()
    t0 = time.perf_counter()
    saver = s.open()
    t1 = time.perf_counter()
    gc.collect()
    t2 = time.perf_counter()
    tup = saver.get_tuple(config)
    t3 = time.perf_counter()
    assert len(tup.checkpoint["channel_values"]["messages"]) == n_msgs
    s.close()
    return t1 - t0, t3 - t2


def bench_thread(rep: int, name: str, res: Dict[str, Dict[str, List[float]]]) -> None:
    """A STEPS-step thread: time per step (mean, last LAST), bytes in the database,
    get_tuple warm and on fresh saver objects."""
    s = Saver(name)
    try:
        saver = s.open(setup=True)
        gc.collect()
        wall, steps = run_thread(saver, "thread-200", STEPS)
        r = res[name]
        r["step_ms"].append(wall / STEPS * 1e3)
        r["last_ms"].append(statistics.mean(steps[-LAST:]) * 1e3)
        config = {"configurable": {"thread_id": "thread-200"}}
        tup = saver.get_tuple(config)
        n_msgs = len(tup.checkpoint["channel_values"]["messages"])
        assert n_msgs == 2 * STEPS + 1, n_msgs
        times = []
        for _ in range(GET_WARM):
            gc.collect()  # a collection of the whole heap inside the call is noise
            t0 = time.perf_counter()
            saver.get_tuple(config)
            times.append(time.perf_counter() - t0)
        r["get_warm_ms"].append(statistics.median(times) * 1e3)
        if name == "memory":
            return
        s.close()
        tables = s.tables()
        r["relation_bytes"].append(sum(tables.values()))
        for t, b in tables.items():
            r.setdefault(f"rel:{t}", []).append(b)
        r["payload_bytes"].append(s.payload())
        opens, firsts = [], []
        for _ in range(REOPENS):
            opened, first = fresh_get(s, config, n_msgs)
            opens.append(opened)
            firsts.append(first)
        r["open_ms"].append(statistics.median(opens) * 1e3)
        r["get_fresh_ms"].append(statistics.median(firsts) * 1e3)
    finally:
        s.drop()


def bench_threads(rep: int, name: str, res: Dict[str, Dict[str, List[float]]]) -> None:
    """THREADS graphs on THREADS Python threads, each its own thread_id, one shared saver
    (PostgresSaver on its docs' ConnectionPool): total steps/s."""
    s = Saver(name)
    try:
        saver = s.open(pool=True, setup=True)
        gc.collect()
        barrier = threading.Barrier(THREADS + 1)
        errors: List[BaseException] = []
        ends: List[float] = []

        def worker(i: int) -> None:
            try:
                barrier.wait()
                run_thread(saver, f"thread-{i}", THREAD_STEPS)
                ends.append(time.perf_counter())
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        ts = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
        for t in ts:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        if errors:
            raise errors[0]
        res[name]["threads_steps_s"].append(THREADS * THREAD_STEPS / (max(ends) - t0))
        if name != "memory":
            s.close()
    finally:
        s.drop()


# -- what the server did per step (after the reps, not timed) ----------------------------

def _setting(name: str) -> Optional[str]:
    try:
        return sql(f"SELECT current_setting('{name}', true)")[0][0]
    except psycopg.Error:
        return None


def _pgss() -> bool:
    """pg_stat_statements is preloaded and usable (the extension is created if need be)."""
    if "pg_stat_statements" not in (_setting("shared_preload_libraries") or ""):
        return False
    try:
        sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        return True
    except psycopg.Error:
        return False


def _alter(settings: Dict[str, Optional[str]]) -> None:
    """``ALTER SYSTEM SET`` (a value) or ``RESET`` (None: back to the server's configured
    value) for every backend; raises psycopg.Error without the privilege."""
    with admin() as c:
        for k, v in settings.items():
            c.execute(f"ALTER SYSTEM SET {k} = '{v}'" if v is not None else f"ALTER SYSTEM RESET {k}")
        c.execute("SELECT pg_reload_conf()")
    time.sleep(0.3)  # every backend applies the reload at its next command


def _counters(c: psycopg.Connection) -> Dict[str, float]:
    c.execute("SELECT pg_stat_clear_snapshot()")
    x = c.execute("SELECT xact_commit, xact_rollback FROM pg_stat_database "
                  "WHERE datname = current_database()").fetchone()
    w = c.execute("SELECT wal_records, wal_fpi, wal_bytes, wal_write, wal_sync, wal_write_time,"
                  " wal_sync_time FROM pg_stat_wal").fetchone()
    return {"xact_commit": x[0], "xact_rollback": x[1], "wal_records": w[0], "wal_fpi": w[1],
            "wal_bytes": float(w[2]), "wal_write": w[3], "wal_sync": w[4],
            "wal_write_ms": float(w[5]), "wal_sync_ms": float(w[6])}


def _settle(c: psycopg.Connection) -> None:
    """Waits until no other client backend is connected (their statistics are flushed when
    they exit), then a little more."""
    for _ in range(100):
        n = c.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
                      " AND pid <> pg_backend_pid() AND datname = current_database()").fetchone()[0]
        if n == 0:
            break
        time.sleep(0.1)
    time.sleep(1.0)


def _timed(saver: Any, calls: Dict[str, List[Tuple[float, float]]]) -> None:
    """Wraps the saver's put, put_writes and get_tuple (on the object) to time each call:
    (wall time, CPU time of the calling thread)."""
    for meth in ("put", "put_writes", "get_tuple"):
        f = getattr(saver, meth)
        calls[meth] = []

        def wrapper(*args: Any, _f: Callable = f, _l: List[Tuple[float, float]] = calls[meth],
                    **kw: Any) -> Any:
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return _f(*args, **kw)
            finally:
                _l.append((time.perf_counter() - t0, time.thread_time() - c0))

        setattr(saver, meth, wrapper)


def diagnose() -> Tuple[Dict[str, bool], Dict[str, Dict[str, Any]]]:
    """One STEPS-step thread per saver: the saver's own calls, timed in this process; the
    server's transactions, WAL (with its write and fsync times if ``track_wal_io_timing``
    is on, or can be) and, with pg_stat_statements, statements, per step. Settings are
    turned on (and reset afterwards) only on the throwaway cluster bench-python-pg.sh
    started (``AGENTWAL_BENCH_OWN_CLUSTER=1``), never on a server that was handed in."""
    have = {"pgss": _pgss(), "io_timing": _setting("track_wal_io_timing") == "on"}
    on: Dict[str, Optional[str]] = {}
    if have["pgss"] and _setting("pg_stat_statements.track") == "none":
        on["pg_stat_statements.track"] = "top"
    if not have["io_timing"]:
        on["track_wal_io_timing"] = "on"
    out: Dict[str, Dict[str, Any]] = {}
    for name in NAMES:
        s = Saver(name)
        changed = False
        try:
            saver = s.open(setup=True)
            saver.get_tuple({"configurable": {"thread_id": "warm"}})  # connected, prepared
            if on and os.environ.get("AGENTWAL_BENCH_OWN_CLUSTER") == "1":
                try:
                    _alter(on)
                    changed = True
                    have["io_timing"] = True
                except psycopg.Error:
                    pass
            calls: Dict[str, List[Tuple[float, float]]] = {}
            _timed(saver, calls)
            with admin() as c:
                if have["pgss"]:
                    c.execute("SELECT pg_stat_statements_reset()")
                before = _counters(c)
            t0 = time.perf_counter()
            run_thread(saver, "thread-diag", STEPS)
            wall = time.perf_counter() - t0
            s.close()
            with admin() as c:
                _settle(c)
                after = _counters(c)
                d: Dict[str, Any] = {k: (after[k] - before[k]) / STEPS for k in before}
                d["step_ms"] = wall / STEPS * 1e3
                for meth, ts in calls.items():
                    d[f"{meth}_calls"] = len(ts) / STEPS
                    d[f"{meth}_ms"] = sum(t[0] for t in ts) / STEPS * 1e3
                    d[f"{meth}_cpu_ms"] = sum(t[1] for t in ts) / STEPS * 1e3
                if have["pgss"]:
                    rows = c.execute(
                        "SELECT query, calls, total_exec_time, rows FROM pg_stat_statements "
                        "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
                        " AND query NOT ILIKE '%pg_stat%' AND query NOT ILIKE 'ALTER SYSTEM%'"
                        " AND query NOT ILIKE '%pg_reload_conf%' ORDER BY calls DESC, total_exec_time DESC"
                    ).fetchall()
                    d["statements"] = sum(r[1] for r in rows) / STEPS
                    d["exec_ms"] = sum(r[2] for r in rows) / STEPS
                    d["top"] = [(" ".join(r[0].split()), r[1] / STEPS, r[2] / STEPS) for r in rows[:12]]
            out[name] = d
        finally:
            if changed:
                _alter({k: None for k in on})
            s.drop()
    return have, out


# -- the report -------------------------------------------------------------------------

def sh(*cmd: str) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def mount_of(path: str) -> Tuple[str, str]:
    """(device, file system type) of the mount holding ``path``."""
    best = ("?", "?", "")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fstype = line.split()[:3]
                if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best[2]):
                    best = (dev, fstype, mnt)
    except OSError:
        pass
    return best[0], best[1]


def server() -> List[str]:
    names = ["server_version", "synchronous_commit", "fsync", "wal_sync_method",
             "full_page_writes", "shared_buffers", "default_toast_compression", "wal_compression"]
    vals = {n: sql(f"SELECT current_setting('{n}')")[0][0] for n in names}
    try:
        data = sql("SELECT current_setting('data_directory')")[0][0]
        dev, fstype = mount_of(data)
        where = f"data directory `{data}` on {dev}, {fstype}" + (
            " (not a tmpfs)" if fstype != "tmpfs" else " (TMPFS: not a real disk)")
    except psycopg.Error:
        where = "data directory not readable by this role"
    return [
        f"- PostgreSQL {vals['server_version']}, {where}, reached over a unix socket"
        if URL.startswith("postgresql://postgres@%2F") else
        f"- PostgreSQL {vals['server_version']}, {where}",
        "- settings: " + ", ".join(f"{n}={vals[n]}" for n in names[1:]),
    ]


def machine() -> List[str]:
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        f"- cores: {os.cpu_count()} ({model}); load average at the end: {load}",
        f"- kernel: {platform.system()} {platform.release()}; Python {platform.python_version()}",
    ]


def versions() -> str:
    pkgs = ["agentwal", "langgraph", "langgraph-checkpoint", "langgraph-checkpoint-postgres",
            "psycopg", "psycopg-binary", "psycopg-pool", "langchain-core", "ormsgpack"]
    out = []
    for p in pkgs:
        try:
            out.append(f"{p} {md.version(p)}")
        except md.PackageNotFoundError:
            pass
    out.append(f"libpq {psycopg.pq.version()}")
    return ", ".join(out)


def message_sizes() -> str:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    serde = JsonPlusSerializer()
    stamps: List[float] = []
    app = build_graph(None, stamps, 1)
    out = app.invoke({"messages": [], "step": 0, "last_tool": "", "phase": "start"})
    ai, tool = out["messages"][-2:]
    return (f"AIMessage with its tool call {len(serde.dumps_typed(ai)[1])} B, ToolMessage "
            f"{len(serde.dumps_typed(tool)[1])} B, serialized by LangGraph's serializer;"
            f" e.g. the tool result begins \u201c{_TOOL_TEXT[1][:90]}\u2026\u201d")


def fmt_bytes(n: float) -> str:
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= k:
            return f"{n / k:.2f} {unit}"
    return f"{n:.0f} B"


def main() -> None:
    started = _dt.datetime.now(_dt.timezone.utc)
    t_start = time.perf_counter()
    res: Dict[str, Dict[str, List[float]]] = {n: {} for n in ALL}
    for n in ALL:
        for k in ("payload_bytes", "relation_bytes", "step_ms", "last_ms", "threads_steps_s",
                  "get_fresh_ms", "open_ms", "get_warm_ms"):
            res[n][k] = []
    benches: List[Tuple[str, Callable]] = [
        (f"{STEPS}-step thread", bench_thread),
        (f"{THREADS} threads", bench_threads),
    ]
    for rep in range(REPS):
        for label, fn in benches:
            for name in order(rep):
                t0 = time.perf_counter()
                fn(rep, name, res)
                print(f"rep {rep + 1}/{REPS} {label:>16} {name:>8}: {time.perf_counter() - t0:6.1f} s",
                      file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    have, diag = diagnose()
    print(f"diagnostic pass: {time.perf_counter() - t0:6.1f} s", file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - t_start

    med = {n: {k: statistics.median(v) for k, v in res[n].items() if v} for n in ALL}
    a, p, m = med["agentwal"], med["postgres"], med["memory"]

    rows = []

    def row(what: str, key: str, fmt: Callable[[float], str], target: str = "",
            met: Optional[Callable[[float], bool]] = None) -> None:
        ratio = a[key] / p[key]
        shown = f"{ratio:.3f}" if ratio < 0.1 else f"{ratio:.2f}"
        verdict = ("met" if met(ratio) else "missed") if met is not None else ""
        ref = fmt(m[key]) if key in m else ""
        rows.append(f"| {what} | {fmt(a[key])} | {fmt(p[key])} | {shown}× | {target} | {verdict} "
                    f"| {ref} |")

    ms = lambda x: f"{x:.2f} ms"  # noqa: E731
    per_s = lambda x: f"{x:.0f}"  # noqa: E731
    row(f"1a. bytes in the database after {STEPS} steps: `pg_total_relation_size`, all the"
        " saver's tables", "relation_bytes", fmt_bytes, "≤ 0.1×", lambda r: r <= 0.1)
    row(f"1b. bytes of the stored values after {STEPS} steps (`octet_length`, see Setup)",
        "payload_bytes", fmt_bytes, "≤ 0.1×", lambda r: r <= 0.1)
    row(f"2. mean time per step, {STEPS}-step thread", "step_ms", ms, "≤ 0.5×",
        lambda r: r <= 0.5)
    row(f"3. mean time of the last {LAST} steps of the {STEPS}-step thread", "last_ms", ms,
        "≤ 0.5×", lambda r: r <= 0.5)
    row(f"4. {THREADS} graphs on {THREADS} Python threads ({THREAD_STEPS} steps each), total"
        " steps/s (higher is better)", "threads_steps_s", per_s, "≥ 2×", lambda r: r >= 2)
    row(f"5. `get_tuple` of the latest checkpoint after {STEPS} steps, fresh saver object",
        "get_fresh_ms", ms, "≤ 0.5×", lambda r: r <= 0.5)
    row("5b. opening that fresh saver object (not in the row above)", "open_ms", ms)
    row(f"`get_tuple` of the latest checkpoint after {STEPS} steps, warm (the saver that ran"
        " the thread)", "get_warm_ms", ms)

    tables = []
    for n in NAMES:
        for k in sorted(res[n]):
            if k.startswith("rel:"):
                tables.append(f"| {LABEL[n]} | `{k[4:]}` | {fmt_bytes(med[n][k])} |")

    diag_lines: List[str] = []
    if diag:
        keys = [("step_ms", "time per step (this run)"),
                ("put_calls", "`put` calls"), ("put_ms", "time in `put`, ms"),
                ("put_cpu_ms", "CPU time of the calling thread in `put`, ms"),
                ("put_writes_calls", "`put_writes` calls"), ("put_writes_ms", "time in `put_writes`, ms"),
                ("put_writes_cpu_ms", "CPU time of the calling thread in `put_writes`, ms"),
                ("get_tuple_calls", "`get_tuple` calls"), ("get_tuple_ms", "time in `get_tuple`, ms")]
        if have["pgss"]:
            keys += [("statements", "statements (pg_stat_statements, `track = top`)"),
                     ("exec_ms", "server execution time of those statements, ms")]
        keys += [("xact_commit", "transactions committed"),
                 ("xact_rollback", "transactions rolled back"),
                 ("wal_records", "WAL records"), ("wal_fpi", "WAL full-page images"),
                 ("wal_bytes", "WAL bytes"), ("wal_write", "WAL writes"),
                 ("wal_sync", "WAL syncs (fsync)")]
        if have["io_timing"]:
            keys += [("wal_write_ms", "time in WAL writes, ms (`track_wal_io_timing`)"),
                     ("wal_sync_ms", "time in WAL syncs, ms (`track_wal_io_timing`)")]
        diag_lines += [
            f"One more {STEPS}-step thread per saver after the reps (not part of the figures above):"
            " the saver's `put`, `put_writes` and `get_tuple` timed in this process (LangGraph calls"
            " them from its executor threads, `put_writes` and `put` may overlap, and a call's time"
            " includes waiting for the saver's lock), and what the server did: whole-server counters"
            " (`pg_stat_database` of this database, `pg_stat_wal`) read before the thread and after"
            " the saver is closed, so a few of the counted items are the benchmark's own queries,"
            " autovacuum or checkpoints. Per step:",
            "",
            "| per step | AgentwalSaver | PostgresSaver |",
            "|---|---|---|",
        ]
        for k, what in keys:
            f: Callable[[float], str] = fmt_bytes if k == "wal_bytes" else (lambda x: f"{x:.2f}")
            diag_lines.append(f"| {what} | {f(diag['agentwal'][k])} | {f(diag['postgres'][k])} |")
        if have["pgss"]:
            for n in NAMES:
                diag_lines += ["", f"{LABEL[n]}'s statements, per step (most called first):", "",
                               "| calls/step | ms/step | statement |", "|---|---|---|"]
                for q, ncalls, t in diag[n]["top"]:
                    q = (q if len(q) <= 160 else q[:157] + "...").replace("|", "\\|")
                    diag_lines.append(f"| {ncalls:.2f} | {t:.3f} | `{q}` |")
        else:
            diag_lines += ["", "(The server does not preload `pg_stat_statements`: no statement"
                           " counts. scripts/bench-python-pg.sh's own cluster does.)"]

    head = sh("git", "rev-parse", "--short", "HEAD")
    dirty = sh("git", "status", "--porcelain", "--untracked-files=no")
    lines = [
        "# LangGraph benchmark on PostgreSQL: AgentwalSaver against PostgresSaver",
        "",
        f"`bash scripts/bench-python-pg.sh` (python/bench/pg_bench.py){' in QUICK mode: sizes too small to mean anything' if QUICK else ''}.",
        f"Run {started:%Y-%m-%d %H:%M} UTC on commit `{head}`{' (with uncommitted changes)' if dirty not in ('', '?') else ''}, "
        f"{REPS} reps, {elapsed / 60:.1f} min.",
        "",
        "## Machine, server and versions",
        "",
        *machine(),
        *server(),
        f"- packages: {versions()}",
        "- the benchmark (client) and the server share the machine's cores.",
        "",
        "## Setup",
        "",
        f"- The graph: one node looping on itself; each step appends an AIMessage with a tool call"
        f" and a ToolMessage through `add_messages` ({message_sizes()}) and sets 3 other keys;"
        f" `durability=\"sync\"`; one `invoke` runs a whole thread. The text: English-like"
        f" sentences of words drawn (fixed seed) from a list of {len(set(_WORDS))} common words,"
        f" different at every step.",
        "- AgentwalSaver: `AgentwalSaver(url, schema=<fresh>)`, the PgStore's defaults; one saver"
        " object (one store handle, its own connection pool) also serves all the Python threads.",
        "- PostgresSaver: `PostgresSaver.from_conn_string(conninfo)` (its documented constructor:"
        " one connection, autocommit, `prepare_threshold=0`, `dict_row`), then `setup()`, for the"
        f" single-thread rows; the threaded row uses what its docs show for concurrent use,"
        f" `PostgresSaver(ConnectionPool(conninfo, max_size={POOL_MAX}, kwargs={{autocommit: True,"
        f" prepare_threshold: 0, row_factory: dict_row}}))`, one saver shared by all threads."
        " (PostgresSaver 3.0.5 still takes its `self.lock` around every operation, pool or not:"
        " its operations run one at a time.) Its tables are in a schema of their own"
        " (`options=-c search_path=<fresh>` in the conninfo).",
        "- Every measurement makes fresh schemas and drops them after it. Both savers run in this"
        " one process against the same server, side by side, the first one alternating from rep"
        " to rep. Each figure is the median over the reps; the ratio is agentwal's over"
        " PostgresSaver's. `InMemorySaver` (LangGraph's, no database) runs the time measurements"
        " too: what LangGraph itself costs per step.",
        f"- Time per step: the thread's `invoke` wall time over its {STEPS} steps; last {LAST}: from"
        f" one run of the node to the next (the step's checkpoint written in between)."
        f" `get_tuple` warm: the median of {GET_WARM} calls (each after a `gc.collect()`) on the"
        f" saver that ran the thread; fresh saver object: the first call on a new saver object"
        f" (a new `AgentwalSaver(url, schema=...)`; a new `from_conn_string` connection, no"
        f" `setup()`), median of {REOPENS} per rep, the open timed separately.",
        "- Bytes: (a) `pg_total_relation_size` (heap, TOAST, indexes, free-space and visibility"
        " maps) summed over every table of the saver's schema, right after the run (no VACUUM);"
        " (b) the stored values: agentwal `sum(octet_length(body))` of `checkpoints` plus the"
        " `args`/`result` of `calls`; PostgresSaver `octet_length(blob)` of `checkpoint_blobs` and"
        " `checkpoint_writes` plus `pg_column_size` of the jsonb `checkpoint` and `metadata` of"
        " `checkpoints`. `octet_length` is a value's length before PostgreSQL's TOAST compression"
        " (pglz, which (a) includes).",
        "- The machine is shared and noisy (2 cores, other work running); the rep-to-rep spread is"
        " in \"Every rep\".",
        "",
        "## Results (medians)",
        "",
        "| measurement | AgentwalSaver | PostgresSaver | ratio | target | | InMemorySaver (reference) |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"## Tables after the {STEPS}-step thread (medians of `pg_total_relation_size`)",
        "",
        "| saver | table | bytes |",
        "|---|---|---|",
        *tables,
        "",
        "## What the server did per step",
        "",
        *diag_lines,
        "",
        "## Every rep",
        "",
        "| measurement | AgentwalSaver | PostgresSaver | InMemorySaver |",
        "|---|---|---|---|",
    ]
    for k in res["agentwal"]:
        if k.startswith("rel:"):
            continue
        f = (lambda x: f"{x:.0f}") if "bytes" in k or "steps_s" in k else (lambda x: f"{x:.3f}")
        lines.append(f"| {k} | {', '.join(f(x) for x in res['agentwal'][k])} "
                     f"| {', '.join(f(x) for x in res['postgres'][k])} "
                     f"| {', '.join(f(x) for x in res['memory'][k])} |")
    report = "\n".join(lines) + "\n"
    print(report)
    out = os.environ.get("AGENTWAL_BENCH_OUT")
    if out:
        with open(out, "w") as f:
            f.write(report)


if __name__ == "__main__":
    main()
