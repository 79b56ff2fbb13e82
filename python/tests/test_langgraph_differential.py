"""Differential tests: the same real LangGraph graph, run on AgentwalSaver and on
InMemorySaver, must leave the same checkpoints behind.

Each test drives one graph with one script on both savers (``lg_compare.run_both``) and
compares, up to a consistent renaming of ids: every checkpoint tuple of the thread in
every namespace (config, parent, metadata, channel values, version counters, versions
seen, pending writes), ``get_state(subgraphs=True)`` now and at every root checkpoint,
``get_state_history`` of the root and of each subgraph namespace (values, next, config,
metadata, parent, tasks with their interrupts, errors and subgraph states), and what the
script's invokes returned. No network and no model: the "chat model" is a node function.
"""

from __future__ import annotations

import operator
import threading
import time
from typing import Annotated, List, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, RetryPolicy, Send, interrupt

from lg_compare import Canon, assert_same, run_both

ROUNDS = 4  # tool rounds per turn of the tool loop


def _compare(tmp_path, build, script, min_checkpoints):
    ours, theirs, n = run_both(tmp_path, build, script)
    assert n >= min_checkpoints, n
    assert_same(ours, theirs)
    print(f"{n} checkpoints compared")
    return ours


# -- a tool-calling loop: fake model, ToolNode, several rounds ------------------------------


@tool
def lookup(q: int) -> str:
    """Looks ``q`` up (deterministic: no network)."""
    return f"result for {q}: " + "x" * (q % 7)


def fake_model(state: MessagesState):
    """Calls ``lookup`` twice per round (parallel tool calls) for ROUNDS rounds after the
    last human message, then answers."""
    msgs = state["messages"]
    last_human = max(i for i, m in enumerate(msgs) if isinstance(m, HumanMessage))
    done = sum(isinstance(m, ToolMessage) for m in msgs[last_human:]) // 2
    n = len(msgs)
    if done < ROUNDS:
        return {"messages": [AIMessage(content="", id=f"ai-{n}", tool_calls=[
            {"id": f"call-{n}-a", "name": "lookup", "args": {"q": n}},
            {"id": f"call-{n}-b", "name": "lookup", "args": {"q": n + 1}},
        ])]}
    return {"messages": [AIMessage(content=f"answer after {done} rounds", id=f"ai-{n}")]}


def tool_loop(checkpointer, **compile_kwargs):
    """model -> (tools -> model)* -> END, with LangGraph's ToolNode and tools_condition."""
    g = StateGraph(MessagesState)
    g.add_node("model", fake_model)
    g.add_node("tools", ToolNode([lookup]))
    g.add_edge(START, "model")
    g.add_conditional_edges("model", tools_condition)
    g.add_edge("tools", "model")
    return g.compile(checkpointer=checkpointer, **compile_kwargs)


CFG = {"configurable": {"thread_id": "t"}}


def _human(text):
    return {"messages": [HumanMessage(content=text, id=f"h-{text}")]}


def test_tool_calling_loop(tmp_path):
    """A fake model calling a tool twice per round through ToolNode, 4 rounds per turn, two
    turns (sync durability, then streamed with the default)."""

    def script(app, reopen):
        out = [app().invoke(_human("first"), CFG, durability="sync")]
        out.append(list(app().stream(_human("second"), CFG, stream_mode="values")))
        return out

    ours = _compare(tmp_path, tool_loop, script, min_checkpoints=2 * (2 * ROUNDS + 2))
    last = ours["outputs"][0]["messages"]
    assert len(last) == 1 + 3 * ROUNDS + 1  # human, (ai + 2 tool messages) per round, answer


# -- update_state on an old checkpoint, then resume from the fork ---------------------------


