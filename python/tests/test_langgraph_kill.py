"""Kill -9 with a real graph: a child process runs a LangGraph tool loop on AgentwalSaver
(``durability="sync"``) whose tool appends to an outbox through the call journal
(lg_kill_worker.py); the parent SIGKILLs it at random moments, round after round, and
lets the next round resume the thread until the run completes.

After each run: every checkpoint whose ``put`` returned before a kill is there
(``get_tuple`` by its id), the history is the one an uninterrupted run on InMemorySaver
leaves (values, next, metadata, tasks, parent structure; ids renamed), the final state is
the expected one, no call is left pending, and the outbox has each step's line exactly
once, in order. Two deterministic tests kill the child inside the tool, before and after
its side effect, to pin down how a pending call is resolved.

``AGENTWAL_LG_KILL_SECONDS`` (default 20) bounds the random rounds; the figures are
printed at the end (``pytest -s``). See python/README.md for a longer run.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

import agentwal
import lg_kill_worker as worker
from agentwal.langgraph import AgentwalSaver
from lg_compare import Canon, assert_same

WORKER = str(Path(worker.__file__).resolve())
STEPS = 40  # tool calls per run: 2 * STEPS + 3 root checkpoints
TIMEOUT = 120.0  # seconds a round may take before the test gives up on it (a hang)


def _config(thread: str, cid: Optional[str] = None) -> dict:
    c: dict = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    if cid:
        c["configurable"]["checkpoint_id"] = cid
    return c


def _reference_history(steps: int) -> list:
    """The canonical history of an uninterrupted run on InMemorySaver."""
    app = worker.build(InMemorySaver(), steps, lambda step, call_id: worker.receipt(call_id))
    config = {"configurable": {"thread_id": "ref"}, "recursion_limit": worker.RECURSION_LIMIT}
    app.invoke(worker.first_input(), config, durability="sync")
    return _canonical_history(app, config)


def _canonical_history(app, config) -> list:
    history = list(app.get_state_history(config))
    canon = Canon([s.config["configurable"]["checkpoint_id"] for s in reversed(history)])
    out = []
    for s in canon(history):
        snap = s[1]
        # The thread id is the run's own.
        snap["config"]["configurable"].pop("thread_id")
        if snap["parent_config"]:
            snap["parent_config"]["configurable"].pop("thread_id")
        out.append(snap)
    return out


def _parse(lines: List[str], acks: Dict[str, int], pending: List[Tuple[str, str]]) -> None:
    """Collects a round's acks (checkpoint id -> step) and pending calls (id, outcome)."""
    for line in lines:
        parts = line.split()
        if parts[:1] == ["ack"]:
            acks[parts[1]] = int(parts[2])
        elif parts[:1] == ["pending"]:
            pending.append((parts[1], parts[2]))


def _fill_superseded_results(ours: list, reference: list) -> int:
    """Where a checkpoint that has a child shows a task without its result (writes) and
    the reference shows one, takes the reference's; returns how many.

    LangGraph submits ``put_writes`` to a background thread and, except for DeltaChannel
    writes, does not wait for it before the next ``put`` (langgraph/pregel/_loop.py,
    ``_checkpointer_put_after_previous``): a kill after ``put`` of step k+1 can lose the
    writes of step k. They are not needed any more (the run resumes from step k+1), so
    this is no loss of acknowledged state; it is LangGraph's ordering, not the saver's."""
    filled = 0
    for a, b in list(zip(ours, reference))[1:]:  # [0] is the newest: it has no child
        for ta, tb in zip(a["tasks"], b["tasks"]):
            if ta[1]["result"] is None and tb[1]["result"] is not None:
                ta[1]["result"] = tb[1]["result"]
                filled += 1
    return filled


def verify_run(store_dir: Path, outbox: Path, thread: str, steps: int,
               acks: Dict[str, int], reference: list) -> Tuple[int, int]:
    """Checks one completed run (see the module's docstring); returns the number of
    acknowledged checkpoints checked and of superseded checkpoints' writes lost."""
    with agentwal.Store.open(store_dir) as store:
        saver = AgentwalSaver(store)
        for cid, step in acks.items():
            t = saver.get_tuple(_config(thread, cid))
            assert t is not None, f"{thread}: acknowledged checkpoint {cid} (step {step}) is lost"
            assert t.metadata["step"] == step
        assert store.pending_calls(worker.journal_task(thread)) == []

        def no_tool(step, call_id):
            raise AssertionError("the completed run must not run a tool again")

        app = worker.build(saver, steps, no_tool)
        config = {"configurable": {"thread_id": thread}}
        state = app.get_state(config)
        assert state.next == () and state.tasks == ()
        msgs = state.values["messages"]
        assert len(msgs) == 2 * steps + 2
        assert isinstance(msgs[-1], AIMessage) and msgs[-1].content == f"done after {steps} steps"
        tool_msgs = [m for m in msgs if isinstance(m, ToolMessage)]
        assert [m.content for m in tool_msgs] == [worker.receipt(f"call-{k}") for k in range(steps)]
        history = _canonical_history(app, config)
        lost_writes = _fill_superseded_results(history, reference)
        assert_same(history, reference)
        assert app.invoke(None, config) == state.values  # nothing left to run
        saver.close()
    lines = [l for l in outbox.read_text().splitlines() if l.split()[0] == thread]
    assert lines == [worker.outbox_line(thread, f"call-{k}", k) for k in range(steps)]
    return len(acks), lost_writes


