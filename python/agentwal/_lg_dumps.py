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

from operator import is_
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

from langgraph.checkpoint.base import SerializerProtocol


class ListDump(NamedTuple):
    """A list's items as one ``put`` serialized them: the objects, their attribute values
    then (None: not remembered) and their ``dumps_typed`` pairs."""

    items: Tuple[Any, ...]
    attrs: Tuple[Optional[Tuple[Any, ...]], ...]
    dumped: Tuple[Tuple[str, bytes], ...]


def dump_list(
    serde: SerializerProtocol, value: Sequence[Any], last: Optional[ListDump]
) -> Tuple[List[Tuple[str, bytes]], ListDump]:
    """Each item of ``value`` as ``serde.dumps_typed`` gives it, reusing ``last``'s bytes for
    an item that is the same object at the same position with the same attribute values;
    returns them and the ``ListDump`` to pass next time."""
    items = tuple(value)
    out: List[Tuple[str, bytes]] = []
    attrs: List[Optional[Tuple[Any, ...]]] = []
    known = min(len(last.items), len(items)) if last is not None else 0
    # The loop runs over every item of the list at every put (400 at step 200): its checks
    # are C-level (`map(is_, ...)`), not a generator per item.
    for i, item in enumerate(items):
        d = getattr(item, "__dict__", None)
        if type(d) is not dict:
            attrs.append(None)
            out.append(serde.dumps_typed(item))
            continue
        if i < known and last is not None and last.items[i] is item:
            before = last.attrs[i]
            if before is not None and len(before) == len(d) and all(map(is_, before, d.values())):
                attrs.append(before)
                out.append(last.dumped[i])
                continue
        attrs.append(tuple(d.values()))
        out.append(serde.dumps_typed(item))
    return out, ListDump(items, tuple(attrs), tuple(out))
