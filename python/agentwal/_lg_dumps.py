"""Serializing a list channel's items once, not at every step.

LangGraph hands ``put`` a list channel (the messages) whole at every step: the items of
the steps before and the few new ones. Serializing every item again made a step's cost
grow with the thread (a 200-step thread: ~400 messages serialized per step, as much CPU
as PostgresSaver's whole-list blob). The saver keeps, per task and channel, the items it
serialized at its last ``put`` with their bytes; an item that is the very object at the
same position, with the very same attribute values (compared by identity), reuses them.

What this relies on: an item already checkpointed is not changed in place below its
attributes (a nested dict or list edited in place). LangGraph's state updates replace
items (reducers return new lists, ``add_messages`` replaces a message by id), and its
default durability (``"async"``) already serializes a checkpoint while the next step
runs, so it relies on the same. Reassigning an attribute (``msg.content = ...``) is
seen, and the item is serialized again. Items without a ``__dict__`` (dicts, strings,
tuples) are always serialized.
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

from langgraph.checkpoint.base import SerializerProtocol


class ListDump(NamedTuple):
    """A list's items as one ``put`` serialized them: the objects, their attribute values
    then (None: not remembered) and their ``dumps_typed`` pairs."""

    items: Tuple[Any, ...]
    attrs: Tuple[Optional[Tuple[Any, ...]], ...]
    dumped: Tuple[Tuple[str, bytes], ...]


def _attrs(item: Any) -> Optional[Tuple[Any, ...]]:
    """The item's attribute values, or None for an item without a ``__dict__``."""
    d = getattr(item, "__dict__", None)
    return tuple(d.values()) if type(d) is dict else None


def _unchanged(before: Optional[Tuple[Any, ...]], now: Optional[Tuple[Any, ...]]) -> bool:
    return (
        before is not None
        and now is not None
        and len(before) == len(now)
        and all(a is b for a, b in zip(before, now))
    )


def dump_list(
    serde: SerializerProtocol, value: Sequence[Any], last: Optional[ListDump]
) -> Tuple[List[Tuple[str, bytes]], ListDump]:
    """Each item of ``value`` as ``serde.dumps_typed`` gives it, reusing ``last``'s bytes for
    an item that is the same object at the same position with the same attribute values;
    returns them and the ``ListDump`` to pass next time."""
    out: List[Tuple[str, bytes]] = []
    attrs: List[Optional[Tuple[Any, ...]]] = []
    known = len(last.items) if last is not None else 0
    for i, item in enumerate(value):
        now = _attrs(item)
        attrs.append(now)
        if i < known and last is not None and last.items[i] is item and _unchanged(last.attrs[i], now):
            out.append(last.dumped[i])
        else:
            out.append(serde.dumps_typed(item))
    return out, ListDump(tuple(value), tuple(attrs), tuple(out))