class ForkServer:
    """``lg_kill_worker.py serve``: rounds as forked children, which the test kills."""

    def __init__(self, stderr_path: Path) -> None:
        """Starts the server; its stderr (and its children's) goes to ``stderr_path``."""
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, WORKER, "serve"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._stderr, text=True, bufsize=1,
        )
        self.lines: "queue.Queue[Optional[Tuple[float, str]]]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put((time.monotonic(), line.rstrip("\n")))
        self.lines.put(None)

    def _next(self, timeout: float) -> Tuple[float, str]:
        item = self.lines.get(timeout=timeout)
        if item is None:
            raise AssertionError(f"the fork server died: {self.stderr()}")
        if item[1].startswith("error"):
            raise AssertionError(item[1])
        return item

    def stderr(self) -> str:
        """The tail of the server's and children's stderr."""
        self._stderr.flush()
        return self.stderr_path.read_text()[-3000:]

    def round(self, args: List[str], kill_after: Optional[float]) -> "Round":
        """Runs one round; SIGKILLs it ``kill_after`` seconds after its fork unless it
        ended by then."""
        self.proc.stdin.write("run " + " ".join(args) + "\n")
        self.proc.stdin.flush()
        r = Round()
        while True:
            t, line = self._next(TIMEOUT)
            if line.startswith("pid "):
                pid, r.start = int(line.split()[1]), t
                break
            r.add(t, line)
        deadline = r.start + (kill_after if kill_after is not None else TIMEOUT)
        killed = False
        while True:
            try:
                wait = TIMEOUT if killed else max(0.0, deadline - time.monotonic())
                t, line = self._next(wait)
            except queue.Empty:
                if killed or kill_after is None:
                    raise AssertionError(f"round hung: {r.lines[-3:]} {self.stderr()}")
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    # It ended on its own and the server reaped it just now: its "exit"
                    # line is on the way.
                    pass
                killed = True
                continue
            if line.startswith(f"exit {pid} "):
                r.code = os.waitstatus_to_exitcode(int(line.split()[2]))
                assert r.code in (0, -signal.SIGKILL), (r.code, r.lines[-3:], self.stderr())
                return r
            r.add(t, line)

    def close(self) -> None:
        """Stops the server."""
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        self.proc.wait(timeout=30)
        self._stderr.close()


