"""Probes behind figures in bench-results/history.md and docs that pg_bench.py does not print.

Run from the repository root, in the virtualenv scripts/bench-python-pg.sh builds, against a
server named as for pg_bench.py (``AGENTWAL_PG_HOST`` or ``AGENTWAL_PG_URL``)::

    target/pybench-pg/bin/python python/bench/pg_probes.py threads-cpu [REPS]
    target/pybench-pg/bin/python python/bench/pg_probes.py fresh-get-tuple [CALLS]

``threads-cpu``: pg_bench.py's threaded measurement (16 graphs of 50 steps on 16 threads, one
saver) for InMemorySaver, AgentwalSaver and PostgresSaver in turn, REPS times (default 3);
prints steps/s and CPU per step, of this process (``os.times``) and of the server's processes
(``/proc``, so the server must run on this machine).

``fresh-get-tuple``: one 200-step thread written by AgentwalSaver, then CALLS (default 40)
``get_tuple`` calls, each on a fresh saver object; prints the medians of the whole call, of
its load of the thread (``_load``) and of building the checkpoint tuple.

``fresh-pair``: the same 200-step thread written by AgentwalSaver and by PostgresSaver, then
CALLS (default 20) rounds of one fresh saver object's first ``get_tuple`` on each, their
order alternating; prints both medians, their ratio, the median of the per-round ratios,
and the medians of the opens (not in the call's time).

``deserialize``: what LangGraph's own deserializing of that thread's 401 messages costs, the
floor of any saver's ``get_tuple``: ``loads_typed`` of each message serialized alone (how
AgentwalSaver stores a list) and of the list serialized whole (how PostgresSaver does);
medians of 30 each, twice, alternating. No server needed.

``fan-out-writes``: ``put_writes`` of one more task at a checkpoint that already holds the
writes of N tasks (default 300), each 2 writes; prints the calling thread's median CPU per
call (``time.thread_time``) over 200 calls, for AgentwalSaver and InMemorySaver.

``keys``: on AgentwalSaver's 200-step thread, what copying every key of the loaded state
into Python (``StateView.var_keys()``) costs against one ``last_key`` lookup.

``composition``: AgentwalSaver's 200-step thread's variables by kind (checkpoints, blobs,
writes): how many, their payload bytes (the bytes and strings in them), and how many of
each, with their bytes, a fresh saver's ``get_tuple`` reads.

``put-cpu``: six 50-step threads on one AgentwalSaver, one after another; the median CPU
of a ``put`` and of a ``put_writes`` on their thread, split into the store's ``commit_if``
(the extension converts the delta with the GIL held, then releases it), LangGraph's
serializer and the rest, the saver's own Python.

``gil``: ``threads-cpu`` for AgentwalSaver, REPS times (default 3) as it is and with 200 µs
of busy Python added to each ``put``, alternating: whether the 16-thread row is bound by
time spent holding the GIL.

``hot-reads``: on AgentwalSaver's 200-step thread, REPS times (default 1), the medians of
the reads a warm worker repeats: ``PgStore.latest_info`` (1,000 calls), a warm
``load_latest_view`` (100) and a warm saver's ``get_tuple``, which checks ``latest_info``
first (100).

``fleet-turns``: two workers (saver objects with their own connections) each for
AgentwalSaver and PostgresSaver on a 180-step thread: ROUNDS (default and at most 20) times,
alternating savers, one worker takes a one-step turn and the other's ``get_tuple`` is timed,
one turn behind; prints both medians and their ratio.

``per-key-fetch``: what a per-key layout on PostgreSQL would fetch for a fresh ``get_tuple``
of the 200-step thread: its variables copied into a table keyed by ``(task, key)``, then
CALLS (default 30) rounds, alternating, on new connections: the rows a load of the whole
state fetches today, every blob with the latest checkpoint and its writes by key range, and
exactly the variables a fresh ``get_tuple`` reads; prints rows, bytes and medians.

``list-chain``: on the 200-step thread's loaded state, ROUNDS (default 60) times, a new
index's items of the message list (401 items behind 200 bases), resolved in the engine
(``StateView.list_items``) and by the saver's Python walk, alternating; prints both medians.

Commands for the last eleven::

    target/pybench-pg/bin/python python/bench/pg_probes.py fresh-pair [CALLS]
    target/pybench-pg/bin/python python/bench/pg_probes.py deserialize
    target/pybench-pg/bin/python python/bench/pg_probes.py fan-out-writes [N]
    target/pybench-pg/bin/python python/bench/pg_probes.py keys
    target/pybench-pg/bin/python python/bench/pg_probes.py composition
    target/pybench-pg/bin/python python/bench/pg_probes.py put-cpu
    target/pybench-pg/bin/python python/bench/pg_probes.py gil [REPS]
    target/pybench-pg/bin/python python/bench/pg_probes.py hot-reads [REPS]
    target/pybench-pg/bin/python python/bench/pg_probes.py fleet-turns [ROUNDS]
    target/pybench-pg/bin/python python/bench/pg_probes.py per-key-fetch [CALLS]
    target/pybench-pg/bin/python python/bench/pg_probes.py list-chain [ROUNDS]
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import threading
import time
import uuid
from typing import Any, Callable, Dict, List

import pg_bench as b

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

import agentwal.langgraph as lg
from agentwal import PgStore
from agentwal.langgraph import AgentwalSaver

THREADS = 16
THREAD_STEPS = 50
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def server_cpu_s() -> float:
    """CPU seconds of every process named postgres on this machine, with their reaped
    children's (utime, stime, cutime, cstime)."""
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if not f.read().startswith("postgres"):
                    continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended meanwhile
        total += sum(int(x) for x in fields[11:15])
    return total / CLOCK_TICKS