def test_fork_with_update_state_then_resume(tmp_path):
    """update_state on an old checkpoint (as the tools node), then invoke from the fork: two
    branches under one parent."""

    def script(app, reopen):
        out = [app().invoke(_human("q"), CFG, durability="sync")]
        history = list(app().get_state_history(CFG))
        # The checkpoint before the second tool round: its next is ("tools",).
        old = [s for s in history if s.next == ("tools",)][-2]
        fork = app().update_state(
            old.config,
            {"messages": [ToolMessage(content="forked", tool_call_id=m["id"], id=f"f-{m['id']}")
                          for m in old.values["messages"][-1].tool_calls]},
            as_node="tools",
        )
        out.append(fork["configurable"].get("checkpoint_ns"))
        out.append(app().invoke(None, fork))  # resume from the fork (default durability)
        out.append(app().get_state(CFG).values)
        return out

    ours = _compare(tmp_path, tool_loop, script, min_checkpoints=2 * ROUNDS + 2 + 4)
    # Two branches share the ancestors: two checkpoints have the same parent.
    parents = [t["parent_config"]["configurable"]["checkpoint_id"]
               for t in ours["tuples"] if t["parent_config"]]
    assert len(parents) > len(set(parents))


# -- RemoveMessage: by id from a node, by id from update_state, and remove-all --------------


def _trimming_graph(checkpointer):
    def chat(state: MessagesState):
        n = len(state["messages"])
        last = state["messages"][-1].id
        return {"messages": [AIMessage(content=f"reply {n}", id=f"r-{n}-{last}")]}

    def trim(state: MessagesState):  # keeps the last three messages and adds a note
        msgs = state["messages"]
        note = AIMessage(content=f"trimmed {len(msgs) - 3}", id=f"note-{msgs[-1].id}")
        return {"messages": [RemoveMessage(id=m.id) for m in msgs[:-3]] + [note]}

    g = StateGraph(MessagesState)
    g.add_node("chat", chat)
    g.add_node("trim", trim)
    g.add_edge(START, "chat")
    g.add_edge("chat", "trim")
    g.add_edge("trim", END)
    return g.compile(checkpointer=checkpointer)


def test_remove_message(tmp_path):
    """RemoveMessage from a node (trimming), from update_state (alone, and with an added
    message: same length, other content), and REMOVE_ALL_MESSAGES."""

    def script(app, reopen):
        out = []
        for i in range(4):
            out.append(app().invoke(_human(f"m{i}"), CFG, durability="sync" if i % 2 else None))
        first, second = app().get_state(CFG).values["messages"][:2]
        app().update_state(CFG, {"messages": [RemoveMessage(id=first.id)]})
        # Same length, other content: only the items' bytes tell the lists apart.
        app().update_state(CFG, {"messages": [RemoveMessage(id=second.id),
                                              HumanMessage(content="swap", id="swap")]})
        out.append(app().invoke(_human("after-remove"), CFG))
        app().update_state(CFG, {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES),
                                              HumanMessage(content="fresh", id="fresh")]})
        out.append(app().invoke(_human("last"), CFG))
        return out

    ours = _compare(tmp_path, _trimming_graph, script, min_checkpoints=20)
    assert [m[2]["id"] for m in ours["outputs"][-1]["messages"]][0] == "fresh"


# -- interrupt() then Command(resume=...) ---------------------------------------------------


class Approval(TypedDict):
    """State of the approval graph."""

    messages: Annotated[list, add_messages]
    decisions: Annotated[List[str], operator.add]


def _approval_graph(checkpointer):
    def draft(state: Approval):
        return {"messages": [AIMessage(content="draft", id=f"d-{len(state['messages'])}")]}

    def review(state: Approval):  # two questions: the second interrupt after the first resume
        first = interrupt({"question": "send?", "draft": state["messages"][-1].content})
        second = interrupt({"question": "really?", "first": first})
        return {"decisions": [f"{first}/{second}"]}

    g = StateGraph(Approval)
    g.add_node("draft", draft)
    g.add_node("review", review)
    g.add_edge(START, "draft")
    g.add_edge("draft", "review")
    g.add_edge("review", END)
    return g.compile(checkpointer=checkpointer)


def test_interrupt_then_resume(tmp_path):
    """A node with two interrupt() calls, resumed twice with Command(resume=...), then a second
    turn."""

    def script(app, reopen):
        out = [app().invoke({**_human("go"), "decisions": []}, CFG, durability="sync")]
        out.append(app().get_state(CFG))
        out.append(app().invoke(Command(resume="yes"), CFG, durability="sync"))
        out.append(app().invoke(Command(resume="sure"), CFG))
        out.append(app().invoke({**_human("again"), "decisions": []}, CFG))
        out.append(app().invoke(Command(resume="no"), CFG))
        out.append(app().invoke(Command(resume="never"), CFG))
        return out

    ours = _compare(tmp_path, _approval_graph, script, min_checkpoints=8)
    paused = ours["outputs"][1][1]
    assert paused["next"] == ("review",) and len(paused["interrupts"]) == 1
    assert ours["outputs"][-1]["decisions"] == ["yes/sure", "no/never"]


