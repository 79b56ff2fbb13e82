"""AgentwalSaver on PostgreSQL: LangGraph's conformance suite (every base test and every
optional capability, as on a local store), a real graph against InMemorySaver, and the
bytes stored in the database for a growing message list (O(N), by the prefix rule).

Needs the cluster of pg_env (``AGENTWAL_PG_HOST``): without it these tests fail, never skip.
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, TypedDict

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from agentwal import PgStore
from agentwal.langgraph import AgentwalSaver

import pg_env

CAPABILITIES = {
    "put": 17, "put_writes": 10, "get_tuple": 10, "list": 16, "delete_thread": 5,
    "delete_for_runs": 7, "copy_thread": 8, "prune": 8,
}  # 81 tests in langgraph-checkpoint-conformance 0.0.2


@checkpointer_test(name="AgentwalSaver on PostgreSQL")
async def _pg_saver():
    schema = pg_env.fresh_schema("lgconf")
    saver = AgentwalSaver(pg_env.url(), schema=schema)  # the saver opens (and closes) it
    try:
        yield saver
    finally:
        saver.close()
        pg_env.drop_schema(schema)


def test_conformance_suite_on_postgres():
    report = asyncio.run(validate(_pg_saver))
    report.print_report()
    for cap, r in report.results.items():
        print(f"{cap}: detected={r.detected} passed={r.passed} ({r.tests_passed} passed, "
              f"{r.tests_failed} failed, {r.tests_skipped} skipped)")
        for failure in r.failures:
            print("   ", failure)
    for cap, n in CAPABILITIES.items():
        r = report.results[cap]
        assert r.detected, cap
        assert r.passed is True and r.tests_failed == 0, (cap, r.failures)
        assert r.tests_passed == n, cap
    assert sum(r.tests_passed for r in report.results.values()) == 81
    assert report.passed_all_base()


class State(TypedDict):
    messages: Annotated[list, add_messages]
    steps: Annotated[int, operator.add]


def _graph(checkpointer, tool_bytes=300):
    """A model that calls a tool twice per question, then answers."""

    def model(state):
        n = len(state["messages"])
        last_q = max(i for i, m in enumerate(state["messages"]) if isinstance(m, HumanMessage))
        if sum(isinstance(m, ToolMessage) for m in state["messages"][last_q:]) >= 2:
            return {"messages": [AIMessage(content="done", id=f"ans-{n}")], "steps": 1}
        return {"messages": [AIMessage(content=f"calling {n}", id=f"ai-{n}", tool_calls=[
            {"id": f"call-{n}", "name": "search", "args": {"q": n}}])], "steps": 1}

    def tool(state):
        call = state["messages"][-1].tool_calls[0]
        return {"messages": [ToolMessage(content="r" * tool_bytes, tool_call_id=call["id"],
                                         id=f"tool-{call['id']}")], "steps": 1}

    def route(state):
        return "tool" if getattr(state["messages"][-1], "tool_calls", None) else END

    g = StateGraph(State)
    g.add_node("model", model)
    g.add_node("tool", tool)
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route)
    g.add_edge("tool", "model")
    return g.compile(checkpointer=checkpointer)


def _history(app, config):
    return [(s.values, s.next, s.metadata.get("step")) for s in app.get_state_history(config)]


def test_real_graph_matches_in_memory_saver_and_survives_a_reopen():
    schema = pg_env.fresh_schema("lggraph")
    config = {"configurable": {"thread_id": "thread-1"}}
    try:
        store = PgStore.open(pg_env.url(), schema=schema)
        histories = []
        for cp in (AgentwalSaver(store), InMemorySaver()):
            app = _graph(cp)
            for turn in range(2):
                app.invoke({"messages": [HumanMessage(content=f"hi {turn}", id=f"h-{turn}")],
                            "steps": 0}, config, durability="sync")
            old = list(app.get_state_history(config))[4].config  # time travel: a fork
            app.update_state(old, {"messages": [HumanMessage(content="fork", id="f")]})
            histories.append(_history(app, config))
        assert histories[0] == histories[1] and len(histories[0]) > 10
        store.close()
        # Another process's view: a fresh saver (and connection) on the same database.
        with AgentwalSaver(pg_env.url(), schema=schema) as saver:
            assert _history(_graph(saver), config) == histories[1]
    finally:
        pg_env.drop_schema(schema)


def test_a_growing_message_list_costs_linear_bytes_in_the_database():
    """200 steps (super-steps of a tool loop: an AIMessage with a tool call, then a ~1.5 KB
    ToolMessage, each step appending one message): the bytes of the thread's checkpoint
    bodies in PostgreSQL (``octet_length``) grow linearly, the deltas doubling from 100 to
    200 steps (not quadrupling), and stay far below what storing the whole list at every
    step would take; ``pg_total_relation_size`` agrees."""
    schema = pg_env.fresh_schema("lgbytes")
    task = "lg:t:"
    try:
        with AgentwalSaver(pg_env.url(), schema=schema) as saver:
            app = _graph(saver, tool_bytes=1500)
            config = {"configurable": {"thread_id": "t"}}

            def stored():
                return int(pg_env.psql(
                    f'SELECT coalesce(sum(octet_length(body)), 0) FROM "{schema}".checkpoints '
                    f"WHERE task = convert_to('{task}', 'UTF8')"))

            def relation():
                return int(pg_env.psql(
                    f"SELECT pg_total_relation_size('\"{schema}\".checkpoints')"))

            def snapshot_bytes():
                return int(pg_env.psql(
                    f'SELECT coalesce(sum(octet_length(body)), 0) FROM "{schema}".checkpoints '
                    f"WHERE task = convert_to('{task}', 'UTF8') AND snapshot"))

            rel0 = relation()
            at = {}
            full_list_total = 0  # bytes if every step stored the whole list
            turn = 0
            while True:
                app.invoke({"messages": [HumanMessage(content=f"q{turn}", id=f"q-{turn}")],
                            "steps": 0}, config, durability="sync")
                turn += 1
                steps = app.get_state(config).values["steps"]
                if steps >= 100 and 100 not in at:
                    at[100] = (steps, stored(), snapshot_bytes(), relation() - rel0)
                if steps >= 200:
                    at[200] = (steps, stored(), snapshot_bytes(), relation() - rel0)
                    break
            for cp in saver.list(config):
                msgs = cp.checkpoint["channel_values"].get("messages", [])
                full_list_total += sum(len(saver.serde.dumps_typed(m)[1]) for m in msgs)
            infos = saver.store.list_checkpoints(task)
            assert sum(i.bytes for i in infos) == at[200][1]  # CheckpointInfo.bytes: the body's
        (s1, b1, snap1, r1), (s2, b2, snap2, r2) = at[100], at[200]
        d1, d2 = b1 - snap1, b2 - snap2  # the deltas: what each step wrote
        print(f"after {s1} steps: {b1} B of checkpoint bodies ({d1} B of deltas, {snap1} B of "
              f"snapshots; the table grew {r1} B); after {s2} steps: {b2} B ({d2} B, {snap2} B; "
              f"{r2} B); x{b2 / b1:.2f} in all, deltas x{d2 / d1:.2f}; {len(infos)} checkpoints; "
              f"the whole list at every checkpoint would be {full_list_total} B")
        # Linear: the deltas double from 100 to 200 steps (a full list per step: x4), and the
        # snapshots (at most ~1.7 times the deltas, docs/store.md §2) keep the total so.
        assert 1.7 < d2 / d1 < 2.4, (at, d1, d2)
        assert b2 / b1 < 3.0, (at, b1, b2)
        assert b2 < full_list_total / 10, (b2, full_list_total)
        assert r2 < full_list_total / 10, (r2, full_list_total)
    finally:
        pg_env.drop_schema(schema)
