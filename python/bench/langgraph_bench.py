"""AgentwalSaver against SqliteSaver on one LangGraph tool-calling loop.

Run it with ``bash scripts/bench-python.sh`` (builds the venv, then runs this file from the
repository root). ``AGENTWAL_BENCH_QUICK=1``: small sizes, one rep (CI checks that it runs).
``AGENTWAL_BENCH_OUT=path.md``: also write the Markdown report there. ``AGENTWAL_BENCH_REPS``:
the number of reps (default 5). ``AGENTWAL_BENCH_DIR``: where the stores go (default
``target/bench-langgraph``: the repository's disk, not a tmpfs).

The graph: one node, ``agent``, looping on itself; each super-step (a "step") appends an
AIMessage with a tool call (~300 B serialized) and a ToolMessage (~1.5 KB) through
``add_messages`` and sets 3 other keys (``step``, ``last_tool``, ``phase``). It runs with
``durability="sync"``: each step's writes and checkpoint are on disk before the next step.

The savers, as users run them:

- ``AgentwalSaver(dir)``: the store's defaults (``sync="always"``: fsync per commit batch).
- ``SqliteSaver.from_conn_string(file)``: the documented constructor, i.e. one
  ``sqlite3.connect(file, check_same_thread=False)`` connection; ``setup()`` turns on
  ``journal_mode=WAL``; everything else is SQLite's default (``synchronous`` is read back and
  reported: FULL here, an fsync of the WAL per commit). One saver object (one connection,
  which the saver guards with its lock) is shared by all Python threads, as its docs say.

Each measurement runs both savers side by side in this one process, alternating which goes
first from rep to rep; figures are medians over the reps.
"""

from __future__ import annotations

import datetime as _dt
import gc
import importlib.metadata as md
import operator
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from typing import Annotated, Any, Callable, Dict, List, Tuple, TypedDict

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from agentwal.langgraph import AgentwalSaver

QUICK = os.environ.get("AGENTWAL_BENCH_QUICK") == "1"
REPS = int(os.environ.get("AGENTWAL_BENCH_REPS", "1" if QUICK else "5"))
STEPS = 20 if QUICK else 200  # the 200-step thread
LONG_STEPS = 30 if QUICK else 1000  # the 1,000-step thread
LAST = 10  # its last steps timed
THREADS = 4 if QUICK else 16
THREAD_STEPS = 5 if QUICK else 50  # steps per graph in the threaded run
GET_WARM = 5 if QUICK else 30  # warm get_tuple calls, median taken
REOPENS = 2 if QUICK else 5  # fresh saver objects per rep, first get_tuple each
ROOT = os.path.abspath(os.environ.get("AGENTWAL_BENCH_DIR", "target/bench-langgraph"))
NAMES = ("agentwal", "sqlite")
# InMemorySaver: no disk at all, a reference for the time rows (LangGraph's own cost).
ALL = NAMES + ("memory",)

# ~60 B of text plus a tool call with ~40 B of args: ~300 B serialized with the message's
# other fields. Tool results: ~1.5 KB serialized. Random letters (seeded), so that neither saver gains from repeated bytes.
_rng = random.Random(15)


def _text(n: int) -> str:
    return "".join(_rng.choice("abcdefghijklmnopqrstuvwxyz     ") for _ in range(n))


_AI_TEXT = [_text(60) for _ in range(64)]
_QUERY = [_text(40) for _ in range(64)]
_TOOL_TEXT = [_text(1330) for _ in range(64)]


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
                    content=_AI_TEXT[n % 64],
                    id=f"ai-{n}",
                    tool_calls=[{"id": call, "name": "search", "args": {"query": _QUERY[n % 64]}}],
                ),
                ToolMessage(content=_TOOL_TEXT[n % 64], tool_call_id=call, id=f"tool-{n}"),
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
        {"messages": [HumanMessage(content="find it", id="h-0")], "step": 0,
         "last_tool": "", "phase": "start"},
        config,
        durability="sync",
    )
    t1 = time.perf_counter()
    assert out["step"] == steps and len(out["messages"]) == 2 * steps + 1, out["step"]
    stamps.append(t1)
    return t1 - t0, [b - a for a, b in zip(stamps, stamps[1:])]


