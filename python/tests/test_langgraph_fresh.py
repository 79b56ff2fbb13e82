"""A fresh AgentwalSaver (a new worker) reading a long thread, on both backends: one engine
read, and only the latest checkpoint's variables converted and parsed, not the history;
then writes, prunes and listings on top of that lazily read index.

Needs the cluster of pg_env (``AGENTWAL_PG_HOST``) for the PostgreSQL half: without it those
tests fail, never skip.
"""

from __future__ import annotations

from typing import Annotated, Any, List, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from agentwal import PgStore, Store
from agentwal.langgraph import AgentwalSaver

import pg_env

STEPS = 40  # the thread's super-steps before a fresh saver reads it


@pytest.fixture(params=["local", "postgres"])
def store(request, tmp_path):
    """A local Store and a PgStore: a test using it runs once on each backend."""
    if request.param == "local":
        with Store.open(tmp_path / "store") as s:
            yield s
    else:
        schema = pg_env.fresh_schema("lgfresh")
        with PgStore.open(pg_env.url(), schema=schema) as s:
            yield s
        pg_env.drop_schema(schema)


class State(TypedDict):
    messages: Annotated[list, add_messages]
    step: int
    phase: str


def _graph(checkpointer: Any, steps: int):
    """One node looping on itself: each step appends a tool call and its result."""

    def agent(state: State):
        n = state.get("step", 0) + 1
        return {
            "messages": [
                AIMessage(content=f"step {n}", id=f"ai-{n}",
                          tool_calls=[{"id": f"call-{n}", "name": "search", "args": {"q": n}}]),
                ToolMessage(content=f"result {n} " * 20, tool_call_id=f"call-{n}", id=f"tool-{n}"),
            ],
            "step": n,
            "phase": "working" if n < steps else "done",
        }

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", lambda s: "agent" if s["step"] < steps else END,
                            ["agent", END])
    return g.compile(checkpointer=checkpointer)


def _run(saver: Any, steps: int, config: dict) -> None:
    _graph(saver, steps).invoke(
        {"messages": [HumanMessage(content="go", id="h-0")], "step": 0, "phase": "start"},
        config, durability="sync")


class _CountingView:
    """A StateView that counts the variables read through it."""

    def __init__(self, view: Any, log: List[str]) -> None:
        self._view, self._log = view, log
        self.seq, self.created_at_ms = view.seq, view.created_at_ms
        self.prefixes: List[str] = []  # of the key queries
        self.lists: List[str] = []  # the channels whose list chains the engine resolved

    def var(self, key: str) -> Any:
        self._log.append(key)
        return self._view.var(key)

    def var_keys(self, prefix: str = "") -> List[str]:
        self.prefixes.append(prefix)
        return self._view.var_keys(prefix)

    def last_key(self, prefix: str = "") -> Any:
        self.prefixes.append(prefix)
        return self._view.last_key(prefix)

    def list_items(self, channel: str, version: Any, marker: str) -> Any:
        self.lists.append(channel)
        return self._view.list_items(channel, version, marker)

    def __contains__(self, key: str) -> bool:
        return key in self._view

    def __len__(self) -> int:
        return len(self._view)


class _CallLog:
    """A store that records the name of each call made through it."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.calls: List[str] = []

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._store, name)
        if not callable(target):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return self._answer(name, target(*args, **kwargs))

        return call

    def _answer(self, name: str, out: Any) -> Any:
        """What the call ``name`` returns through this store (``out``, as the store gave it)."""
        return out


class _CountingStore(_CallLog):
    """The saver's store, recording each call the saver makes (and the variables it reads
    from a loaded view)."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.vars_read: List[str] = []
        self.views: List[_CountingView] = []

    def _answer(self, name: str, out: Any) -> Any:
        if name == "load_latest_view" and out is not None:
            self.views.append(_CountingView(out, self.vars_read))
            return self.views[-1]
        return out


def _tuple_data(t: Any) -> Any:
    return (t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)


