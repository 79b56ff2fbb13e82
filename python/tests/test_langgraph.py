"""Tests of agentwal.langgraph.AgentwalSaver: LangGraph's conformance suite, a real graph
against InMemorySaver, persistence across reopen, and bad input.

The LangGraph packages are required (scripts/test-python.sh installs them): a missing one
fails these tests with ImportError, it never skips them.
"""

from __future__ import annotations

import asyncio
import operator
import shutil
import tempfile
from typing import Annotated, TypedDict

import pytest

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

import agentwal
from agentwal.langgraph import AgentwalSaver

BASE = ["put", "put_writes", "get_tuple", "list", "delete_thread"]
# Tests per base capability in langgraph-checkpoint-conformance 0.0.2 (58 in all).
BASE_COUNTS = {"put": 17, "put_writes": 10, "get_tuple": 10, "list": 16, "delete_thread": 5}
# Optional capabilities AgentwalSaver implements (their tests must pass too).
IMPLEMENTED_OPTIONAL = ["delete_for_runs", "copy_thread", "prune"]
OPTIONAL_COUNTS = {"delete_for_runs": 7, "copy_thread": 8, "prune": 8}


@checkpointer_test(name="AgentwalSaver")
async def _agentwal_saver():
    d = tempfile.mkdtemp(prefix="agentwal-lg-")
    saver = AgentwalSaver(d + "/store")  # sync="always": the default, as in production
    try:
        yield saver
    finally:
        saver.close()
        shutil.rmtree(d)


def test_conformance_suite():
    report = asyncio.run(validate(_agentwal_saver))
    report.print_report()
    for cap, r in report.results.items():
        print(
            f"{cap}: detected={r.detected} passed={r.passed} "
            f"({r.tests_passed} passed, {r.tests_failed} failed, {r.tests_skipped} skipped)"
        )
        for failure in r.failures:
            print("   ", failure)
    for cap in BASE + IMPLEMENTED_OPTIONAL:
        r = report.results[cap]
        assert r.detected, cap
        assert r.passed is True and r.tests_failed == 0, (cap, r.failures)
    for cap, n in BASE_COUNTS.items():
        assert report.results[cap].tests_passed == n, cap
    assert sum(report.results[c].tests_passed for c in BASE) == 58
    for cap, n in OPTIONAL_COUNTS.items():
        assert report.results[cap].tests_passed == n, cap
    assert report.passed_all_base()


def _cfg(thread, ns="", cid=None):
    c = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
    if cid is not None:
        c["configurable"]["checkpoint_id"] = cid
    return c


def _checkpoint(cid, versions):
    return {
        "v": 4,
        "id": cid,
        "ts": "2026-12-01T00:00:00+00:00",
        "channel_values": {},
        "channel_versions": versions,
        "versions_seen": {},
        "updated_channels": None,
    }


def test_persists_across_reopen_and_stores_only_new_versions(tmp_path):
    path = tmp_path / "store"
    with AgentwalSaver(path) as saver:
        v1 = saver.get_next_version(None, None)
        cp1 = _checkpoint("1ef00000-0000-6000-8000-000000000001", {"a": v1, "b": v1})
        cp1["channel_values"] = {"a": b"\x00bytes", "b": [1, 2]}
        c1 = saver.put(_cfg("t"), cp1, {"source": "input", "step": -1}, {"a": v1, "b": v1})
        saver.put_writes(c1, [("a", "w1"), ("b", {"x": 1})], "task-1", "p")
        v2 = saver.get_next_version(v1, None)
        cp2 = _checkpoint("1ef00000-0000-6000-8000-000000000002", {"a": v1, "b": v2})
        cp2["channel_values"] = {"a": b"\x00bytes", "b": [1, 2, 3]}
        c2 = saver.put(c1, cp2, {"source": "loop", "step": 0}, {"b": v2})
        assert c2["configurable"]["checkpoint_id"] == cp2["id"]
        # Commits: put, put_writes, put. The second put adds one blob (b), not a:
        # unchanged channels are not rewritten.
        task = saver.store.tasks()[0]
        assert len(saver.store.list_checkpoints(task)) == 3
        state = saver.store.load(task, 3).state["vars"]
        prev = saver.store.load(task, 2).state["vars"]
        assert len([k for k in state if k.startswith("b:")]) == 3
        assert len([k for k in prev if k.startswith("b:")]) == 2
    with AgentwalSaver(path) as saver:
        t = saver.get_tuple(_cfg("t"))
        assert t.checkpoint["id"] == cp2["id"]
        assert t.checkpoint["channel_values"] == {"a": b"\x00bytes", "b": [1, 2, 3]}
        assert t.parent_config["configurable"]["checkpoint_id"] == cp1["id"]
        t1 = saver.get_tuple(c1)
        assert t1.pending_writes == [("task-1", "a", "w1"), ("task-1", "b", {"x": 1})]
        assert t1.metadata["source"] == "input"
        assert [x.checkpoint["id"] for x in saver.list(None)] == [cp2["id"], cp1["id"]]
        assert [x.checkpoint["id"] for x in saver.list(_cfg("t"), filter={"step": -1})] == [
            cp1["id"]
        ]
        saver.delete_thread("t")
        assert saver.get_tuple(_cfg("t")) is None
        assert list(saver.list(None)) == []