def threads_cpu(name: str) -> None:
    """One threaded run of saver ``name``; prints its steps/s and CPU per step."""
    s = b.Saver(name)
    try:
        saver = s.open(pool=True, setup=True)
        gc.collect()
        barrier = threading.Barrier(THREADS + 1)

        def worker(i: int) -> None:
            barrier.wait()
            b.run_thread(saver, f"thread-{i}", THREAD_STEPS)

        ts = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
        for t in ts:
            t.start()
        c0, p0 = os.times(), server_cpu_s()
        barrier.wait()
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        wall = time.perf_counter() - t0
        c1, p1 = os.times(), server_cpu_s()
        n = THREADS * THREAD_STEPS
        client = (c1.user - c0.user) + (c1.system - c0.system)
        print(
            f"{name:9s} steps/s {n / wall:6.0f}  client CPU/step {client / n * 1e3:.2f} ms  "
            f"server CPU/step {(p1 - p0) / n * 1e3:.2f} ms",
            flush=True,
        )
        if name != "memory":
            s.close()
    finally:
        s.drop()


def fresh_get_tuple(calls: int) -> None:
    """Prints the medians of a fresh saver's get_tuple and of its two parts."""
    s = b.Saver("agentwal")
    try:
        saver = s.open(setup=True)
        b.run_thread(saver, "thread-200", 200)
        saver.close()
        times: Dict[str, List[float]] = {"load": [], "tuple": [], "total": []}

        def timed(key: str, f: Any) -> Any:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return f(*args, **kwargs)
                finally:
                    times[key].append(time.perf_counter() - t0)

            return wrapper

        load, build = AgentwalSaver._load, lg.checkpoint_tuple
        AgentwalSaver._load = timed("load", load)  # type: ignore[method-assign]
        lg.checkpoint_tuple = timed("tuple", build)
        try:
            config = {"configurable": {"thread_id": "thread-200"}}
            for _ in range(calls):
                fresh = AgentwalSaver(b.URL, schema=s.schema)
                gc.collect()
                t0 = time.perf_counter()
                fresh.get_tuple(config)
                times["total"].append(time.perf_counter() - t0)
                fresh.close()
        finally:
            AgentwalSaver._load, lg.checkpoint_tuple = load, build  # type: ignore[method-assign]
        print("  ".join(f"{k} {statistics.median(v) * 1e3:.2f} ms" for k, v in times.items()))
    finally:
        s.drop()