def test_a_fresh_saver_reads_only_the_latest_checkpoint(store):
    config = {"configurable": {"thread_id": "long"}}
    with AgentwalSaver(store) as writer:
        _run(writer, STEPS, config)
        expected = writer.get_tuple(config)
    total = len(store.load_latest_view("lg:long:"))
    fresh = AgentwalSaver(store)
    counting = _CountingStore(store)
    fresh.store = counting
    got = fresh.get_tuple(config)
    assert _tuple_data(got) == _tuple_data(expected)
    assert len(got.checkpoint["channel_values"]["messages"]) == 2 * STEPS + 1
    # One engine read (on PostgreSQL a fixed number of statements), nothing per checkpoint.
    assert counting.calls == ["load_latest_view"]
    # The variables read: the latest checkpoint, its channels' blobs (the message list's
    # chain of bases: one blob per step that appended to it) and its writes. Not the other
    # checkpoints, their writes or the other channels' older blobs.
    read = counting.vars_read
    assert len(read) == len(set(read))
    latest = got.config["configurable"]["checkpoint_id"]
    assert [k for k in read if k.startswith("cp:")] == ["cp:" + latest]
    assert not [k for k in read if k.startswith("w:")]  # the last checkpoint has no writes
    blobs = [k for k in read if k.startswith("b:")]
    assert len(blobs) <= len(got.checkpoint["channel_versions"]) + STEPS + 1
    assert len(read) == 1 + len(blobs)
    assert total > 5 * len(read), (total, len(read))
    # Nor every key: the newest checkpoint id and its writes' keys are looked up by prefix.
    assert "" not in counting.views[0].prefixes, counting.views[0].prefixes
    # The message list's chain of bases is walked in the engine, not blob by blob here.
    assert counting.views[0].lists == ["messages"]
    assert len(blobs) <= len(got.checkpoint["channel_versions"]), blobs
    # A second read of an unchanged thread: one latest_info, no variable read again.
    before = len(read)
    assert _tuple_data(fresh.get_tuple(config)) == _tuple_data(expected)
    assert counting.calls == ["load_latest_view", "latest_info"] and len(read) == before


def test_a_fresh_saver_reads_an_older_checkpoint_and_its_writes(store):
    config = {"configurable": {"thread_id": "long"}}
    with AgentwalSaver(store) as writer:
        _run(writer, 10, config)
        history = list(writer.list(config))
    old = history[4]
    assert old.pending_writes  # a checkpoint whose task wrote before the next one
    fresh = AgentwalSaver(store)
    counting = _CountingStore(store)
    fresh.store = counting
    assert _tuple_data(fresh.get_tuple(old.config)) == _tuple_data(old)
    writes = [k for k in counting.vars_read if k.startswith("w:")]
    assert len(writes) == len(old.pending_writes)
    assert [k for k in counting.vars_read if k.startswith("cp:")] == [
        "cp:" + old.config["configurable"]["checkpoint_id"]]


def test_put_writes_looks_up_only_its_own_writes(store):
    """A checkpoint many tasks write to (a fan-out) gets one ``put_writes`` per task: each
    looks up its own write keys, it does not read the writes already stored."""
    config = {"configurable": {"thread_id": "fan"}}
    with AgentwalSaver(store) as writer:
        _run(writer, 3, config)
        latest = writer.get_tuple(config).config
        for t in range(20):
            writer.put_writes(latest, [("a", t), ("b", [t] * 50)], f"task-{t}")
    fresh = AgentwalSaver(store)
    counting = _CountingStore(store)
    fresh.store = counting
    # Writes 0 and 1 of task-3 are stored: ignored; write 2 is new.
    fresh.put_writes(latest, [("a", "again"), ("b", "again"), ("c", 1)], "task-3")
    fresh.put_writes(latest, [("a", 99)], "task-20")
    assert not [k for k in counting.vars_read if k.startswith("w:")], counting.vars_read
    writes = {(t, c): v for t, c, v in fresh.get_tuple(latest).pending_writes}
    assert len(writes) == 20 * 2 + 2
    assert writes[("task-3", "a")] == 3 and writes[("task-3", "b")] == [3] * 50
    assert writes[("task-3", "c")] == 1
    assert writes[("task-20", "a")] == 99