class Saver:
    """Opens one saver kind at a fresh path; ``open()`` again gives a fresh object."""

    def __init__(self, name: str, path: str) -> None:
        self.name, self.path = name, path
        self._cm = None

    def open(self) -> Any:
        if self.name == "memory":
            self.obj = InMemorySaver()
        elif self.name == "agentwal":
            self.obj = AgentwalSaver(self.path)
        else:
            self._cm = SqliteSaver.from_conn_string(self.path)
            self.obj = self._cm.__enter__()
            self.obj.setup()
        return self.obj

    def close(self) -> None:
        if self.name == "memory":
            pass
        elif self.name == "agentwal":
            self.obj.close()
        else:
            self._cm.__exit__(None, None, None)

    def disk(self) -> Tuple[int, int]:
        """(apparent bytes, allocated bytes) of the store: the agentwal directory; the sqlite
        file with its -wal and -shm."""
        if self.name == "memory":
            return 0, 0
        if self.name == "agentwal":
            files = [os.path.join(d, f) for d, _, fs in os.walk(self.path) for f in fs]
        else:
            files = [p for p in (self.path, self.path + "-wal", self.path + "-shm")
                     if os.path.exists(p)]
        sts = [os.stat(f) for f in files]
        return sum(s.st_size for s in sts), sum(s.st_blocks * 512 for s in sts)


def fresh(name: str, label: str) -> Saver:
    path = os.path.join(ROOT, f"{label}-{name}")
    shutil.rmtree(path, ignore_errors=True)
    for p in (path, path + "-wal", path + "-shm"):
        if os.path.isfile(p):
            os.remove(p)
    if name == "sqlite":
        path += ".sqlite"
        for p in (path, path + "-wal", path + "-shm"):
            if os.path.exists(p):
                os.remove(p)
    return Saver(name, path)


def cleanup(s: Saver) -> None:
    if s.name == "memory":
        pass
    elif s.name == "agentwal":
        shutil.rmtree(s.path, ignore_errors=True)
    else:
        for p in (s.path, s.path + "-wal", s.path + "-shm"):
            if os.path.exists(p):
                os.remove(p)


def order(rep: int) -> Tuple[str, ...]:
    """The savers in rep ``rep``'s order: agentwal and sqlite swap places every rep."""
    pair = NAMES if rep % 2 == 0 else NAMES[::-1]
    return (pair + ("memory",)) if rep % 4 < 2 else (("memory",) + pair)


# -- the measurements -------------------------------------------------------------------

def bench_200(rep: int, name: str, res: Dict[str, Dict[str, List[float]]]) -> None:
    """A 200-step thread: bytes on disk, mean time per step, get_tuple warm and reopened."""
    s = fresh(name, f"t200-r{rep}")
    saver = s.open()
    gc.collect()
    wall, _ = run_thread(saver, "thread-200", STEPS)
    r = res[name]
    r["step_ms_200"].append(wall / STEPS * 1e3)
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
    if name == "agentwal":  # the log's records, without the preallocated space
        r["log_bytes"].append(saver.store.stats().bytes_written)
    else:
        r["log_bytes"].append(s.disk()[0])
    apparent, allocated = s.disk()
    r["disk_open_apparent"].append(apparent)
    r["disk_open_allocated"].append(allocated)
    s.close()
    apparent, allocated = s.disk()
    r["disk_apparent"].append(apparent)
    r["disk_allocated"].append(allocated)
    opens, firsts = [], []
    for _ in range(REOPENS):
        t0 = time.perf_counter()
        saver = s.open()
        gc.collect()
        t1 = time.perf_counter()
        tup = saver.get_tuple(config)
        t2 = time.perf_counter()
        assert len(tup.checkpoint["channel_values"]["messages"]) == n_msgs
        s.close()
        opens.append(t1 - t0)
        firsts.append(t2 - t1)
    r["open_ms"].append(statistics.median(opens) * 1e3)
    r["get_reopen_ms"].append(statistics.median(firsts) * 1e3)
    cleanup(s)


