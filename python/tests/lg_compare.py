"""Helpers of the differential tests: run one graph script on AgentwalSaver and on
InMemorySaver, and compare everything both savers hand back, with the run-specific ids
renamed.

Checkpoint ids are uuid6 (time-ordered), task ids uuid5 of a checkpoint id, interrupt ids
hashes of a namespace that holds a task id, unnamed messages get uuid4 ids: none of them
repeats between two runs. :class:`Canon` renames every such id to a token given in order
of first appearance, seeded with the checkpoint ids in time order, so two runs compare
equal exactly when their structures match up to a consistent renaming of ids (an id of one
run always stands for the same id of the other).

Versions (``000...07.0.4213``) carry a random suffix: only their counter is compared.
Timestamps (``ts``, ``created_at``) are left out.

One race is LangGraph's, not a saver's: the runtime hands ``put_writes`` (on a background
thread) the live message objects of a task's writes, and ``add_messages`` then gives a
message without an id a uuid4 *in place* while the loop applies those writes. Whether a
pending write holds the id depends on which thread runs first, on InMemorySaver too.
Inside pending writes (and the task results derived from them) an id that looks
auto-assigned (a uuid) is therefore compared as ``None``; ids in channel values are
compared as usual.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Dict, List, Tuple

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Send, StateSnapshot

from agentwal.langgraph import AgentwalSaver

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_HEX32 = re.compile(r"\b[0-9a-f]{32}\b")


class Canon:
    """Renames the ids of one run (see the module's docstring) while converting values
    (messages, snapshots, tasks, interrupts, Sends) to plain comparable data."""

    def __init__(self, checkpoint_ids: List[str]) -> None:
        """Seeds the renaming with ``checkpoint_ids`` (in time order: cp0, cp1, ...)."""
        self.names: Dict[str, str] = {}
        self._in_writes = 0
        for cid in checkpoint_ids:
            self.names.setdefault(cid, f"<cp{len(self.names)}>")

    def _name(self, m: "re.Match[str]") -> str:
        return self.names.setdefault(m.group(), f"<id{len(self.names)}>")

    def __call__(self, x: Any) -> Any:
        """``x`` as plain data, every id in it renamed."""
        if isinstance(x, str):
            return _HEX32.sub(self._name, _UUID.sub(self._name, x))
        if x is None or isinstance(x, (bool, int, float, bytes)):
            return x
        if isinstance(x, BaseMessage):
            d = x.model_dump()
            if self._in_writes and isinstance(d.get("id"), str) and _UUID.fullmatch(d["id"]):
                d["id"] = None  # see the module's docstring
            return ("message", type(x).__name__, self(d))
        if isinstance(x, StateSnapshot):
            return ("snapshot", {f: self(getattr(x, f)) for f in x._fields if f != "created_at"})
        if isinstance(x, tuple) and hasattr(x, "_fields"):  # PregelTask and other named tuples
            return (type(x).__name__, {f: self._field(f, getattr(x, f)) for f in x._fields})
        if isinstance(x, dict):
            return {self(k): self._field(k, v) for k, v in x.items()}
        if isinstance(x, list):
            return [self(v) for v in x]
        if isinstance(x, tuple):
            return tuple(self(v) for v in x)
        if isinstance(x, Send):
            return ("Send", self(x.node), self(x.arg))
        if dataclasses.is_dataclass(x):  # Interrupt, Command
            return (
                type(x).__name__,
                {f.name: self(getattr(x, f.name)) for f in dataclasses.fields(x)},
            )
        raise TypeError(f"no canonical form for {type(x).__name__}: {x!r}")


    def _field(self, key: Any, value: Any) -> Any:
        if key not in ("pending_writes", "result"):
            return self(value)
        self._in_writes += 1
        try:
            return self(value)
        finally:
            self._in_writes -= 1


def _counter(version: Any) -> int:
    return int(str(version).split(".")[0])


def saver_tuples(saver: Any, thread_id: str) -> List[Any]:
    """Every checkpoint tuple of ``thread_id`` (all namespaces), oldest first (by id),
    as raw data: config, parent, metadata, channel values, version counters, writes."""
    tuples = sorted(
        saver.list({"configurable": {"thread_id": thread_id}}),
        key=lambda t: t.checkpoint["id"],
    )
    out = []
    for t in tuples:
        cp = t.checkpoint
        out.append(
            {
                "config": t.config,
                "parent_config": t.parent_config,
                "metadata": t.metadata,
                "id": cp["id"],
                "v": cp.get("v"),
                "channel_values": cp["channel_values"],
                "channel_versions": {k: _counter(v) for k, v in cp["channel_versions"].items()},
                "versions_seen": {
                    node: {k: _counter(v) for k, v in seen.items()}
                    for node, seen in cp["versions_seen"].items()
                },
                "updated_channels": cp.get("updated_channels"),
                "pending_writes": t.pending_writes,
            }
        )
    return out


def graph_view(app: Any, thread_id: str, namespaces: List[str]) -> Dict[str, Any]:
    """What the graph API shows of the thread: ``get_state(subgraphs=True)`` now and at
    each root checkpoint, and ``get_state_history`` of the root and of every namespace."""
    root = {"configurable": {"thread_id": thread_id}}
    history = list(app.get_state_history(root))
    view: Dict[str, Any] = {
        "state": app.get_state(root, subgraphs=True),
        "history": history,
        "states_at": [app.get_state(s.config, subgraphs=True) for s in history],
    }
    for ns in namespaces:
        if ns:
            cfg = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
            view[f"history of {ns}"] = list(app.get_state_history(cfg))
    return view


Script = Callable[[Callable[[], Any], Callable[[], Any]], List[Any]]


def run_both(tmp_path: Any, build: Callable[[Any], Any], script: Script,
             thread_id: str = "t") -> Tuple[Any, Any, int]:
    """Runs ``script`` on AgentwalSaver (a store in ``tmp_path``) and on InMemorySaver and
    returns both runs' canonical data and the number of checkpoints compared.

    ``build(checkpointer)`` compiles the graph. ``script(app, reopen)`` drives it and
    returns what it wants compared (outputs of invoke, streamed chunks); ``app()`` is the
    current compiled graph; ``reopen()`` closes the agentwal saver and its store and
    opens a new AgentwalSaver on the same directory (a no-op for InMemorySaver)."""
    results = []
    for kind in ("agentwal", "memory"):
        holder: Dict[str, Any] = {}

        def open_saver() -> None:
            if kind == "memory":
                holder.setdefault("saver", InMemorySaver())
            else:
                if "saver" in holder:
                    holder["saver"].close()
                holder["saver"] = AgentwalSaver(tmp_path / "store")
            holder["app"] = build(holder["saver"])

        open_saver()
        app = lambda: holder["app"]  # noqa: E731
        reopen = open_saver if kind == "agentwal" else (lambda: None)
        outputs = script(app, reopen)
        tuples = saver_tuples(holder["saver"], thread_id)
        # In order of their first checkpoint (the names hold random task ids).
        namespaces = list(dict.fromkeys(t["config"]["configurable"]["checkpoint_ns"]
                                        for t in tuples))
        view = graph_view(holder["app"], thread_id, namespaces)
        canon = Canon([t["id"] for t in tuples])
        results.append(canon({"outputs": outputs, "tuples": tuples, "view": view}))
        if kind == "agentwal":
            holder["saver"].close()
    ours, theirs = results
    return ours, theirs, len(ours["tuples"])


def assert_same(ours: Any, theirs: Any, path: str = "") -> None:
    """Asserts ``ours == theirs``, naming the first path where they differ."""
    if type(ours) is not type(theirs):
        raise AssertionError(f"at {path or '<top>'}: {ours!r} != {theirs!r}")
    if isinstance(ours, dict):
        if list(ours) != list(theirs):
            raise AssertionError(f"at {path}: keys {list(ours)} != {list(theirs)}")
        for k in ours:
            assert_same(ours[k], theirs[k], f"{path}/{k}")
    elif isinstance(ours, (list, tuple)):
        if len(ours) != len(theirs):
            raise AssertionError(f"at {path}: length {len(ours)} != {len(theirs)}")
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, f"{path}[{i}]")
    elif ours != theirs:
        raise AssertionError(f"at {path}: {ours!r} != {theirs!r}")