def test_writes_prunes_and_lists_on_a_lazily_read_thread(store):
    """A fresh saver continues a thread, the next ones delete a run, prune and list it: the
    same history as InMemorySaver running the same steps, whatever the index read lazily."""
    config = {"configurable": {"thread_id": "t"}}
    run2 = {**config, "metadata": {"run_id": "run-2"}}
    memory = InMemorySaver()
    with AgentwalSaver(store) as first:
        _run(first, 6, config)
    _run(memory, 6, config)
    with AgentwalSaver(store) as second:  # reads the thread lazily, then writes on top
        _run(second, 9, run2)
        _run(memory, 9, run2)
        ours = [(t.checkpoint["channel_values"], t.metadata, t.pending_writes)
                for t in second.list(config)]
    theirs = [(t.checkpoint["channel_values"], t.metadata, t.pending_writes)
              for t in memory.list(config)]
    assert len(ours) == len(theirs) > 15
    assert [o[:2] for o in ours] == [t[:2] for t in theirs]
    assert [[w[1:] for w in o[2]] for o in ours] == [[w[1:] for w in t[2]] for t in theirs]
    with AgentwalSaver(store) as third:
        before = list(third.list(config))
        third.delete_for_runs(["run-2"])
        left = [t for t in before if t.metadata.get("run_id") != "run-2"]
        assert 0 < len(left) < len(before)
        assert [_tuple_data(t) for t in third.list(config)] == [_tuple_data(t) for t in left]
    with AgentwalSaver(store) as fourth:  # lazily read again, then prune
        assert [_tuple_data(t) for t in fourth.list(config)] == [_tuple_data(t) for t in left]
        fourth.prune(["t"], strategy="keep_latest")
        assert [_tuple_data(t) for t in fourth.list(config)] == [_tuple_data(left[0])]
    with AgentwalSaver(store) as fifth:
        assert [_tuple_data(t) for t in fifth.list(config)] == [_tuple_data(left[0])]
        assert _tuple_data(fifth.get_tuple(config)) == _tuple_data(left[0])


def test_keys_are_the_json_of_their_ids():
    """The saver's keys are ``json.dumps`` of their ids, byte for byte, whatever the ids
    (keys written by every earlier version are looked up by the same text)."""
    import json
    import random

    from agentwal._lg_index import blob_key, write_key

    rng = random.Random(7)
    alphabet = ['a', 'Z', '0', ' ', '"', '\\', '/', '\x00', '\x1f', '\x7f', 'é', '\u2028',
                '\U0001f600', '.', '-', '[', ']', '~']
    ids: List[Any] = ["", "messages", "00000000000000000000000000000002.0.5", 0, 7, -3,
                      2**70, True, False, None, 1.5, float("inf")]
    ids += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(6))) for _ in range(300)]
    for a in ids:
        for b in rng.sample(ids, 20):
            assert blob_key(a, b) == "b:" + json.dumps([a, b])
            for i in (0, 3, -1, True):
                assert write_key(a, b, i) == "w:" + json.dumps([a, b, i])