# -- Send fan-out, map-reduce with a reducer, one failing branch retried --------------------


class MapReduce(TypedDict):
    """State of the map-reduce graph."""

    items: List[int]
    results: Annotated[List[str], operator.add]
    total: int


def _map_reduce_graph(checkpointer, fail: List[int]):
    finished: List[threading.Event] = []

    def fan_out(state: MapReduce):
        finished[:] = [threading.Event() for _ in state["items"]]
        return [Send("work", {"item": i, "pos": n}) for n, i in enumerate(state["items"])]

    def work(arg: dict):
        if arg["item"] in fail:
            # Fails once its siblings are done, so that which of their writes were saved
            # when the step aborted does not depend on thread timing.
            for n, e in enumerate(finished):
                if n != arg["pos"]:
                    e.wait(30)
            time.sleep(0.2)  # their put_writes run right after they return
            raise ValueError(f"item {arg['item']} failed")
        finished[arg["pos"]].set()
        return {"results": [f"w{arg['item']}"]}

    def reduce(state: MapReduce):
        return {"total": len(state["results"])}

    g = StateGraph(MapReduce)
    g.add_node("plan", lambda s: {"items": s["items"]})
    g.add_node("work", work, retry_policy=RetryPolicy(max_attempts=1))
    g.add_node("reduce", reduce)
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", fan_out, ["work"])
    g.add_edge("work", "reduce")
    g.add_edge("reduce", END)
    return g.compile(checkpointer=checkpointer)


def test_send_fan_out_map_reduce(tmp_path):
    """Send fan-out into a reducer; then a fan-out where one branch fails (its siblings' writes
    stay pending) and a resume that reruns only it."""
    fail: List[int] = []

    def script(app, reopen):
        out = [app().invoke({"items": [1, 2, 3, 4, 5], "results": [], "total": 0}, CFG)]
        fail.append(3)  # one branch fails: the others' writes stay as pending writes
        with pytest.raises(ValueError, match="item 3 failed"):
            app().invoke({"items": [3, 6, 7], "results": [], "total": 0}, CFG,
                         durability="sync")
        out.append(app().get_state(CFG))
        fail.clear()
        out.append(app().invoke(None, CFG, durability="sync"))  # retries only the failed one
        return out

    def build(cp):
        return _map_reduce_graph(cp, fail)

    ours = _compare(tmp_path, build, script, min_checkpoints=8)
    assert sorted(ours["outputs"][0]["results"]) == [f"w{i}" for i in range(1, 6)]
    failed = ours["outputs"][1][1]
    assert any(t[1]["error"] is not None for t in failed["tasks"])
    assert ours["outputs"][2]["total"] == 8


# -- subgraphs, two levels deep (non-empty checkpoint_ns) -----------------------------------


class Outer(TypedDict):
    """State shared by the parent graph and its subgraphs."""

    log: Annotated[List[str], operator.add]


def _nested_graph(checkpointer):
    def leaf(state: Outer):
        answer = interrupt(f"leaf sees {len(state['log'])}")
        return {"log": [f"leaf:{answer}"]}

    inner = StateGraph(Outer)
    inner.add_node("leaf", leaf)
    inner.add_node("after_leaf", lambda s: {"log": ["after_leaf"]})
    inner.add_edge(START, "leaf")
    inner.add_edge("leaf", "after_leaf")
    inner.add_edge("after_leaf", END)

    middle = StateGraph(Outer)
    middle.add_node("pre", lambda s: {"log": ["pre"]})
    middle.add_node("inner", inner.compile())
    middle.add_edge(START, "pre")
    middle.add_edge("pre", "inner")
    middle.add_edge("inner", END)

    outer = StateGraph(Outer)
    outer.add_node("start", lambda s: {"log": ["start"]})
    outer.add_node("middle", middle.compile())
    outer.add_node("end", lambda s: {"log": [f"end after {len(s['log'])}"]})
    outer.add_edge(START, "start")
    outer.add_edge("start", "middle")
    outer.add_edge("middle", "end")
    outer.add_edge("end", END)
    return outer.compile(checkpointer=checkpointer)


