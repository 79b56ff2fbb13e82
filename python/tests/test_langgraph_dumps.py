"""A list channel's items are serialized once, not at every step (``agentwal._lg_dumps``):

- a graph appending two messages per step makes ``put`` serialize O(new items) per step,
  not the whole list (before: every item at every step, quadratic in the thread's
  length);
- what a fresh saver reads back equals the run's state;
- an item whose attribute is reassigned in place between two puts is serialized again,
  so the stored state has the new value;
- a list whose items are dicts (no ``__dict__``) is always serialized.
"""

from __future__ import annotations

from typing import Annotated, Any, Dict, List, Tuple, TypedDict

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

import agentwal
from agentwal.langgraph import AgentwalSaver

STEPS = 40


class CountingSerde(JsonPlusSerializer):
    """LangGraph's serializer, counting the messages it serializes."""

    def __init__(self) -> None:
        super().__init__()
        self.messages = 0

    def dumps_typed(self, obj: Any) -> Tuple[str, bytes]:
        if isinstance(obj, (AIMessage, HumanMessage)):
            self.messages += 1
        return super().dumps_typed(obj)


class State(TypedDict):
    messages: Annotated[list, add_messages]
    step: int


def _graph(saver: Any) -> Any:
    def agent(state: State) -> Dict[str, Any]:
        n = state.get("step", 0) + 1
        return {
            "messages": [
                AIMessage(content=f"thinking {n}", id=f"ai-{n}"),
                HumanMessage(content=f"reply {n}", id=f"h-{n}"),
            ],
            "step": n,
        }

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", lambda s: "agent" if s["step"] < STEPS else END, ["agent", END])
    return g.compile(checkpointer=saver)


def test_put_serializes_only_the_new_items_of_a_list(tmp_path: Any) -> None:
    serde = CountingSerde()
    saver = AgentwalSaver(str(tmp_path / "s"), serde=serde)
    config = {"configurable": {"thread_id": "t"}, "recursion_limit": STEPS + 10}
    out = _graph(saver).invoke({"messages": [], "step": 0}, config, durability="sync")
    assert len(out["messages"]) == 2 * STEPS
    # Each message is serialized by put_writes (its write) and once by a put; every item
    # again at every step would be 2 * (1 + 2 + ... + STEPS) = 1640 puts' worth.
    assert serde.messages <= 2 * 2 * STEPS + 8, serde.messages
    saver.close()
    fresh = AgentwalSaver(str(tmp_path / "s"))
    values = fresh.get_tuple(config).checkpoint["channel_values"]
    assert values["messages"] == out["messages"]
    fresh.close()


def _put(saver: AgentwalSaver, config: Dict[str, Any], messages: List[Any], n: int) -> Dict[str, Any]:
    cp = empty_checkpoint()
    cp["id"] = f"1ef00000-0000-6000-8000-{n:012d}"
    cp["channel_values"] = {"messages": messages}
    cp["channel_versions"] = {"messages": n}
    return saver.put(config, cp, {"source": "loop", "step": n}, {"messages": n})


def test_an_attribute_reassigned_in_place_is_serialized_again(tmp_path: Any) -> None:
    store = agentwal.Store.open(str(tmp_path / "s"))
    saver = AgentwalSaver(store)
    first = AIMessage(content="before", id="a")
    messages = [first, HumanMessage(content="q", id="h")]
    config: Dict[str, Any] = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    config = _put(saver, config, messages, 1)
    first.content = "after"
    messages.append(AIMessage(content="more", id="b"))
    config = _put(saver, config, messages, 2)
    fresh = AgentwalSaver(store)
    stored = fresh.get_tuple(config).checkpoint["channel_values"]["messages"]
    assert [m.content for m in stored] == ["after", "q", "more"]


def test_dict_items_are_serialized_every_time(tmp_path: Any) -> None:
    store = agentwal.Store.open(str(tmp_path / "s"))
    saver = AgentwalSaver(store)
    item = {"role": "user", "content": "before"}
    messages: List[Any] = [item]
    config: Dict[str, Any] = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    config = _put(saver, config, messages, 1)
    item["content"] = "after"
    messages.append({"role": "assistant", "content": "ok"})
    config = _put(saver, config, messages, 2)
    fresh = AgentwalSaver(store)
    stored = fresh.get_tuple(config).checkpoint["channel_values"]["messages"]
    assert stored == [{"role": "user", "content": "after"}, {"role": "assistant", "content": "ok"}]


class _Obj:
    """An item with a ``__dict__`` (as a message has), its attributes set from ``kw``."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


class _Stamp:
    """A serializer whose every call gives new bytes: a reused item keeps its old ones."""

    def __init__(self) -> None:
        self.calls = 0

    def dumps_typed(self, obj: Any) -> Tuple[str, bytes]:
        self.calls += 1
        return ("stamp", str(self.calls).encode())


def _reusable(item: Any, i: int, last: Any) -> bool:
    """The rule, item by item: the same object at the same position, with a __dict__
    holding the very same values as then."""
    d = getattr(item, "__dict__", None)
    if type(d) is not dict or i >= len(last.items) or last.items[i] is not item:
        return False
    before = last.attrs[i]
    return before is not None and len(before) == len(d) and all(
        a is b for a, b in zip(before, d.values()))


def test_dump_list_reuses_exactly_what_the_item_rule_allows() -> None:
    """Whatever changed between two puts, ``dump_list`` reuses an item's bytes exactly when
    it is the same object at the same position with the very same attribute values. The
    changes include an equal value that is not the same object, and an attribute moved
    from one item to the next with the same values (a check over the flattened values of
    the whole prefix, without each item's length, would take it for unchanged)."""
    import random

    from agentwal._lg_dumps import dump_list

    rng = random.Random(3)
    shared = [None, "", "xy", 1000.5]
    serde = _Stamp()
    for _ in range(300):
        items: List[Any] = [_Obj(a=rng.choice(shared), b=rng.choice(shared))
                            for _ in range(rng.randrange(6))]
        _, last = dump_list(serde, items, None)
        now = list(items)
        change = rng.randrange(7)
        if change == 1 and now:
            setattr(rng.choice(now), "a", object())
        elif change == 2 and len(now) > 1:  # an attribute moved to the next item
            i = rng.randrange(len(now) - 1)
            value = now[i].__dict__.pop("b")
            now[i + 1].__dict__["c"] = value
        elif change == 3 and now:
            now[rng.randrange(len(now))] = _Obj(a=None, b=None)
        elif change == 4:
            now.append({"a": 1})
        elif change == 5 and now:
            now.pop(rng.randrange(len(now)))
        elif change == 6 and now:  # an equal value, not the same object: serialized again
            now[-1].a = rng.random() * 0 + 1000.5
        now.append(_Obj(a=None))
        out, _ = dump_list(serde, now, last)
        for i, item in enumerate(now):
            reused = i < len(last.dumped) and out[i] is last.dumped[i]
            assert reused == _reusable(item, i, last), (change, i)