def test_list_chains_resolved_in_the_engine_are_the_python_walk(tmp_path):
    """``StateView.list_items`` (the engine's walk of a list blob's bases, keys built as
    ``json.dumps`` builds them) gives what the saver's Python walk gives, for channels and
    versions of any characters; where it cannot (a version neither str nor int, a broken
    chain, another marker, a loop) it gives None, never other items."""
    import random

    from agentwal._lg_index import _LIST, TaskIndex, blob_key

    rng = random.Random(11)
    alphabet = ['a', 'Z', '0', ' ', '"', '\\', '/', '\x00', '\x1f', '\x7f', '\x80', 'é',
                '\u2028', '\uffff', '\U0001f600', '.', '[', ']', ', ']

    def word() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(7)))

    chains = []  # (channel, versions oldest first)
    sets: dict = {}
    for n in range(60):
        channel = word() if n % 3 else "messages"
        versions: List[Any] = []
        for _ in range(rng.randrange(1, 6)):
            v: Any = rng.choice([word(), rng.randrange(-5, 10**12), f"{n:032}.{rng.random():016}"])
            if v in versions:
                continue
            base = versions[-1] if versions else None
            items = [[word() or "msgpack", bytes(rng.randrange(256) for _ in range(rng.randrange(4)))]
                     for _ in range(rng.randrange(3))]
            sets[blob_key(channel, v)] = [_LIST, base, items]
            versions.append(v)
        chains.append((channel, versions))
    # Chains the engine must leave to Python: a float version, a missing base, a plain
    # blob, another marker, a loop.
    sets[blob_key("f", 1.5)] = [_LIST, None, [["t", b"x"]]]
    sets[blob_key("gap", "2")] = [_LIST, "1", [["t", b"x"]]]
    sets[blob_key("plain", "1")] = ["msgpack", b"x"]
    sets[blob_key("other", "1")] = ["other.list", None, [["t", b"x"]]]
    sets[blob_key("loop", "1")] = [_LIST, "2", []]
    sets[blob_key("loop", "2")] = [_LIST, "1", []]
    with Store.open(tmp_path / "s") as store:
        store.commit("t", {"set": sets})
        view = store.load_latest_view("t")
    for channel, versions in chains:
        for v in versions:
            python_walk = TaskIndex(1, None, None)
            python_walk._set = dict(sets)
            expected = python_walk.items(channel, v)
            assert expected is not None
            assert view.list_items(channel, v, _LIST) == expected, (channel, v)
    for channel, v in (("f", 1.5), ("gap", "2"), ("plain", "1"), ("other", "1"),
                       ("loop", "1"), ("absent", "1"), ("messages", True)):
        assert view.list_items(channel, v, _LIST) is None, (channel, v)


def _turn(saver: Any, config: dict, turn: int) -> None:
    """One turn of the thread: a user message, then three steps."""
    _graph(saver, 3).invoke(
        {"messages": [HumanMessage(content=f"turn {turn}", id=f"h-{turn}")], "step": 0,
         "phase": "start"}, config, durability="sync")


def test_a_worker_behind_on_postgres_catches_up_from_the_deltas_after_its_load():
    """Two workers (handles) take a thread's turns in turn: a worker whose thread the other
    moved on reads only the checkpoints committed since its load (its own included), and
    then serves exactly what a fresh saver reads; after the thread is deleted and written
    again, it reads the thread whole."""
    schema = pg_env.fresh_schema("lgcatchup")
    config = {"configurable": {"thread_id": "t"}}
    try:
        with PgStore.open(pg_env.url(), schema=schema) as sa, \
                PgStore.open(pg_env.url(), schema=schema) as sb:
            a, b = AgentwalSaver(sa), AgentwalSaver(sb)
            a.store, b.store = _CallLog(sa), _CallLog(sb)
            # A long first turn: the turns after it add too little for the store to take
            # another snapshot (which a worker behind would load whole instead): the state
            # grows by a third, where the next snapshot waits for it to about triple.
            _run(a, 2 * STEPS, config)
            b.get_tuple(config)  # b loads the thread whole (a fresh worker)
            for turn in range(1, 7):
                worker = (a, b)[turn % 2]
                worker.store.calls.clear()
                _turn(worker, config, turn)
                calls = worker.store.calls
                # Turn 1: b's load is current. Turn 2: a has only its own commits (it
                # wrote the thread's first checkpoints), nothing loaded to start from.
                expect = {1: [], 2: ["load_latest_view"]}.get(turn, ["catch_up_view"])
                got = [c for c in calls if c in ("load_latest_view", "catch_up_view")]
                assert got == expect, (turn, calls)
                with AgentwalSaver(sa) as fresh:
                    expected = fresh.get_tuple(config)
                assert _tuple_data(worker.get_tuple(config)) == _tuple_data(expected)
                history = list(worker.list(config))
                assert [h.parent_config["configurable"]["checkpoint_id"]
                        for h in history[:-1]] == [
                    h.config["configurable"]["checkpoint_id"] for h in history[1:]]
            # Deleted and written again by the other worker: b cannot catch up; it loads.
            a.delete_thread("t")
            _turn(a, config, 100)
            b.store.calls.clear()
            got = b.get_tuple(config)
            assert "load_latest_view" in b.store.calls, b.store.calls
            with AgentwalSaver(sa) as fresh:
                assert _tuple_data(got) == _tuple_data(fresh.get_tuple(config))
    finally:
        pg_env.drop_schema(schema)