def test_subgraphs(tmp_path):
    """A subgraph inside a subgraph, paused by interrupt() in the innermost: non-empty and
    nested checkpoint_ns, get_state(subgraphs=True), namespace histories."""

    def script(app, reopen):
        out = [app().invoke({"log": ["in"]}, CFG, durability="sync")]
        out.append(app().get_state(CFG, subgraphs=True))
        out.append(app().invoke(Command(resume="ok"), CFG))
        out.append(app().invoke({"log": ["in2"]}, CFG))
        out.append(app().invoke(Command(resume="ok2"), CFG, durability="sync"))
        return out

    ours = _compare(tmp_path, _nested_graph, script, min_checkpoints=20)
    namespaces = {t["config"]["configurable"]["checkpoint_ns"] for t in ours["tuples"]}
    assert any("|" in ns for ns in namespaces), namespaces  # two levels deep
    assert sum(k.startswith("history of ") for k in ours["view"]) >= 4
    # While paused, the subgraph state shows two levels down.
    paused = ours["outputs"][1][1]
    middle_state = paused["tasks"][0][1]["state"][1]
    assert middle_state["tasks"][0][1]["state"][1]["next"] == ("leaf",)


# -- closing and reopening the agentwal store between steps ---------------------------------


def test_reopen_between_steps(tmp_path):
    """The agentwal saver and its store closed and reopened at every pause (interrupt_before
    the tools) and between turns."""
    def build(cp):
        return tool_loop(cp, interrupt_before=["tools"])

    def script(app, reopen):
        out = [app().invoke(_human("q"), CFG, durability="sync")]
        for i in range(ROUNDS):  # each round pauses before the tools: reopen, resume
            reopen()
            out.append(app().invoke(None, CFG, durability="sync" if i % 2 else None))
        reopen()
        out.append(app().get_state(CFG))
        out.append(app().invoke(_human("q2"), CFG))
        reopen()
        out.append(app().invoke(None, CFG))
        reopen()
        return out

    ours = _compare(tmp_path, build, script, min_checkpoints=2 * ROUNDS + 4)
    assert ours["outputs"][ROUNDS]["messages"][-1][2]["content"] == f"answer after {ROUNDS} rounds"


# -- the comparison itself catches differences ----------------------------------------------


def test_the_comparison_catches_differences(tmp_path):
    """A saver that loses or alters one thing must fail the comparison."""
    from agentwal.langgraph import AgentwalSaver

    class Lossy(AgentwalSaver):
        """Drops the pending writes of one checkpoint or changes one value."""

        mode = ""

        def get_tuple(self, config):
            t = super().get_tuple(config)
            if t is not None and self.mode == "writes" and t.pending_writes:
                t = t._replace(pending_writes=t.pending_writes[:-1])
            return t

        def list(self, config, **kw):
            for t in super().list(config, **kw):
                if self.mode == "metadata" and t.metadata.get("step") == 2:
                    t = t._replace(metadata={**t.metadata, "step": 3})
                if self.mode == "parent" and t.metadata.get("step") == 3:
                    t = t._replace(parent_config=None)
                yield t

    for mode in ("writes", "metadata", "parent"):
        import lg_compare

        real = lg_compare.AgentwalSaver
        Lossy.mode = mode
        lg_compare.AgentwalSaver = Lossy
        try:
            def script(app, reopen):
                return [app().invoke(_human("q"), CFG, durability="sync")]

            ours, theirs, _ = run_both(tmp_path / mode, tool_loop, script)
        finally:
            lg_compare.AgentwalSaver = real
        with pytest.raises(AssertionError):
            assert_same(ours, theirs)
    # A consistent renaming is required: one id of one run may not stand for two.
    c = Canon([])
    a = c(["1f1ed761-0eb9-6df3-8001-76bb92874f54", "1f1ed761-0eb9-6df3-8001-76bb92874f54"])
    d = Canon([])
    b = d(["1f1ed761-0eb9-6df3-8001-76bb92874f54", "1f1ed761-0eb9-6df3-8001-76bb92874f55"])
    assert a != b
