"""A fleet of savers on one store: several long-lived AgentwalSaver instances, each open for
its whole life, take the turns of a thread in alternation (turn 1 on one, turn 2 on
another...; never two at the same time), as the workers of a fleet do when a load balancer
hands each request of a conversation to whichever worker is free.

Every saver must resume a thread from what the store holds, not from what it cached the
last time it saw the thread: a saver that trusts its own memory resumes from an old state,
so another saver's turns vanish from the thread's state and its history forks (a new
checkpoint's parent is not the latest one).

On PostgreSQL the workers are processes (lg_fleet_worker.py), one of which is SIGKILLed
midway and replaced by a fresh one. A local store can be opened by one process only, so
on a local store the savers share one :class:`agentwal.Store` in the test's process.

After every step the test reads the thread through a fresh AgentwalSaver (one with no
memory of the thread) and checks: the state holds exactly the messages of the turns the
thread had (:func:`lg_fleet_worker.expected_messages`), both as the worker's graph returned
it and as the store holds it; the latest checkpoint is the one the worker reports; the
history is one chain (each checkpoint's parent is the one before it, one root, no
checkpoint the parent of two), which holds the previous latest checkpoint. Every wrong
step is recorded, and the test fails at the end listing them all, with the turns lost.

A second scenario has a worker delete or prune a thread between the turns of others,
which must see it: the saver that cached the thread before a delete must find it empty,
and the thread, grown back to the very same length (so the same number of commits) after
the delete, must not be mistaken for the one that saver cached; a prune (keep_latest)
must leave one checkpoint, seen as such by a saver that cached the whole history.

Needs the cluster of pg_env (``AGENTWAL_PG_HOST``) for the PostgreSQL tests: without it
they fail, never skip.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Callable, ContextManager, Dict, List, Optional, Tuple

import agentwal
import lg_fleet_worker as worker
from agentwal.langgraph import AgentwalSaver

import pg_env

WORKER = str(Path(worker.__file__).resolve())
WORKERS = 3
THREADS = ["fleet-0", "fleet-1", "fleet-2"]
TURNS = 8  # per thread
KILL_AFTER = 13  # steps: the kill comes midway, inside a round of turns
TIMEOUT = 60.0  # seconds a worker may take to answer before the test gives up (a hang)

Chain = List[Tuple[str, Optional[str]]]  # (checkpoint id, parent id), newest first


def _parse_state(rest: str) -> Tuple[Optional[str], List[List[str]]]:
    """``<checkpoint_id or -> <n> <json>`` (the tail of an ``ok`` or ``state`` line)."""
    cid, n, desc = rest.split(" ", 2)
    messages = json.loads(desc)
    assert len(messages) == int(n), rest
    return (None if cid == "-" else cid), messages


def _turns_of(messages: List[List[str]]) -> List[int]:
    """The turn numbers of the human messages of a state (how a wrong state is reported)."""
    return [int(m[1].split()[1]) for m in messages if m[0] == "human"]


def _chain_problems(chain: Chain, rooted: bool) -> List[str]:
    """What keeps ``chain`` (a thread's history, newest first) from being one line of
    checkpoints; the oldest must be a root unless ``rooted`` is False (after a prune it
    names a removed parent)."""
    problems = []
    twice = [p for p, n in Counter(p for _, p in chain if p is not None).items() if n > 1]
    if twice:
        problems.append(f"history forks: {len(twice)} checkpoint(s) parent of two")
    roots = sum(1 for _, p in chain if p is None)
    if roots > 1 or (rooted and chain and roots != 1):
        problems.append(f"history has {roots} roots")
    broken = sum(1 for (_, p), (older, _) in zip(chain, chain[1:]) if p != older)
    if broken:
        problems.append(f"{broken} checkpoint(s) whose parent is not the previous checkpoint")
    return problems


def _view(saver: AgentwalSaver, thread: str) -> Tuple[Optional[str], List[List[str]], Chain]:
    """What ``saver`` holds of ``thread``: its latest checkpoint id, its messages and its
    history."""
    t = saver.get_tuple(worker.config(thread))
    chain = [
        (c.config["configurable"]["checkpoint_id"],
         c.parent_config["configurable"]["checkpoint_id"] if c.parent_config else None)
        for c in saver.list(worker.config(thread))
    ]
    if t is None:
        return None, [], chain
    messages = worker.describe(t.checkpoint["channel_values"].get("messages", []))
    return t.config["configurable"]["checkpoint_id"], messages, chain


class Ledger:
    """What each thread must hold after each step, checked against the workers' answers
    and a fresh saver's view of the store; every wrong step is recorded, none stops the
    run (so that the failure says how many were wrong)."""

    def __init__(self, fresh: Callable[[], ContextManager[AgentwalSaver]]) -> None:
        """``fresh()`` opens a saver with no memory of any thread (closed after each use)."""
        self.fresh = fresh
        self.turns: Dict[str, List[int]] = {}  # the turns each thread holds, in order
        self.latest: Dict[str, Optional[str]] = {}  # its latest checkpoint id
        self.rooted: Dict[str, bool] = {}  # False once a prune removed its root
        self.steps = 0
        self.wrong: List[str] = []

    def _record(self, what: str, problems: List[str]) -> None:
        self.steps += 1
        if problems:
            self.wrong.append(f"{what}: " + "; ".join(problems))

    def _store_problems(self, thread: str, cid: Optional[str]) -> List[str]:
        """How the store (through a fresh saver) differs from what ``thread`` must hold;
        ``cid`` is the latest checkpoint id the worker reported, if any."""
        want = worker.expected_messages(thread, self.turns[thread])
        try:
            with self.fresh() as saver:
                latest, messages, chain = _view(saver, thread)
        except Exception as e:  # noqa: BLE001 - a store a stale saver broke is a wrong step
            return [f"a fresh saver cannot read the thread: {type(e).__name__}: {e}"]
        problems = []
        if messages != want:
            problems.append(f"the store's state has turns {_turns_of(messages)} "
                            f"({len(messages)} messages), want {self.turns[thread]}")
        if cid is not None and latest != cid:
            problems.append(f"the store's latest checkpoint is {latest}, the worker's {cid}")
        problems += _chain_problems(chain, self.rooted[thread])
        prev = self.latest[thread]
        if prev is not None and prev not in {c for c, _ in chain}:
            problems.append(f"the previous latest checkpoint {prev} is gone from the history")
        self.latest[thread] = latest
        return problems

    def _count(self, thread: str) -> int:
        """The number of checkpoints of ``thread`` a fresh saver lists."""
        with self.fresh() as saver:
            return len(list(saver.list(worker.config(thread))))

    def turn(self, w, thread: str, k: int) -> None:
        """Turn ``k`` of ``thread`` on worker ``w``."""
        self.turns.setdefault(thread, [])
        self.latest.setdefault(thread, None)
        self.rooted.setdefault(thread, True)
        reply = w.ask(f"turn {thread} {k}")
        self.turns[thread].append(k)
        want = worker.expected_messages(thread, self.turns[thread])
        problems = []
        cid = None
        prefix = f"ok {thread} {k} "
        if not reply.startswith(prefix):
            problems.append(f"the worker answered {reply[:300]!r}")
        else:
            cid, messages = _parse_state(reply[len(prefix):])
            if messages != want:
                problems.append(f"the worker's state has turns {_turns_of(messages)} "
                                f"({len(messages)} messages), want {self.turns[thread]}")
        problems += self._store_problems(thread, cid)
        self._record(f"turn {k} of {thread} on {w.name}", problems)

    def delete(self, w, thread: str) -> None:
        """``delete_thread`` of ``thread`` on worker ``w``: the store has none of it left."""
        reply = w.ask(f"delete {thread}")
        problems = [] if reply == f"deleted {thread}" else [f"the worker answered {reply!r}"]
        self.turns[thread], self.latest[thread], self.rooted[thread] = [], None, True
        problems += self._store_problems(thread, None)
        self._record(f"delete of {thread} on {w.name}", problems)

    def prune(self, w, thread: str) -> None:
        """``prune(keep_latest)`` of ``thread`` on worker ``w``: the store keeps its latest
        checkpoint only, with the whole state."""
        reply = w.ask(f"prune {thread}")
        problems = [] if reply == f"pruned {thread}" else [f"the worker answered {reply!r}"]
        n = self._count(thread)
        if n != 1:
            problems.append(f"the store lists {n} checkpoints after the prune, want 1")
        self.rooted[thread] = False
        problems += self._store_problems(thread, self.latest[thread])
        self._record(f"prune of {thread} on {w.name}", problems)

    def sees_state(self, w, thread: str) -> None:
        """Worker ``w``'s saver would resume ``thread`` from its latest state."""
        reply = w.ask(f"state {thread}")
        want = worker.expected_messages(thread, self.turns[thread])
        problems = []
        prefix = f"state {thread} "
        if not reply.startswith(prefix):
            problems.append(f"the worker answered {reply[:300]!r}")
        else:
            cid, messages = _parse_state(reply[len(prefix):])
            if messages != want or cid != self.latest[thread]:
                problems.append(f"the worker's saver would resume from {cid} with turns "
                                f"{_turns_of(messages)}, want {self.latest[thread]} with "
                                f"turns {self.turns[thread]}")
        self._record(f"state of {thread} on {w.name}", problems)

    def sees_history(self, w, thread: str) -> None:
        """Worker ``w``'s saver lists as many checkpoints of ``thread`` as the store holds."""
        reply = w.ask(f"history {thread}")
        n = self._count(thread)
        problems = [] if reply == f"history {thread} {n}" else [
            f"the worker answered {reply!r}, the store lists {n} checkpoints"]
        self._record(f"history of {thread} on {w.name}", problems)

    def assert_clean(self) -> None:
        """Fails listing every wrong step, and the turns lost from the threads' final
        states (those the store no longer holds)."""
        lost = []
        with self.fresh() as saver:
            for thread, turns in self.turns.items():
                try:
                    _, messages, _ = _view(saver, thread)
                except Exception:  # noqa: BLE001 - unreadable: every turn of it is lost
                    messages = []
                got = set(_turns_of(messages))
                lost += [f"turn {k} of {thread}" for k in turns if k not in got]
        summary = (f"{len(self.wrong)} of {self.steps} steps wrong, {len(lost)} turns lost"
                   + (f" ({', '.join(lost)})" if lost else ""))
        print(summary)
        assert not self.wrong and not lost, summary + ":\n" + "\n".join(self.wrong)


def round_robin(ledger: Ledger, fleet: list, replace: Callable[[int], None]) -> None:
    """``TURNS`` turns of each of ``THREADS``, the turns of a round one thread after the
    other, turn ``k`` of thread ``i`` on worker ``(k + i) % len(fleet)``; after step
    ``KILL_AFTER`` worker 1 is replaced (``replace(1)``)."""
    step = 0
    for k in range(1, TURNS + 1):
        for i, thread in enumerate(THREADS):
            ledger.turn(fleet[(k + i) % len(fleet)], thread, k)
            step += 1
            if step == KILL_AFTER:
                replace(1)
    ledger.assert_clean()


def delete_and_prune(ledger: Ledger, fleet: list) -> None:
    """Deletes and prunes between the turns of other workers (see the module's docstring)."""
    a, b, c = fleet
    # A worker that cached the thread (b, at turn 2) must see the delete, and the next
    # turn must start the thread afresh.
    t = "deleted-seen"
    ledger.turn(a, t, 1)
    ledger.turn(b, t, 2)
    ledger.turn(c, t, 3)
    ledger.delete(a, t)
    ledger.sees_state(b, t)
    ledger.turn(c, t, 4)
    ledger.turn(a, t, 5)
    # Deleted after two turns and grown back by two turns on other workers: the same
    # commits, so a cache validated by the task's seq alone would look current to b.
    t = "deleted-regrown"
    ledger.turn(a, t, 1)
    ledger.turn(b, t, 2)
    ledger.delete(a, t)
    ledger.turn(c, t, 3)
    ledger.turn(a, t, 4)
    ledger.turn(b, t, 5)
    # A prune by a worker whose cache is old (a, from turn 1) must still keep only the
    # latest checkpoint; c, which cached the whole history, must see one checkpoint.
    t = "pruned"
    ledger.turn(a, t, 1)
    ledger.turn(b, t, 2)
    ledger.turn(c, t, 3)
    ledger.prune(a, t)
    ledger.sees_history(c, t)
    ledger.turn(c, t, 4)
    ledger.turn(b, t, 5)
    ledger.assert_clean()


# -- PostgreSQL: worker processes ------------------------------------------------------


class Worker:
    """A ``lg_fleet_worker.py pg`` process: one saver on the schema for its whole life."""

    def __init__(self, name: str, schema: str, stderr_path: Path) -> None:
        """Starts the process; :meth:`wait_ready` waits until its saver is open."""
        self.name = name
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, WORKER, "pg", pg_env.url(), schema], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._stderr, text=True, bufsize=1,
        )
        self.lines: "queue.Queue[Optional[str]]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def stderr(self) -> str:
        """The tail of the worker's stderr."""
        self._stderr.flush()
        return self.stderr_path.read_text()[-3000:]

    def _next(self) -> str:
        try:
            line = self.lines.get(timeout=TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"worker {self.name} hung: {self.stderr()}") from None
        if line is None:
            raise AssertionError(f"worker {self.name} died: {self.stderr()}")
        return line

    def wait_ready(self) -> "Worker":
        """Waits for ``ready``; returns the worker."""
        line = self._next()
        assert line == "ready", (line, self.stderr())
        return self

    def ask(self, command: str) -> str:
        """Sends ``command``; its answer line."""
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._next()

    def kill(self) -> None:
        """SIGKILLs the worker (between two commands) and reaps it."""
        os.kill(self.proc.pid, signal.SIGKILL)
        assert self.proc.wait(timeout=TIMEOUT) == -signal.SIGKILL
        self._stderr.close()

    def close(self) -> None:
        """Stops the worker (``quit``) if it still runs, killing it if it does not stop."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=TIMEOUT)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        if not self._stderr.closed:
            self._stderr.close()


@contextlib.contextmanager
def pg_fleet(tmp_path: Path, prefix: str):
    """``WORKERS`` worker processes on a fresh schema (dropped at the end), and a
    ``fresh()`` that opens a saver of the test's own on it: ``(fleet, start, fresh)``,
    where ``start(name)`` starts one more worker."""
    schema = pg_env.fresh_schema(prefix)
    url = pg_env.url()  # fails here, before any process starts, without a server
    everyone: List[Worker] = []

    def start(name: str) -> Worker:
        w = Worker(name, schema, tmp_path / f"{name}.stderr")
        everyone.append(w)
        return w

    try:
        # The schema is created before the workers race to open it.
        AgentwalSaver(url, schema=schema).close()
        fleet = [start(f"worker-{i}") for i in range(WORKERS)]
        for w in fleet:  # started together: their imports overlap
            w.wait_ready()
        yield fleet, start, lambda: AgentwalSaver(url, schema=schema)
    finally:
        for w in everyone:
            w.close()
        pg_env.drop_schema(schema)


def test_fleet_on_postgres_round_robin_with_a_kill(tmp_path):
    """Three worker processes take the turns of three threads round-robin on one schema;
    midway one is SIGKILLed between two turns and a fresh process takes its place."""
    with pg_fleet(tmp_path, "lgfleet") as (fleet, start, fresh):
        def replace(i: int) -> None:
            fleet[i].kill()
            fleet[i] = start(f"worker-{i}-replacement").wait_ready()

        round_robin(Ledger(fresh), fleet, replace)


def test_fleet_on_postgres_delete_and_prune_between_turns(tmp_path):
    """Three worker processes on one schema: deletes and prunes by one worker between the
    turns of the others (see the module's docstring)."""
    with pg_fleet(tmp_path, "lgfleetdel") as (fleet, _, fresh):
        delete_and_prune(Ledger(fresh), fleet)


# -- a local store: savers sharing one Store in this process ---------------------------


class InProcessWorker:
    """A saver of its own on a shared :class:`agentwal.Store`, with the worker's graph,
    answering the worker's commands (:func:`lg_fleet_worker.answer`)."""

    def __init__(self, name: str, store: agentwal.Store) -> None:
        """Opens the saver on ``store`` and builds the graph."""
        self.name = name
        self.saver = AgentwalSaver(store)
        self.app = worker.build(self.saver)

    def ask(self, command: str) -> str:
        """The answer line to ``command``."""
        return worker.answer(self.saver, self.app, command)


def test_fleet_on_local_store_two_savers_one_store(tmp_path):
    """Savers on one local Store take the turns of three threads round-robin; midway one
    is dropped and a new saver on the same Store takes its place (a restarted worker)."""
    with agentwal.Store.open(tmp_path / "store") as store:
        fleet = [InProcessWorker(f"saver-{i}", store) for i in range(WORKERS)]

        def replace(i: int) -> None:
            fleet[i].saver.close()  # a no-op on the shared Store: the saver is dropped
            fleet[i] = InProcessWorker(f"saver-{i}-replacement", store)

        round_robin(Ledger(lambda: AgentwalSaver(store)), fleet, replace)


def test_fleet_on_local_store_delete_and_prune_between_turns(tmp_path):
    """Savers on one local Store: deletes and prunes by one saver between the turns of the
    others (see the module's docstring)."""
    with agentwal.Store.open(tmp_path / "store") as store:
        fleet = [InProcessWorker(f"saver-{i}", store) for i in range(WORKERS)]
        delete_and_prune(Ledger(lambda: AgentwalSaver(store)), fleet)
