"""Two probes behind figures in bench-results/history.md that pg_bench.py does not print.

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
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import threading
import time
from typing import Any, Dict, List

import pg_bench as b

import agentwal.langgraph as lg
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


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    count = int(sys.argv[2]) if len(sys.argv) > 2 else None
    if what == "threads-cpu":
        for _ in range(count or 3):
            for name in ("memory", "agentwal", "postgres"):
                threads_cpu(name)
    elif what == "fresh-get-tuple":
        fresh_get_tuple(count or 40)
    else:
        sys.exit("usage: pg_probes.py threads-cpu [REPS] | fresh-get-tuple [CALLS]")


if __name__ == "__main__":
    main()
