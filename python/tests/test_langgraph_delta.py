"""``get_delta_channel_history`` (LangGraph's DeltaChannel support): a graph whose channel
is a ``DeltaChannel`` runs on AgentwalSaver, on a local store and on PostgreSQL, and

- its state, read back by a fresh saver, equals the same run's on InMemorySaver;
- at every checkpoint of the history the override returns exactly what
  ``BaseCheckpointSaver``'s own implementation (a walk of ``get_tuple`` and
  ``parent_config``, the contract's reference) returns, for the delta channel, a plain
  channel and an unknown one, sync and async.

Needs the cluster of pg_env (``AGENTWAL_PG_HOST``) for the PostgreSQL half: without it that
half fails, never skips.
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, Iterator, List, TypedDict

import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

import agentwal
from agentwal.langgraph import AgentwalSaver

import pg_env

TURNS = 9  # with snapshot_frequency=3: seeds are snapshots and the walks cross several


def _concat(state: Any, writes: List[Any]) -> list:
    """The delta channel's reducer: batching-invariant list concatenation."""
    out = list(state or [])
    for w in writes:
        out.extend(w)
    return out


class State(TypedDict):
    items: Annotated[list, DeltaChannel(_concat, snapshot_frequency=3)]
    turns: Annotated[int, operator.add]


def _build(saver: Any) -> Any:
    def node(state: State) -> dict:
        k = state.get("turns", 0) + 1
        return {"items": [f"item-{k}", {"k": k, "text": "x" * (k * 10)}], "turns": 1}

    g = StateGraph(State)
    g.add_node("node", node)
    g.add_edge(START, "node")
    g.add_edge("node", END)
    return g.compile(checkpointer=saver)


def _run(saver: Any, thread: str) -> dict:
    app = _build(saver)
    config = {"configurable": {"thread_id": thread}}
    for k in range(TURNS):
        app.invoke({"items": [f"in-{k}"]}, config, durability="sync")
    return config


@pytest.fixture(params=["local", "postgres"])
def store(request, tmp_path) -> Iterator[Any]:
    """A local Store or a PgStore in a fresh schema."""
    if request.param == "local":
        with agentwal.Store.open(tmp_path / "store") as s:
            yield s
    else:
        schema = pg_env.fresh_schema("lgdelta")
        with agentwal.PgStore.open(pg_env.url(), schema=schema) as s:
            yield s
        pg_env.drop_schema(schema)


def test_delta_channel_history_matches_the_reference_walk(store) -> None:
    # The saver's own walk of its index is under test, not the base class's fallback.
    assert AgentwalSaver.get_delta_channel_history is not BaseCheckpointSaver.get_delta_channel_history
    assert (
        AgentwalSaver.aget_delta_channel_history
        is not BaseCheckpointSaver.aget_delta_channel_history
    )
    saver = AgentwalSaver(store)
    config = _run(saver, "t")
    reference = InMemorySaver()
    _run(reference, "t")
    fresh = AgentwalSaver(store)  # reads the thread from the store, not from a cache
    app = _build(fresh)
    assert app.get_state(config).values == _build(reference).get_state(config).values
    history = list(fresh.list(config))
    assert len(history) >= 2 * TURNS
    channels = ["items", "turns", "no-such-channel"]
    seeded = 0
    for tup in history:
        cfg = tup.config
        ours = fresh.get_delta_channel_history(config=cfg, channels=channels)
        want = BaseCheckpointSaver.get_delta_channel_history(fresh, config=cfg, channels=channels)
        assert ours == want, cfg
        assert asyncio.run(fresh.aget_delta_channel_history(config=cfg, channels=channels)) == want
        seeded += "seed" in ours["items"]
    assert seeded > 0  # some walks ended at a stored value, not at the root
    assert fresh.get_delta_channel_history(config=config, channels=[]) == {}
    latest = fresh.get_delta_channel_history(config=config, channels=["items"])
    assert latest == BaseCheckpointSaver.get_delta_channel_history(
        fresh, config=history[0].config, channels=["items"]
    )
    with pytest.raises(TypeError):
        fresh.get_delta_channel_history(config=config, channels="items")
    unknown = {"configurable": {"thread_id": "never"}}
    assert fresh.get_delta_channel_history(config=unknown, channels=["items"]) == {
        "items": {"writes": []}
    }
