"""AgentwalSaver shared by Python threads: graphs on different threads run concurrently (the
saver locks per task), and every thread's history comes out as if it had run alone."""

from __future__ import annotations

import operator
import threading
from typing import Annotated, TypedDict

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from agentwal.langgraph import AgentwalSaver

STEPS = 12
THREADS = 8


class State(TypedDict):
    messages: Annotated[list, add_messages]
    step: Annotated[int, operator.add]


def _app(saver):
    def agent(state: State):
        n = len(state["messages"])
        return {
            "messages": [
                AIMessage(content=f"call {n}", id=f"ai-{n}",
                          tool_calls=[{"id": f"c-{n}", "name": "search", "args": {"q": n}}]),
                ToolMessage(content="r" * 200, tool_call_id=f"c-{n}", id=f"tool-{n}"),
            ],
            "step": 1,
        }

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", lambda s: "agent" if s["step"] < STEPS else END,
                            ["agent", END])
    return g.compile(checkpointer=saver)


def _run(saver, thread_id):
    _app(saver).invoke(
        {"messages": [HumanMessage(content=thread_id, id="h")], "step": 0},
        {"configurable": {"thread_id": thread_id}, "recursion_limit": STEPS + 5},
        durability="sync",
    )


def _history(saver, thread_id):
    app = _app(saver)
    return [(s.values, s.next, s.metadata.get("step"))
            for s in app.get_state_history({"configurable": {"thread_id": thread_id}})]


def test_threads_share_one_saver(tmp_path):
    reference = InMemorySaver()
    _run(reference, "t-0")
    want = _history(reference, "t-0")
    with AgentwalSaver(tmp_path / "store") as saver:
        errors = []
        stop = threading.Event()

        def worker(i):
            try:
                _run(saver, f"t-{i}")
            except BaseException as e:  # noqa: BLE001 - re-raised below
                errors.append(e)

        def reader():  # list and get_tuple across all threads while they write
            try:
                while not stop.is_set():
                    for t in saver.list(None, limit=5):
                        assert t.checkpoint["id"]
                    saver.get_tuple({"configurable": {"thread_id": "t-1"}})
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
        r = threading.Thread(target=reader)
        r.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        r.join()
        assert not errors, errors[0]
        for i in range(THREADS):
            got = _history(saver, f"t-{i}")
            # Each thread's states are the reference's (its own human message aside).
            assert len(got) == len(want) == STEPS + 2
            for (gv, gn, gs), (wv, wn, ws) in zip(got, want):
                assert (gn, gs, gv.get("step")) == (wn, ws, wv.get("step"))
                assert [m.content for m in gv.get("messages", [])][1:] == \
                    [m.content for m in wv.get("messages", [])][1:]
    # Reopened, the store holds the same histories.
    with AgentwalSaver(tmp_path / "store") as saver:
        for i in range(THREADS):
            assert len(_history(saver, f"t-{i}")) == STEPS + 2


def test_threads_racing_to_make_a_stripe_lock_all_get_one(tmp_path):
    """The saver makes its stripe locks on first use: threads that ask for the same new
    stripe at once all get the same lock, so the stripe still excludes them."""
    with AgentwalSaver(tmp_path / "store") as saver:
        for stripe in range(40):
            barrier = threading.Barrier(16)
            got = []

            def ask(stripe: int = stripe) -> None:
                barrier.wait()
                got.append(saver._stripe(stripe))

            threads = [threading.Thread(target=ask) for _ in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(got) == 16 and all(lock is got[0] for lock in got), stripe