def median_us(f: Callable[[], Any], n: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """Median of ``n`` timed calls of ``f``, in µs, by ``clock``."""
    xs = []
    for _ in range(n):
        t0 = clock()
        f()
        xs.append(clock() - t0)
    return statistics.median(xs) * 1e6


CONFIG_200 = {"configurable": {"thread_id": "thread-200"}}


def fresh_pair(calls: int) -> None:
    """Prints both savers' fresh get_tuple medians and their ratios."""
    savers = {}
    try:
        for name in ("agentwal", "postgres"):
            s = savers[name] = b.Saver(name)
            b.run_thread(s.open(setup=True), "thread-200", 200)
            s.close()
        got: Dict[str, List[float]] = {"agentwal": [], "postgres": []}
        opens: Dict[str, List[float]] = {"agentwal": [], "postgres": []}
        for i in range(calls):
            for name in ("agentwal", "postgres") if i % 2 == 0 else ("postgres", "agentwal"):
                opened, first = b.fresh_get(savers[name], CONFIG_200, 401)
                opens[name].append(opened)
                got[name].append(first)
    finally:
        for s in savers.values():
            s.drop()
    a, p = (statistics.median(got[k]) * 1e3 for k in ("agentwal", "postgres"))
    paired = statistics.median(x / y for x, y in zip(got["agentwal"], got["postgres"]))
    oa, op = (statistics.median(opens[k]) * 1e3 for k in ("agentwal", "postgres"))
    print(f"fresh get_tuple: agentwal {a:.2f} ms, postgres {p:.2f} ms, ratio {a / p:.2f} "
          f"(median per round {paired:.2f}); opens {oa:.2f} / {op:.2f} ms")


def thread_messages() -> List[Any]:
    """The 401 messages of the 200-step thread, as the graph builds them."""
    app = b.build_graph(InMemorySaver(), [], 200)
    config = {"configurable": {"thread_id": "t"}, "recursion_limit": 210}
    out = app.invoke({"messages": [HumanMessage(content="find it", id="h-0")], "step": 0,
                      "last_tool": "", "phase": "start"}, config)
    return out["messages"]


def deserialize() -> None:
    """Prints LangGraph's loads_typed of the messages, one by one and as one list."""
    serde = JsonPlusSerializer()
    msgs = thread_messages()
    items = [serde.dumps_typed(m) for m in msgs]
    whole = serde.dumps_typed(msgs)
    assert [serde.loads_typed(i) for i in items] == serde.loads_typed(whole) == msgs
    for _ in range(2):
        each = median_us(lambda: [serde.loads_typed(i) for i in items], 30)
        one = median_us(lambda: serde.loads_typed(whole), 30)
        print(f"{len(msgs)} messages: one by one {each / 1e3:.2f} ms, as one list {one / 1e3:.2f} ms")


def fan_out_writes(n: int) -> None:
    """Prints put_writes' CPU per call at a checkpoint holding n tasks' writes."""
    for name in ("agentwal", "memory"):
        s = b.Saver(name)
        try:
            saver = s.open(setup=True)
            b.run_thread(saver, "fan", 3)
            config = saver.get_tuple({"configurable": {"thread_id": "fan"}}).config
            for t in range(n):
                saver.put_writes(config, [("a", t), ("b", "x" * 100)], f"task-{t}")

            def one() -> None:
                saver.put_writes(config, [("a", 1), ("b", "y" * 100)], str(uuid.uuid4()))

            cpu = median_us(one, 200, time.thread_time)
            print(f"{name:8s} put_writes at a checkpoint with {n} tasks' writes: {cpu:.0f} µs CPU")
            if name != "memory":
                s.close()
        finally:
            s.drop()


def keys() -> None:
    """Prints var_keys() against last_key on the 200-step thread's loaded state."""
    s = b.Saver("agentwal")
    try:
        saver = s.open(setup=True)
        b.run_thread(saver, "thread-200", 200)
        view = saver.store.load_latest_view(next(iter(saver._index)))
        every = median_us(view.var_keys, 200)
        last = median_us(lambda: view.last_key("cp:"), 200)
        print(f"{len(view)} keys: var_keys() {every:.0f} µs, last_key('cp:') {last:.1f} µs")
        s.close()
    finally:
        s.drop()


def payload_bytes(value: Any) -> int:
    """The bytes and str lengths inside a variable's value (its payload, not its framing)."""
    if isinstance(value, (bytes, str)):
        return len(value)
    if isinstance(value, (list, tuple)):
        return sum(payload_bytes(v) for v in value)
    return 0


def composition() -> None:
    """Prints the 200-step thread's variables by kind (checkpoint, blob, write): how many,
    their payload bytes, and how many of each a fresh get_tuple reads."""
    s = b.Saver("agentwal")
    try:
        saver = s.open(setup=True)
        b.run_thread(saver, "thread-200", 200)
        saver.close()
        fresh = AgentwalSaver(b.URL, schema=s.schema)
        read: List[str] = []
        load = fresh._load

        def counting_load(task: str) -> Any:
            idx = load(task)
            var = idx._view.var
            idx._get = lambda key: (read.append(key), idx._set.get(key) or var(key))[1]
            return idx

        fresh._load = counting_load  # type: ignore[method-assign]
        fresh.get_tuple(CONFIG_200)
        view = fresh._index[next(iter(fresh._index))]._view
        kinds = {"cp:": "checkpoints", "b:": "blobs", "w:": "writes"}
        for prefix, kind in kinds.items():
            keys = view.var_keys(prefix)
            total = sum(payload_bytes(view.var(k)) for k in keys)
            mine = [k for k in read if k.startswith(prefix)]
            used = sum(payload_bytes(view.var(k)) for k in mine)
            print(f"{kind:11s} {len(keys):5d} variables, {total / 1e3:7.1f} kB; "
                  f"a fresh get_tuple reads {len(mine)} of them, {used / 1e3:.1f} kB")
        fresh.close()
    finally:
        s.drop()


class _Timed:
    """A proxy that adds the calling thread's CPU time inside ``names`` to ``spent[key]``."""

    def __init__(self, target: Any, names: List[str], key: str, spent: threading.local) -> None:
        self._target, self._names, self._key, self._spent = target, names, key, spent

    def __getattr__(self, name: str) -> Any:
        f = getattr(self._target, name)
        if name not in self._names:
            return f

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time()
            try:
                return f(*args, **kwargs)
            finally:
                d = self._spent.__dict__
                d[self._key] = d.get(self._key, 0.0) + time.thread_time() - t0

        return timed


def put_cpu() -> None:
    """Prints the CPU a put and a put_writes take on their thread, split into the store's
    commit call, LangGraph's serializer and the rest (the saver's own Python)."""
    s = b.Saver("agentwal")
    try:
        saver = s.open(setup=True)
        spent = threading.local()
        saver.store = _Timed(saver.store, ["commit_if"], "commit", spent)
        saver.serde = _Timed(saver.serde, ["dumps_typed", "loads_typed"], "serde", spent)
        got: Dict[str, List[Dict[str, float]]] = {"put": [], "put_writes": []}
        for name in got:
            method = getattr(AgentwalSaver, name)

            def wrapper(self: Any, *args: Any, _m: Any = method, _n: str = name, **kw: Any) -> Any:
                spent.__dict__.clear()
                t0 = time.thread_time()
                try:
                    return _m(self, *args, **kw)
                finally:
                    got[_n].append({"total": time.thread_time() - t0, **spent.__dict__})

            setattr(saver, name, wrapper.__get__(saver))
        b.run_thread(saver, "warm", 10)
        for v in got.values():
            v.clear()
        for i in range(6):
            b.run_thread(saver, f"thread-{i}", THREAD_STEPS)
        for name, rows in got.items():
            med = {k: statistics.median(r.get(k, 0.0) for r in rows) * 1e6
                   for k in ("total", "commit", "serde")}
            rest = statistics.median(r["total"] - r.get("commit", 0) - r.get("serde", 0)
                                     for r in rows) * 1e6
            print(f"{name:10s} CPU µs (medians of {len(rows)}): total {med['total']:.0f}, "
                  f"commit_if {med['commit']:.0f}, serializer {med['serde']:.0f}, "
                  f"the rest {rest:.0f}")
        saver.close()
    finally:
        s.drop()


def gil(reps: int) -> None:
    """threads_cpu for AgentwalSaver, alternately as it is and with 200 µs of busy Python
    (GIL held) added to each put: how far the 16-thread row moves with GIL-held time."""
    put = AgentwalSaver.put

    def slower(self: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 200e-6:
            pass
        return put(self, *args, **kwargs)

    try:
        for _ in range(reps):
            for label, f in (("as is", put), ("+200 µs", slower)):
                AgentwalSaver.put = f  # type: ignore[method-assign]
                print(f"{label:8s} ", end="", flush=True)
                threads_cpu("agentwal")
    finally:
        AgentwalSaver.put = put  # type: ignore[method-assign]


def hot_reads() -> None:
    """Prints the medians of the reads a warm saver repeats: PgStore.latest_info, a warm
    load_latest_view of the 200-step thread, and a warm saver's get_tuple of it."""
    s = b.Saver("agentwal")
    try:
        saver = s.open(setup=True)
        b.run_thread(saver, "thread-200", 200)
        store, task = saver.store, lg.task_name("thread-200", "")
        saver.get_tuple(CONFIG_200)
        info = median_us(lambda: store.latest_info(task), 1000)
        load = median_us(lambda: store.load_latest_view(task), 100)
        get = median_us(lambda: saver.get_tuple(CONFIG_200), 100)
        print(f"latest_info {info:.0f} µs, load_latest_view {load:.0f} µs, "
              f"warm get_tuple {get:.0f} µs")
        saver.close()
    finally:
        s.drop()


FLEET_FIRST_STEPS = 180  # pg_bench's texts run to step 200: room for 20 one-step turns


def fleet_turns(rounds: int) -> None:
    """Two workers (savers with their own connections) on a 180-step thread: the writer
    takes a one-step turn, then the other's get_tuple is timed, its cache one turn behind;
    for AgentwalSaver and PostgresSaver, alternating, ``rounds`` (at most 20) turns each.
    Prints both medians and the ratio."""
    from contextlib import ExitStack

    from langgraph.checkpoint.postgres import PostgresSaver

    savers = {name: b.Saver(name) for name in ("agentwal", "postgres")}
    got: Dict[str, List[float]] = {"agentwal": [], "postgres": []}
    try:
        with ExitStack() as stack:
            workers = {}
            for name, s in savers.items():
                b.run_thread(s.open(setup=True), "thread-200", FLEET_FIRST_STEPS)
                s.close()
                if name == "agentwal":
                    pair = [stack.enter_context(AgentwalSaver(b.URL, schema=s.schema))
                            for _ in range(2)]
                else:
                    pair = [stack.enter_context(PostgresSaver.from_conn_string(s.conninfo))
                            for _ in range(2)]
                pair[1].get_tuple(CONFIG_200)  # the reader's cache, where it has one
                workers[name] = pair
            for i in range(rounds):
                for name in ("agentwal", "postgres") if i % 2 == 0 else ("postgres", "agentwal"):
                    writer, reader = workers[name]
                    # One agent step: the graph stops once the thread has this many.
                    app = b.build_graph(writer, [], FLEET_FIRST_STEPS + 1 + i)
                    app.invoke({"messages": [HumanMessage(content=f"turn {i}", id=f"u-{i}")]},
                               CONFIG_200, durability="sync")
                    gc.collect()
                    t0 = time.perf_counter()
                    reader.get_tuple(CONFIG_200)
                    got[name].append(time.perf_counter() - t0)
    finally:
        for s in savers.values():
            s.drop()
    a, p = (statistics.median(got[k]) * 1e3 for k in ("agentwal", "postgres"))
    print(f"get_tuple one turn behind: agentwal {a:.2f} ms, postgres {p:.2f} ms, "
          f"ratio {a / p:.2f}")


def per_key_fetch(calls: int) -> None:
    """What a per-key layout would fetch for a fresh get_tuple: the 200-step thread's
    variables copied into a table keyed by (task, key), fetched on new connections by key
    range and by exact key, against the rows a load of the whole state fetches today."""
    import psycopg

    s = b.Saver("agentwal")
    try:
        saver = s.open(setup=True)
        b.run_thread(saver, "thread-200", 200)
        saver.close()
        task = lg.task_name("thread-200", "")
        read: List[str] = []
        get = lg._TaskIndex._get

        def spy(self: Any, key: str) -> Any:
            read.append(key)
            return get(self, key)

        lg._TaskIndex._get = spy  # type: ignore[method-assign]
        try:
            with AgentwalSaver(b.URL, schema=s.schema) as fresh:
                view = fresh.store.load_latest_view(task)
                # Every variable through `_get`: the list's chain walked in Python.
                loaded = _NoEngineWalk(view)
                fresh.store = _Loading(fresh.store, loaded)
                fresh.get_tuple(CONFIG_200)
        finally:
            lg._TaskIndex._get = get  # type: ignore[method-assign]
        needed = sorted(set(read))
        with psycopg.connect(b.URL, autocommit=True) as c:
            c.execute(f"SET search_path TO {s.schema}")
            c.execute('CREATE TABLE kv (task bytea, key text COLLATE "C", value bytea, '
                      "PRIMARY KEY (task, key))")
            with c.cursor() as cur:
                cur.executemany("INSERT INTO kv VALUES (%s, %s, %s)",
                                [(task.encode(), k, _payload(view.var(k)))
                                 for k in view.var_keys()])
            c.execute("ANALYZE kv")
        tk = task.encode()
        queries = {
            "whole state's rows": (_FOLD_ROWS_SQL, (tk, tk)),
            "blobs + latest checkpoint + its writes, by range": (_RANGES_SQL, (tk, tk)),
            "exactly the variables read": (
                "SELECT key, value FROM kv WHERE task = %s AND key = ANY(%s)", (tk, needed)),
        }
        got: Dict[str, List[float]] = {k: [] for k in queries}
        sizes: Dict[str, str] = {}
        for i in range(calls):
            for name in list(queries) if i % 2 == 0 else list(queries)[::-1]:
                q, args = queries[name]
                with psycopg.connect(b.URL, autocommit=True) as c:
                    c.execute(f"SET search_path TO {s.schema}")
                    t0 = time.perf_counter()
                    rows = c.execute(q, args, binary=True).fetchall()
                    got[name].append(time.perf_counter() - t0)
                sizes[name] = f"{len(rows)} rows, {sum(len(r[-1]) for r in rows) / 1e3:.0f} kB"
        for name, xs in got.items():
            print(f"{name}: {sizes[name]}, {statistics.median(xs) * 1e3:.2f} ms")
    finally:
        s.drop()


class _Loading:
    """A store whose ``load_latest_view`` answers ``view``."""

    def __init__(self, store: Any, view: Any) -> None:
        self._store, self._view = store, view

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def load_latest_view(self, task: str) -> Any:
        return self._view


def _payload(value: Any) -> bytes:
    """A variable's payload as one bytes value (its bytes and strings, concatenated)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, list):
        return b"".join(_payload(v) for v in value)
    return repr(value).encode()


# The rows a load of the latest state fetches today (as LATEST_SQL's fold), body last.
_FOLD_ROWS_SQL = """SELECT seq, snapshot, schema_version, created_at_ms, body FROM checkpoints
    WHERE task = %s AND seq >= coalesce((SELECT max(seq) FROM checkpoints
        WHERE task = %s AND snapshot), 0) ORDER BY seq"""
# Every blob, the latest checkpoint and its writes, by key range, from the kv table.
_RANGES_SQL = """WITH cp AS (SELECT max(key) AS k FROM kv
        WHERE task = %s AND key >= 'cp:' AND key < 'cp;')
    SELECT key, value FROM kv WHERE task = %s AND (key = (SELECT k FROM cp)
        OR (key >= 'b:' AND key < 'b;')
        OR (key >= 'w:["' || substr((SELECT k FROM cp), 4)
            AND key < 'w:["' || substr((SELECT k FROM cp), 4) || '"~'))"""


class _NoEngineWalk:
    """A StateView whose ``list_items`` declines: the saver walks list chains in Python."""

    def __init__(self, view: Any) -> None:
        self._view = view

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view, name)

    def __contains__(self, key: str) -> bool:
        return key in self._view

    def list_items(self, *args: Any) -> None:
        return None


def list_chain(rounds: int) -> None:
    """On the 200-step thread's loaded state, a new index's items of the message list
    (401 items, 200 bases): resolved in the engine (StateView.list_items) against the
    saver's Python walk, alternating; prints both medians."""
    s = b.Saver("agentwal")
    try:
        saver = s.open(setup=True)
        b.run_thread(saver, "thread-200", 200)
        saver.close()
        store = PgStore.open(b.URL, schema=s.schema)
        view = store.load_latest_view(lg.task_name("thread-200", ""))
        idx = lg._TaskIndex(view.seq, view.created_at_ms, view)
        serde = JsonPlusSerializer()
        version = serde.loads_typed(idx.cp(idx.latest()).checkpoint)["channel_versions"][
            "messages"]
        got: Dict[str, List[float]] = {"engine": [], "python": []}
        for _ in range(rounds):
            for name, v in (("engine", view), ("python", _NoEngineWalk(view))):
                fresh = lg._TaskIndex(view.seq, view.created_at_ms, v)
                t0 = time.perf_counter()
                items = fresh.items("messages", version)
                got[name].append(time.perf_counter() - t0)
                assert items is not None and len(items) == 401
        store.close()
        print("message list's items on a new index: " + ", ".join(
            f"{k} {statistics.median(x) * 1e3:.3f} ms" for k, x in got.items()))
    finally:
        s.drop()


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    count = int(sys.argv[2]) if len(sys.argv) > 2 else None
    if what == "threads-cpu":
        for _ in range(count or 3):
            for name in ("memory", "agentwal", "postgres"):
                threads_cpu(name)
    elif what == "fresh-get-tuple":
        fresh_get_tuple(count or 40)
    elif what == "fresh-pair":
        fresh_pair(count or 20)
    elif what == "deserialize":
        deserialize()
    elif what == "fan-out-writes":
        fan_out_writes(count or 300)
    elif what == "keys":
        keys()
    elif what == "composition":
        composition()
    elif what == "put-cpu":
        put_cpu()
    elif what == "gil":
        gil(count or 3)
    elif what == "list-chain":
        list_chain(count or 60)
    elif what == "per-key-fetch":
        per_key_fetch(count or 30)
    elif what == "fleet-turns":
        fleet_turns(min(count or 20, 200 - FLEET_FIRST_STEPS))
    elif what == "hot-reads":
        for _ in range(count or 1):
            hot_reads()
    else:
        sys.exit("usage: pg_probes.py threads-cpu [REPS] | fresh-get-tuple [CALLS] | "
                 "fresh-pair [CALLS] | deserialize | fan-out-writes [N] | keys | composition | "
                 "put-cpu | gil [REPS] | hot-reads [REPS] | fleet-turns [ROUNDS] | "
                 "per-key-fetch [CALLS] | list-chain [ROUNDS]")


if __name__ == "__main__":
    main()
