"""How the LangGraph saver turns a task's index into LangGraph's values and back.

Reads: a checkpoint tuple with its channel values (a list channel's blob joined with the
bases of the prefix rule) and its pending writes in ``writes_sort_key`` order, and the
delta channel history walked along the parent chain. Writes: the prefix rule, which
stores only the items a list appended to its parent's version, and the delta that
removes checkpoints with their writes. Every function takes the saver's ``serde``; none
reads the store: the caller holds the task's lock and an index validated against it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    CheckpointMetadata,
    CheckpointTuple,
    SerializerProtocol,
    writes_sort_key,
)

from ._lg_index import _CP, _LIST, TaskIndex, blob_key, write_key


def checkpoint_tuple(
    serde: SerializerProtocol,
    idx: TaskIndex,
    thread_id: str,
    ns: str,
    cid: str,
    metadata: Optional[CheckpointMetadata] = None,
    config: Optional[RunnableConfig] = None,
) -> CheckpointTuple:
    """Checkpoint ``cid`` of ``idx`` with its channel values, pending writes and parent."""
    entry = idx.cp(cid)
    assert entry is not None, cid
    checkpoint = serde.loads_typed(entry.checkpoint)
    values: Dict[str, Any] = {}
    for channel, version in checkpoint["channel_versions"].items():
        found, value = channel_value(serde, idx, channel, version)
        if found:
            values[channel] = value
    return CheckpointTuple(
        config=config
        or {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}},
        checkpoint={**checkpoint, "channel_values": values},
        metadata=metadata if metadata is not None else serde.loads_typed(entry.metadata),
        parent_config=(
            {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": entry.parent,
                }
            }
            if entry.parent
            else None
        ),
        pending_writes=pending_writes(serde, idx, cid),
    )


def channel_value(
    serde: SerializerProtocol, idx: TaskIndex, channel: str, version: Any
) -> Tuple[bool, Any]:
    """``(True, value)`` of the blob ``(channel, version)``; ``(False, None)`` if there is
    none or it is empty."""
    blob = idx.blob(channel, version)
    if blob is None or blob[0] == "empty":
        return False, None
    if blob[0] != _LIST:
        return True, serde.loads_typed(blob)
    items = idx.items(channel, version)
    if items is None:
        raise ValueError(f"channel {channel!r} version {version!r}: a base of its list is missing")
    return True, [serde.loads_typed(i) for i in items]


def pending_writes(
    serde: SerializerProtocol, idx: TaskIndex, cid: str
) -> List[Tuple[str, str, Any]]:
    """The writes stored at checkpoint ``cid``, as ``(task_id, channel, value)``, in
    ``writes_sort_key`` order."""
    writes = idx.writes(cid)
    return [
        (w[0], w[1], serde.loads_typed(w[2]))
        for _, w in sorted(writes.items(), key=lambda kv: writes_sort_key(kv[1][3], *kv[0]))
    ]


def parent_versions(
    serde: SerializerProtocol, idx: TaskIndex, parent: Optional[str]
) -> Dict[str, Any]:
    """The channel versions of checkpoint ``parent`` as ``idx`` holds it ({} if absent)."""
    entry = idx.cp(parent) if parent else None
    if entry is None:
        return {}
    return serde.loads_typed(entry.checkpoint).get("channel_versions", {})


def list_prefix(
    idx: TaskIndex,
    channel: str,
    version: Any,
    parents: Dict[str, Any],
    items: List[Tuple[str, bytes]],
) -> Tuple[Any, List[Tuple[str, bytes]]]:
    """The prefix rule: the parent's version of this list (``parents``: the parent's
    channel versions), if its items are a byte prefix of ``items``, is the base, and only
    the items after it are stored. Returns ``(base or None, items to store)``."""
    pv = parents.get(channel)
    if (
        pv is not None
        and pv != version
        # Overwriting a version (never done by LangGraph) must not close a loop.
        and (idx.blob(channel, version) is None or (channel, version) not in idx.bases(channel, pv))
    ):
        prev = idx.items(channel, pv)
        if prev is not None and len(prev) <= len(items) and prev == tuple(items[: len(prev)]):
            return pv, items[len(prev) :]
    return None, items


def unset_delta(
    idx: TaskIndex, cids: List[str], blobs: Sequence[Tuple[str, Any]] = ()
) -> Optional[Dict[str, Any]]:
    """The delta removing checkpoints ``cids`` with their writes, and ``blobs``; None if it
    would remove nothing."""
    keys = [_CP + cid for cid in cids]
    for cid in cids:
        keys += [write_key(cid, t, i) for (t, i) in idx.writes(cid)]
    keys += [blob_key(ch, v) for ch, v in blobs]
    return {"unset": keys} if keys else None


def delta_channel_history(
    serde: SerializerProtocol, idx: TaskIndex, cid: Optional[str], channels: Sequence[str]
) -> Dict[str, Dict[str, Any]]:
    """For each of ``channels``: the writes to it along the parent chain of checkpoint
    ``cid``, oldest first, back to the nearest ancestor that stores a value of it, returned
    as ``seed`` (absent if the walk reaches the root or a pruned checkpoint first). The
    ancestors are walked once for all channels; a seed ancestor's own writes are included
    (they made its child)."""
    collected: Dict[str, List[Tuple[str, str, Any]]] = {c: [] for c in channels}
    seeds: Dict[str, Any] = {}
    remaining = set(channels)
    target = idx.cp(cid) if cid else None
    current = target.parent if target is not None else None
    seen = set()
    while current is not None and remaining and current not in seen:
        seen.add(current)
        entry = idx.cp(current)
        if entry is None:  # pruned or never stored: the chain ends here
            break
        versions = serde.loads_typed(entry.checkpoint).get("channel_versions", {})
        here = {}
        for ch in remaining:
            if ch in versions:
                found, value = channel_value(serde, idx, ch, versions[ch])
                if found:
                    here[ch] = value
        for write in reversed(pending_writes(serde, idx, current)):
            if write[1] in remaining:
                collected[write[1]].append(write)
        for ch, value in here.items():
            seeds[ch] = value
            remaining.discard(ch)
        current = entry.parent
    out: Dict[str, Dict[str, Any]] = {}
    for ch in channels:
        out[ch] = {"writes": list(reversed(collected[ch]))}
        if ch in seeds:
            out[ch]["seed"] = seeds[ch]
    return out