def test_names_with_separators_and_other_tasks_of_the_store(tmp_path):
    with agentwal.Store.open(tmp_path / "s", sync="never") as store:
        store.commit("not-a-saver-task", {"set": {"x": 1}})
        saver = AgentwalSaver(store)
        v = saver.get_next_version(None, None)
        for thread, ns in [("a:b", ""), ("a", "b:c"), ("a%3Ab", "x|y"), ("é", "")]:
            cp = _checkpoint(f"1ef0-{thread}-{ns}", {"c": v})
            cp["channel_values"] = {"c": thread}
            saver.put(_cfg(thread, ns), cp, {}, {"c": v})
        for thread, ns in [("a:b", ""), ("a", "b:c"), ("a%3Ab", "x|y"), ("é", "")]:
            t = saver.get_tuple(_cfg(thread, ns))
            assert t.checkpoint["channel_values"] == {"c": thread}
            assert t.config["configurable"] == {
                "thread_id": thread,
                "checkpoint_ns": ns,
                "checkpoint_id": f"1ef0-{thread}-{ns}",
            }
        listed = {(t.config["configurable"]["thread_id"], t.config["configurable"]["checkpoint_ns"])
                  for t in saver.list(None)}
        assert listed == {("a:b", ""), ("a", "b:c"), ("a%3Ab", "x|y"), ("é", "")}
        assert len(list(saver.list({"configurable": {"thread_id": "a"}}))) == 1
        saver.delete_thread("a")
        assert "not-a-saver-task" in store.tasks()
        assert saver.get_tuple(_cfg("a", "b:c")) is None
        assert saver.get_tuple(_cfg("a:b")) is not None
        saver.close()  # a store passed in stays open
        assert not store.closed


def test_bad_input(tmp_path):
    with AgentwalSaver(tmp_path / "s", sync="never") as saver:
        with pytest.raises(ValueError, match="thread_id"):
            saver.get_tuple({"configurable": {}})
        with pytest.raises(ValueError, match="configurable"):
            saver.get_tuple({})
        with pytest.raises(TypeError, match="thread_id"):
            saver.get_tuple({"configurable": {"thread_id": 1.5}})
        with pytest.raises(ValueError, match="too long"):
            saver.get_tuple(_cfg("x" * 600))
        with pytest.raises(ValueError, match="checkpoint_id"):
            saver.put_writes(_cfg("t"), [("a", 1)], "task")
        with pytest.raises(TypeError, match="limit"):
            list(saver.list(None, limit="3"))
        with pytest.raises(ValueError, match="'id'"):
            saver.put(_cfg("t"), {"channel_values": {}}, {}, {})
        with pytest.raises(ValueError, match="strategy"):
            saver.prune(["t"], strategy="keep_some")
        with pytest.raises(TypeError, match="not one str"):
            saver.prune("t")
        with pytest.raises(TypeError, match="not one str"):
            saver.delete_for_runs("run")
        with pytest.raises(ValueError, match="same thread"):
            saver.copy_thread("t", "t")
    with pytest.raises(TypeError, match="store must be"):
        AgentwalSaver(42)
    with agentwal.Store.open(tmp_path / "s2", sync="never") as store:
        with pytest.raises(TypeError, match="open options"):
            AgentwalSaver(store, sync="never")


# -- a real graph: AgentwalSaver and InMemorySaver must agree ------------------------------


class State(TypedDict):
    """The real graph's state: a message list, a counter, a bytes value."""

    messages: Annotated[list, add_messages]
    steps: Annotated[int, operator.add]
    blob: bytes


def _graph(checkpointer):
    def model(state: State):
        n = len(state["messages"])
        return {
            "messages": [
                AIMessage(
                    content=f"calling tool {n}",
                    id=f"ai-{n}",
                    tool_calls=[{"id": f"call-{n}", "name": "search", "args": {"q": n}}],
                )
            ],
            "steps": 1,
        }

    def tool(state: State):
        call = state["messages"][-1].tool_calls[0]
        return {
            "messages": [
                ToolMessage(content="r" * 300, tool_call_id=call["id"], id=f"tool-{call['id']}")
            ],
            "steps": 1,
            "blob": bytes([len(state["messages"]) % 256]) * 8,
        }

    def answer(state: State):
        return {"messages": [AIMessage(content="done", id=f"ans-{len(state['messages'])}")],
                "steps": 1}

    g = StateGraph(State)
    g.add_node("model", model)
    g.add_node("tool", tool)
    g.add_node("answer", answer)
    g.add_edge(START, "model")
    g.add_edge("model", "tool")
    g.add_edge("tool", "answer")
    g.add_edge("answer", END)
    return g.compile(checkpointer=checkpointer), HumanMessage


def _history(app, config):
    return [
        (s.values, s.next, s.config["configurable"]["checkpoint_ns"], s.metadata.get("step"))
        for s in app.get_state_history(config)
    ]