def bench_long(rep: int, name: str, res: Dict[str, Dict[str, List[float]]]) -> None:
    """A 1,000-step thread: mean time of its last 10 steps; bytes on disk at the end."""
    s = fresh(name, f"t1000-r{rep}")
    saver = s.open()
    gc.collect()
    wall, steps = run_thread(saver, "thread-1000", LONG_STEPS)
    r = res[name]
    r["last10_ms"].append(statistics.mean(steps[-LAST:]) * 1e3)
    r["step_ms_1000"].append(wall / LONG_STEPS * 1e3)
    s.close()
    if name != "memory":
        r["disk_1000_apparent"].append(s.disk()[0])
    cleanup(s)


def bench_threads(rep: int, name: str, res: Dict[str, Dict[str, List[float]]]) -> None:
    """16 graphs on 16 Python threads, each its own thread_id, one shared saver: steps/s."""
    s = fresh(name, f"threads-r{rep}")
    saver = s.open()
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
    s.close()
    cleanup(s)


# -- the report -------------------------------------------------------------------------

def sh(*cmd: str) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def mount_of(path: str) -> Tuple[str, str]:
    """(device, file system type) of the mount holding ``path``."""
    best = ("?", "?", "")
    with open("/proc/mounts") as f:
        for line in f:
            dev, mnt, fstype = line.split()[:3]
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best[2]):
                best = (dev, fstype, mnt)
    return best[0], best[1]


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
    dev, fstype = mount_of(ROOT)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        f"- cores: {os.cpu_count()} ({model}); load average at the end: {load}",
        f"- disk: `{ROOT}` on {dev}, {fstype}"
        + (" (not a tmpfs)" if fstype != "tmpfs" else " (TMPFS: not a real disk)"),
        f"- kernel: {platform.system()} {platform.release()}; Python {platform.python_version()}",
    ]


def versions() -> str:
    pkgs = ["agentwal", "langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite",
            "langchain-core", "ormsgpack"]
    out = []
    for p in pkgs:
        try:
            out.append(f"{p} {md.version(p)}")
        except md.PackageNotFoundError:
            pass
    import sqlite3

    out.append(f"SQLite {sqlite3.sqlite_version}")
    return ", ".join(out)


def sqlite_settings() -> str:
    s = fresh("sqlite", "settings")
    saver = s.open()
    c = saver.conn
    j = c.execute("PRAGMA journal_mode").fetchone()[0]
    sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[c.execute("PRAGMA synchronous").fetchone()[0]]
    page = c.execute("PRAGMA page_size").fetchone()[0]
    ac = c.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
    s.close()
    cleanup(s)
    return f"journal_mode={j}, synchronous={sync}, page_size={page}, wal_autocheckpoint={ac}"


def message_sizes() -> str:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    serde = JsonPlusSerializer()
    stamps: List[float] = []
    app = build_graph(None, stamps, 1)
    out = app.invoke({"messages": [], "step": 0, "last_tool": "", "phase": "start"})
    ai, tool = out["messages"][-2:]
    return (f"AIMessage with its tool call {len(serde.dumps_typed(ai)[1])} B, ToolMessage "
            f"{len(serde.dumps_typed(tool)[1])} B (serialized by LangGraph's serializer)")


def fmt_bytes(n: float) -> str:
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= k:
            return f"{n / k:.2f} {unit}"
    return f"{n:.0f} B"