def test_a_write_from_a_stale_index_on_postgres_catches_up_and_lands_once():
    """A worker writes on a thread another worker moved on since its read: the write gets a
    conflict, the index catches up from the deltas (no whole load), and the write lands
    once, on the other worker's checkpoint."""
    schema = pg_env.fresh_schema("lgcatchupw")
    config = {"configurable": {"thread_id": "t"}}
    try:
        with PgStore.open(pg_env.url(), schema=schema) as sa, \
                PgStore.open(pg_env.url(), schema=schema) as sb:
            a, b = AgentwalSaver(sa), AgentwalSaver(sb)
            _run(a, 2 * STEPS, config)
            b.get_tuple(config)  # b's index: loaded at a's latest
            _turn(a, config, 1)
            latest = a.get_tuple(config)
            b.store = _CallLog(sb)
            b.put_writes(latest.config, [("step", 7)], "task-b")
            assert b.store.calls == ["commit_if", "catch_up_view", "commit_if"], b.store.calls
            with AgentwalSaver(sa) as fresh:
                got = fresh.get_tuple(latest.config)
            assert [w for w in got.pending_writes if w[0] == "task-b"] == [("task-b", "step", 7)]
    finally:
        pg_env.drop_schema(schema)


class _PrefixLog(_CallLog):
    """The saver's store, recording each call and the prefixes it lists tasks by."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.prefixes: List[str] = []

    def tasks_with_prefix(self, prefix: str) -> List[str]:
        self.calls.append("tasks_with_prefix")
        self.prefixes.append(prefix)
        return self._store.tasks_with_prefix(prefix)


def test_one_threads_operations_list_only_that_threads_tasks(store):
    threads = ["a", "ab", "a:b", "a%3Ab", "b"]
    with AgentwalSaver(store) as saver:
        for thread in threads:
            _run(saver, 2, {"configurable": {"thread_id": thread}})
        # A task of the store that is not the saver's is never listed as one.
        store.commit("lg:not-a-saver-task", {"set": {"x": 1}})
    saver = AgentwalSaver(store)
    log = _PrefixLog(store)
    saver.store = log

    def ids(config: Any) -> set:
        return {t.config["configurable"]["thread_id"] for t in saver.list(config)}

    assert ids({"configurable": {"thread_id": "a"}}) == {"a"}
    assert ids(None) == set(threads)
    saver.delete_thread("a")
    saver.copy_thread("a:b", "a")
    saver.prune(["b"], strategy="delete")
    assert ids(None) == {"a", "ab", "a:b", "a%3Ab"}
    assert ids({"configurable": {"thread_id": "a"}}) == {"a"}
    assert "tasks" not in log.calls, log.calls
    # Each thread by its own prefix (":" and "%" are quoted in task names), all by "lg:".
    assert log.prefixes == [
        "lg:a:", "lg:", "lg:a:", "lg:a:", "lg:a%3Ab:", "lg:b:", "lg:", "lg:a:",
    ], log.prefixes
    assert "lg:not-a-saver-task" in store.tasks_with_prefix("lg:")
    assert store.tasks_with_prefix("") == store.tasks()
    assert store.tasks_with_prefix("lg:a") == sorted(
        t for t in store.tasks() if t.startswith("lg:a")
    )