class Round:
    """What one round printed (and when), and how it ended (exit code; -9: killed)."""

    def __init__(self, lines: Optional[List[str]] = None, code: Optional[int] = None) -> None:
        """An empty round, or one with ``lines`` already read."""
        self.lines: List[str] = list(lines or [])
        self.times: List[float] = [0.0] * len(self.lines)
        self.code = code
        self.start = 0.0

    def add(self, t: float, line: str) -> None:
        """Records ``line``, read at ``t``."""
        self.lines.append(line)
        self.times.append(t)

    @property
    def done(self) -> bool:
        """Whether the run completed in this round."""
        return self.code == 0 and "done" in self.lines

    @property
    def killed(self) -> bool:
        """Whether the round was killed."""
        return self.code == -signal.SIGKILL

    def open_s(self) -> Optional[float]:
        """Seconds from the fork to ``ready`` (store open and recovery)."""
        return self.times[self.lines.index("ready")] - self.start if "ready" in self.lines else None

    def step_s(self) -> Optional[float]:
        """Median seconds between two acks (one super-step)."""
        t = [self.times[i] for i, l in enumerate(self.lines) if l.startswith("ack ")]
        gaps = sorted(b - a for a, b in zip(t, t[1:]))
        return gaps[len(gaps) // 2] if gaps else None


def _fresh_round(args: List[str], env: Optional[dict] = None) -> Round:
    """One round in a fresh interpreter (``lg_kill_worker.py run``), never killed by us."""
    p = subprocess.run([sys.executable, WORKER, "run", *args], capture_output=True, text=True,
                       timeout=TIMEOUT, env={**os.environ, **(env or {})})
    assert p.returncode in (0, -signal.SIGKILL), p.stderr[-3000:]
    return Round(p.stdout.splitlines(), p.returncode)


class KillClock:
    """Picks when to kill a round, from what the previous rounds took: a quarter of the
    kills land before ``ready`` (store open, recovery, reading the thread back), the rest
    within the next ~15 super-steps, so a run takes several rounds on a fast or a slow
    machine alike."""

    def __init__(self, rng: random.Random) -> None:
        """Starts with guesses that the first rounds correct."""
        self.rng = rng
        self.open_s = 0.05
        self.step_s = 0.01

    def learn(self, r: Round) -> None:
        """Updates the estimates with round ``r``."""
        if r.open_s() is not None:
            self.open_s = 0.7 * self.open_s + 0.3 * r.open_s()
        if r.step_s() is not None:
            self.step_s = 0.7 * self.step_s + 0.3 * r.step_s()

    def delay(self) -> float:
        """Seconds after the fork to kill the next round."""
        if self.rng.random() < 0.25:
            return self.rng.uniform(0, 1.2 * self.open_s)
        return self.open_s + self.rng.uniform(0, 15 * self.step_s)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One fork server for the module's tests."""
    s = ForkServer(tmp_path_factory.mktemp("fork-server") / "stderr")
    yield s
    s.close()


def test_kill_9_at_random_moments(tmp_path, server):
    """Runs of the tool loop, each SIGKILLed at random moments round after round until it
    completes; each run verified (see the module's docstring)."""
    seconds = float(os.environ.get("AGENTWAL_LG_KILL_SECONDS", "20"))
    seed = int(os.environ.get("AGENTWAL_LG_KILL_SEED", str(random.randrange(1 << 32))))
    print(f"\nkill -9 test: seed {seed} ({seconds:.0f} s of rounds, {STEPS} steps per run)")
    clock = KillClock(random.Random(seed))
    store_dir, outbox = tmp_path / "store", tmp_path / "outbox"
    reference = _reference_history(STEPS)
    figures = dict(runs=0, rounds=0, kills=0, killed_before_ready=0, acks_checked=0,
                   pending_done_before=0, pending_redo=0, finished_fresh=0,
                   superseded_writes_lost=0)
    start = time.monotonic()
    while figures["runs"] == 0 or time.monotonic() - start < seconds:
        thread = f"run-{figures['runs']}"
        args = [str(store_dir), str(outbox), thread, str(STEPS)]
        acks: Dict[str, int] = {}
        pending: List[Tuple[str, str]] = []
        done = False
        while not done and time.monotonic() - start < seconds:
            r = server.round(args, clock.delay())
            clock.learn(r)
            figures["rounds"] += 1
            figures["kills"] += r.killed
            figures["killed_before_ready"] += r.killed and "ready" not in r.lines
            done = r.done
            _parse(r.lines, acks, pending)
        if not done:  # time is up: finish the run, unkilled, in a fresh interpreter
            r = _fresh_round(args)
            assert r.done, r.lines[-3:]
            _parse(r.lines, acks, pending)
            figures["finished_fresh"] += 1
        figures["pending_done_before"] += sum(k == "done-before" for _, k in pending)
        figures["pending_redo"] += sum(k == "redo" for _, k in pending)
        checked, lost = verify_run(store_dir, outbox, thread, STEPS, acks, reference)
        figures["acks_checked"] += checked
        figures["superseded_writes_lost"] += lost
        figures["runs"] += 1
    elapsed = time.monotonic() - start
    print("kill -9 test: " + ", ".join(f"{k} {v}" for k, v in figures.items())
          + f" in {elapsed:.1f} s (open ~{clock.open_s * 1e3:.0f} ms, step ~"
          f"{clock.step_s * 1e3:.1f} ms)")
    assert figures["kills"] >= 1


@pytest.mark.parametrize("point, resume", [("begun", "fresh"), ("effect", "forked")])
def test_kill_inside_the_tool_leaves_a_pending_call(tmp_path, server, point, resume):
    """Killed after the journal's begin and before (``begun``) or after (``effect``) the
    side effect: the call is pending; the next round (in a fresh interpreter or a forked
    child) finds out from the outbox whether the effect happened, and the outbox ends with
    each line exactly once."""
    steps, at = 6, 3
    store_dir, outbox = tmp_path / "store", tmp_path / "outbox"
    args = [str(store_dir), str(outbox), "t", str(steps)]
    acks: Dict[str, int] = {}
    pending: List[Tuple[str, str]] = []
    r = server.round(args + [f"crash={point}:{at}"], kill_after=None)
    assert r.killed and "done" not in r.lines
    _parse(r.lines, acks, pending)
    with agentwal.Store.open(store_dir) as store:
        calls = store.pending_calls(worker.journal_task("t"))
        assert [(c.call_id, c.tool) for c in calls] == [(f"call-{at}", "outbox")]
    sent = outbox.read_text().splitlines()
    assert sent == [worker.outbox_line("t", f"call-{k}", k)
                    for k in range(at + (point == "effect"))]
    r = _fresh_round(args) if resume == "fresh" else server.round(args, kill_after=None)
    assert r.done
    _parse(r.lines, acks, pending)
    assert pending == [(f"call-{at}", "redo" if point == "begun" else "done-before")]
    verify_run(store_dir, outbox, "t", steps, acks, _reference_history(steps))