def main() -> None:
    os.makedirs(ROOT, exist_ok=True)
    started = _dt.datetime.now(_dt.timezone.utc)
    t_start = time.perf_counter()
    res: Dict[str, Dict[str, List[float]]] = {n: {} for n in ALL}
    for n in ALL:
        for k in ("step_ms_200", "get_warm_ms", "disk_open_apparent", "disk_open_allocated",
                  "disk_apparent", "disk_allocated", "log_bytes", "open_ms", "get_reopen_ms", "last10_ms",
                  "step_ms_1000", "disk_1000_apparent", "threads_steps_s"):
            res[n][k] = []
    benches: List[Tuple[str, Callable]] = [
        ("200-step thread", bench_200),
        (f"{LONG_STEPS}-step thread", bench_long),
        (f"{THREADS} threads", bench_threads),
    ]
    for rep in range(REPS):
        for label, fn in benches:
            for name in order(rep):
                t0 = time.perf_counter()
                fn(rep, name, res)
                print(f"rep {rep + 1}/{REPS} {label:>16} {name:>8}: {time.perf_counter() - t0:6.1f} s",
                      file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - t_start

    med = {n: {k: statistics.median(v) for k, v in res[n].items() if v} for n in ALL}
    a, q, m = med["agentwal"], med["sqlite"], med["memory"]

    rows = []

    def row(what: str, key: str, fmt: Callable[[float], str], target: str = "",
            met: Callable[[float], bool] = None, invert: bool = False) -> None:
        ratio = a[key] / q[key]
        shown = f"{ratio:.3f}" if ratio < 0.1 else f"{ratio:.2f}"
        verdict = ""
        if met is not None:
            verdict = "met" if met(ratio) else "missed"
        ref = fmt(m[key]) if key in m else ""
        rows.append(f"| {what} | {fmt(a[key])} | {fmt(q[key])} | {shown}× | {target} | {verdict} "
                    f"| {ref} |")

    ms = lambda x: f"{x:.2f} ms"  # noqa: E731
    row(f"bytes on disk after {STEPS} steps, saver closed (file sizes)", "disk_apparent",
        fmt_bytes, "≤ 1/20 (0.05×)", lambda r: r <= 0.05)
    row(f"bytes on disk after {STEPS} steps, saver closed (allocated blocks)", "disk_allocated",
        fmt_bytes, "≤ 1/20 (0.05×)", lambda r: r <= 0.05)
    row(f"bytes on disk after {STEPS} steps, saver open (file sizes)", "disk_open_apparent",
        fmt_bytes)
    row(f"bytes of data after {STEPS} steps: agentwal's log records (`Stats.bytes_written`),"
        " the sqlite files' sizes", "log_bytes", fmt_bytes, "(≤ 1/20)", lambda r: r <= 0.05)
    row(f"bytes on disk after {LONG_STEPS} steps, saver closed (file sizes)",
        "disk_1000_apparent", fmt_bytes)
    row(f"time per step, last {LAST} steps of a {LONG_STEPS}-step thread", "last10_ms", ms,
        "≤ 1/3 (0.33×)", lambda r: r <= 1 / 3)
    row(f"mean time per step, {LONG_STEPS}-step thread", "step_ms_1000", ms)
    row(f"mean time per step, {STEPS}-step thread", "step_ms_200", ms, "≤ 1×",
        lambda r: r <= 1.0)
    rows.append(
        f"| {THREADS} graphs on {THREADS} Python threads ({THREAD_STEPS} steps each), total steps/s "
        f"| {a['threads_steps_s']:.0f} | {q['threads_steps_s']:.0f} "
        f"| {a['threads_steps_s'] / q['threads_steps_s']:.2f}× (agentwal/sqlite) | ≥ 3× "
        f"| {'met' if a['threads_steps_s'] >= 3 * q['threads_steps_s'] else 'missed'} "
        f"| {m['threads_steps_s']:.0f} |")
    row(f"`get_tuple` of the latest checkpoint after {STEPS} steps, warm", "get_warm_ms", ms,
        "≤ 1/5 (0.2×)", lambda r: r <= 0.2)
    row(f"`get_tuple` of the latest checkpoint after {STEPS} steps, fresh saver object",
        "get_reopen_ms", ms, "≤ 1/5 (0.2×)", lambda r: r <= 0.2)
    row("opening that fresh saver object (not in the row above)", "open_ms", ms)

    head = sh("git", "rev-parse", "--short", "HEAD")
    dirty = sh("git", "status", "--porcelain", "--untracked-files=no")
    lines = [
        "# LangGraph benchmark: AgentwalSaver against SqliteSaver",
        "",
        f"`bash scripts/bench-python.sh` (python/bench/langgraph_bench.py){' in QUICK mode: sizes too small to mean anything' if QUICK else ''}.",
        f"Run {started:%Y-%m-%d %H:%M} UTC on commit `{head}`{' (with uncommitted changes)' if dirty not in ('', '?') else ''}, "
        f"{REPS} reps, {elapsed / 60:.1f} min.",
        "",
        "## Machine and versions",
        "",
        *machine(),
        f"- packages: {versions()}",
        "",
        "## Setup",
        "",
        f"- The graph: one node looping on itself; each step appends an AIMessage with a tool call and a"
        f" ToolMessage through `add_messages` ({message_sizes()}) and sets 3 other keys;"
        f" `durability=\"sync\"`; one `invoke` runs a whole thread.",
        "- AgentwalSaver: `AgentwalSaver(dir)`, the store's defaults (`sync=\"always\"`).",
        f"- SqliteSaver: `SqliteSaver.from_conn_string(file)` (its documented constructor: one"
        f" connection, `check_same_thread=False`), SQLite's defaults after its `setup()`: {sqlite_settings()}."
        f" In the threaded run one saver (one connection, behind the saver's lock) serves all"
        f" threads, as its docs show; the same for AgentwalSaver (one store handle).",
        "- Both savers run in this one process, side by side, the first one alternating from rep to"
        " rep. Each figure is the median over the reps; the ratio is agentwal's over SqliteSaver's."
        " `InMemorySaver` (LangGraph's, no disk) runs the time measurements too: what LangGraph"
        " itself costs per step, with the serialization InMemorySaver does.",
        f"- Time per step: from one run of the node to the next (the step's checkpoint written in"
        f" between). `get_tuple` (each call after a `gc.collect()`) warm: the median of {GET_WARM} calls on the saver that ran the"
        f" thread; fresh saver object: the first call on a new saver object (a new `AgentwalSaver`"
        f" on the closed store's directory; a new connection on the file), median of {REOPENS}"
        f" per rep; the files are in the page cache.",
        "- Bytes on disk: file sizes (`st_size`) and allocated blocks (`st_blocks`) of the store's"
        " directory / of the sqlite file with its -wal and -shm. agentwal extends its segment"
        " file by preallocating 4 MiB at a time, so its file size moves in 4 MiB steps.",
        "",
        "## Results (medians)",
        "",
        "| measurement | AgentwalSaver | SqliteSaver | ratio | target | | InMemorySaver (no disk: reference) |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        "## Every rep",
        "",
        "| measurement | AgentwalSaver | SqliteSaver | InMemorySaver |",
        "|---|---|---|---|",
    ]
    for k in res["agentwal"]:
        f = (lambda x: f"{x:.0f}") if "disk" in k or "bytes" in k or "steps_s" in k else (lambda x: f"{x:.3f}")
        lines.append(f"| {k} | {', '.join(f(x) for x in res['agentwal'][k])} "
                     f"| {', '.join(f(x) for x in res['sqlite'][k])} "
                     f"| {', '.join(f(x) for x in res['memory'][k])} |")
    report = "\n".join(lines) + "\n"
    print(report)
    out = os.environ.get("AGENTWAL_BENCH_OUT")
    if out:
        with open(out, "w") as f:
            f.write(report)
    shutil.rmtree(ROOT, ignore_errors=True)


if __name__ == "__main__":
    main()