def test_real_graph_matches_in_memory_saver(tmp_path):
    with AgentwalSaver(tmp_path / "store") as saver:
        histories = []
        for cp in (saver, InMemorySaver()):
            app, HumanMessage = _graph(cp)
            config = {"configurable": {"thread_id": "thread-1"}}
            for turn in range(3):
                app.invoke(
                    {"messages": [HumanMessage(content=f"hi {turn}", id=f"h-{turn}")],
                     "steps": 0, "blob": b""},
                    config,
                    durability="sync",
                )
            # A fork from an older checkpoint, as a user's time travel would do.
            old = list(app.get_state_history(config))[5].config
            app.update_state(old, {"messages": [HumanMessage(content="fork", id="f")]})
            histories.append(_history(app, config))
        ours, theirs = histories
        assert len(ours) == len(theirs) > 10
        assert ours == theirs
        # Reopen: the same history from disk.
    with AgentwalSaver(tmp_path / "store") as saver:
        app, _ = _graph(saver)
        assert _history(app, {"configurable": {"thread_id": "thread-1"}}) == ours


def test_copy_thread_and_prune_on_a_real_graph(tmp_path):
    with AgentwalSaver(tmp_path / "store") as saver:
        app, _ = _graph(saver)
        src = {"configurable": {"thread_id": "src"}}
        for turn in range(2):
            app.invoke({"messages": [HumanMessage(content=f"hi {turn}", id=f"h-{turn}")],
                        "steps": 0, "blob": b""}, src, durability="sync")
        dst = {"configurable": {"thread_id": "dst"}}
        saver.copy_thread("src", "dst")
        assert _history(app, dst) == _history(app, src)
        with pytest.raises(ValueError, match="already has checkpoints"):
            saver.copy_thread("src", "dst")
        # The copy goes on by itself.
        app.invoke({"messages": [HumanMessage(content="more", id="m")], "steps": 0,
                    "blob": b""}, dst, durability="sync")
        assert len(_history(app, dst)) > len(_history(app, src))
        latest = app.get_state(src).values
        saver.prune(["src"], strategy="keep_latest")
        assert len(list(saver.list(src))) == 1
        assert app.get_state(src).values == latest
        saver.prune(["src"], strategy="delete")
        assert list(saver.list(src)) == []
        assert len(list(saver.list(dst))) > 1


class Edits(TypedDict):
    """State of the graph that breaks the prefix: replace by id, remove, mutate in place."""

    messages: Annotated[list, add_messages]
    plain: list


def _edits_graph(checkpointer):
    def grow(state):
        n = len(state["messages"])
        return {"messages": [AIMessage(content=f"m{n}", id=f"m{n}")], "plain": [n] * (n % 3)}

    def replace(state):  # same id: add_messages replaces it in place in the list
        first = state["messages"][0]
        return {"messages": [HumanMessage(content=first.content + "!", id=first.id)]}

    def remove(state):
        return {"messages": [RemoveMessage(id=state["messages"][1].id)]}

    def mutate(state):  # changes a live message object, and appends one
        state["messages"][0].content += "?"
        return {"messages": [AIMessage(content="after", id=f"a{len(state['messages'])}")]}

    g = StateGraph(Edits)
    for name, fn in [("grow", grow), ("replace", replace), ("remove", remove),
                     ("mutate", mutate), ("grow2", grow)]:
        g.add_node(name, fn)
    g.add_edge(START, "grow")
    g.add_edge("grow", "replace")
    g.add_edge("replace", "remove")
    g.add_edge("remove", "mutate")
    g.add_edge("mutate", "grow2")
    g.add_edge("grow2", END)
    return g.compile(checkpointer=checkpointer)


def test_prefix_rule_falls_back_when_the_list_is_edited(tmp_path):
    config = {"configurable": {"thread_id": "e"}}
    histories = []
    with AgentwalSaver(tmp_path / "store") as saver:
        for cp in (saver, InMemorySaver()):
            app = _edits_graph(cp)
            for turn in range(2):
                app.invoke({"messages": [HumanMessage(content=f"q{turn}", id=f"q{turn}")],
                            "plain": []}, config, durability="sync")
            histories.append(_history(app, config))
        assert histories[0] == histories[1]
        assert len(histories[0]) > 10
    with AgentwalSaver(tmp_path / "store") as saver:
        assert _history(_edits_graph(saver), config) == histories[1]


def test_prefix_rule_stores_a_growing_list_in_linear_bytes(tmp_path):
    with AgentwalSaver(tmp_path / "store", sync="never") as saver:
        app, _ = _graph(saver)
        config = {"configurable": {"thread_id": "t"}}
        sizes = []
        for turn in range(40):
            app.invoke({"messages": [HumanMessage(content=f"hi {turn}", id=f"h-{turn}")],
                        "steps": 0, "blob": b""}, config, durability="sync")
            sizes.append(saver.store.stats().bytes_written)
        # Each turn appends 4 messages: the bytes per turn must not grow with the history.
        first, last = sizes[9] - sizes[8], sizes[39] - sizes[38]
        assert last < 1.3 * first, (first, last)
        assert len(app.get_state(config).values["messages"]) == 160
