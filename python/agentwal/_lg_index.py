"""The LangGraph saver's view of one agentwal task: its variables as stored, parsed lazily.

A task's state holds every checkpoint (``cp:<id>``), blob (``b:<json [channel, version]>``)
and pending write (``w:<json [checkpoint_id, task_id, idx]>``) of a thread namespace, so it
grows with the thread's history. Reading the latest checkpoint needs only its own entry,
the blobs of its channel versions (with the bases of its lists) and its writes: this index
keeps the state the store returned in the engine (an ``agentwal.StateView``) and converts
and parses an entry only when it is asked for, so a fresh saver's ``get_tuple`` costs
O(the latest checkpoint) in Python, not O(history). Prefix queries (the checkpoint ids, one
checkpoint's writes) go to the engine's sorted keys while the index holds the loaded state
as it is; once the saver commits on top of it, to the keys sorted once, on first use (the
store returns them sorted, so that sort is linear), and kept sorted.
"""

from __future__ import annotations

import json
from bisect import bisect_left, insort
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from ._lg_dumps import ListDump

_CP = "cp:"
_BLOB = "b:"
_WRITE = "w:"
# A list channel's blob in the prefix form: [_LIST, base version or None, [[type, bytes]...]]:
# the items of the blob (channel, base) followed by these items (each serialized alone).
_LIST = "agentwal.list"

# A parsed blob: (type, bytes), or (_LIST, base version or None, items).
Blob = Tuple[Any, ...]
# A parsed write: (task_id, channel, (type, bytes), task_path).
Write = Tuple[str, str, Tuple[str, bytes], str]


@dataclass
class Entry:
    """A stored checkpoint: serialized checkpoint (no values), metadata, parent id."""

    checkpoint: Tuple[str, bytes]
    metadata: Tuple[str, bytes]
    parent: Optional[str]


def blob_key(channel: str, version: Any) -> str:
    """The variable holding the blob ``(channel, version)`` (as ``put`` names it)."""
    return _BLOB + json.dumps([channel, version])


def write_key(cid: str, task_id: str, idx: int) -> str:
    """The variable holding write ``idx`` of ``task_id`` at checkpoint ``cid``."""
    return _WRITE + json.dumps([cid, task_id, idx])


def _writes_prefix(cid: str) -> str:
    # json.dumps of a list writes "[" + item + ", " + ...: every write key of checkpoint
    # `cid` starts with this, and no key of another checkpoint does (the id's closing
    # quote is part of it).
    return _WRITE + "[" + json.dumps(cid) + ", "


def _after(prefix: str) -> str:
    """The least string greater than every string starting with ``prefix``."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


class TaskIndex:
    """What the saver knows of one task, as of its checkpoint ``seq``, committed at
    ``created_at_ms`` (None: the saver's own commit, whose time the store did not return)."""

    def __init__(
        self, seq: int = 0, created_at_ms: Optional[int] = None, view: Any = None
    ) -> None:
        self.seq = seq
        self.created_at_ms = created_at_ms
        # The variables: those of the state the store returned (a StateView: converted to
        # Python one at a time, when asked for), with the saver's own commits on top.
        self._view = view
        self._set: Dict[str, Any] = {}
        self._gone: Set[str] = set()
        self._sorted: Optional[List[str]] = None  # sorted keys, built on first prefix query
        self._cps: Dict[str, Entry] = {}
        self._blobs: Dict[Tuple[str, Any], Blob] = {}
        self._writes: Dict[str, Dict[Tuple[str, int], Write]] = {}
        # channel -> the list items the saver's last put serialized (_lg_dumps): a cache of
        # serialization only, never of what the store holds.
        self.dumps: Dict[str, ListDump] = {}
        # channel -> (version, items): the last list resolved (the next put extends it).
        self.resolved: Dict[str, Tuple[Any, Tuple[Tuple[str, bytes], ...]]] = {}

    def loaded_view(self) -> Any:
        """The state the store returned (an ``agentwal.StateView``) that the variables start
        from, before the saver's own commits on top; None if there is none."""
        return self._view

    def _get(self, key: str) -> Any:
        """Variable ``key`` (None if absent)."""
        value = self._set.get(key)
        if value is None and self._view is not None and key not in self._gone:
            value = self._view.var(key)
        return value

    def _has(self, key: str) -> bool:
        if key in self._set:
            return True
        return self._view is not None and key not in self._gone and key in self._view

    # -- prefix queries ----------------------------------------------------------------

    def _keys(self) -> List[str]:
        if self._sorted is None:
            keys = self._view.var_keys() if self._view is not None else []
            keys = [k for k in keys if k not in self._gone] if self._gone else keys
            self._sorted = sorted(set(keys).union(self._set)) if self._set else keys
        return self._sorted

    def _as_loaded(self) -> bool:
        """Whether the variables are still the loaded state's, with no commit on top: the
        engine then answers prefix queries from its own sorted keys."""
        return self._sorted is None and not self._set and not self._gone and self._view is not None

    def _range(self, prefix: str) -> List[str]:
        if self._as_loaded():
            # A range costs its own length, not a copy of every key: a fresh read of a
            # long thread asks for one checkpoint's writes, not the thread's 2,000 keys.
            return self._view.var_keys(prefix)
        keys = self._keys()
        return keys[bisect_left(keys, prefix) : bisect_left(keys, _after(prefix))]

    def cids(self) -> List[str]:
        """The ids of the stored checkpoints, in increasing order."""
        return [k[len(_CP) :] for k in self._range(_CP)]

    def latest(self) -> Optional[str]:
        """The largest checkpoint id (the namespace's newest checkpoint), None if none."""
        if self._as_loaded():
            key = self._view.last_key(_CP)  # one lookup in the engine's sorted keys
        else:
            keys = self._keys()
            i = bisect_left(keys, _after(_CP))
            key = keys[i - 1] if i and keys[i - 1].startswith(_CP) else None
        return key[len(_CP) :] if key is not None else None

    # -- entries, parsed on demand -----------------------------------------------------

    def cp(self, cid: Optional[str]) -> Optional[Entry]:
        """Checkpoint ``cid``, None if it is not stored."""
        if cid is None:
            return None
        entry = self._cps.get(cid)
        if entry is None:
            value = self._get(_CP + cid)
            if value is None:
                return None
            c, m, parent = value
            entry = self._cps[cid] = Entry((c[0], c[1]), (m[0], m[1]), parent)
        return entry

    def blob(self, channel: str, version: Any) -> Optional[Blob]:
        """The blob ``(channel, version)``, None if it is not stored."""
        blob = self._blobs.get((channel, version))
        if blob is None:
            value = self._get(blob_key(channel, version))
            if value is None:
                return None
            if value[0] == _LIST:
                blob = (_LIST, value[1], tuple((t, b) for t, b in value[2]))
            else:
                blob = (value[0], value[1])
            self._blobs[(channel, version)] = blob
        return blob

    def blob_ids(self) -> List[Tuple[str, Any]]:
        """Every stored blob's ``(channel, version)``."""
        keys = self._range(_BLOB)
        return [tuple(k) for k in json.loads("[" + ",".join(k[len(_BLOB) :] for k in keys) + "]")]

    def writes(self, cid: str) -> Dict[Tuple[str, int], Write]:
        """The writes stored at checkpoint ``cid``, by ``(task_id, idx)`` (do not modify)."""
        out = self._writes.get(cid)
        if out is None:
            keys = self._range(_writes_prefix(cid))
            ids = json.loads("[" + ",".join(k[len(_WRITE) :] for k in keys) + "]")
            out = {}
            for key, (_, task_id, idx) in zip(keys, ids):
                wtask, channel, typ, data, path = self._get(key)
                out[(task_id, idx)] = (wtask, channel, (typ, data), path)
            self._writes[cid] = out
        return out

    def has_write(self, cid: str, task_id: str, idx: int) -> bool:
        """Whether write ``idx`` of ``task_id`` at checkpoint ``cid`` is stored: one lookup,
        where :meth:`writes` parses every write of the checkpoint."""
        return self._has(write_key(cid, task_id, idx))

    def items(self, channel: str, version: Any) -> Optional[Tuple[Tuple[str, bytes], ...]]:
        """The serialized items of a list blob in the prefix form (following its bases);
        None if the blob is absent or not in that form."""
        last = self.resolved.get(channel)
        if last is not None and last[0] == version:
            return last[1]
        if last is None and self._as_loaded():
            # The whole chain in the engine: a lookup per base, no blob converted whole.
            resolved = self._view.list_items(channel, version, _LIST)
            if resolved is not None:
                self.resolved[channel] = (version, resolved)
                return resolved
        chain = []
        seen = set()
        v: Any = version
        while v is not None:
            if v in seen:
                raise ValueError(f"channel {channel!r}: the bases of version {version!r} loop")
            seen.add(v)
            last = self.resolved.get(channel)
            if last is not None and last[0] == v:
                chain.append(last[1])
                break
            blob = self.blob(channel, v)
            if blob is None or blob[0] != _LIST:
                return None  # a broken chain (a pruned base) or a plain blob
            chain.append(blob[2])
            v = blob[1]
        out: Tuple[Tuple[str, bytes], ...] = tuple(i for part in reversed(chain) for i in part)
        self.resolved[channel] = (version, out)
        return out

    def bases(self, channel: str, version: Any) -> List[Tuple[str, Any]]:
        """The blob ids ``(channel, version)`` needs: itself and its chain of bases."""
        out = []
        v: Any = version
        seen = set()
        while v is not None and v not in seen:
            blob = self.blob(channel, v)
            if blob is None:
                break
            seen.add(v)
            out.append((channel, v))
            v = blob[1] if blob[0] == _LIST else None
        return out

    # -- changes -----------------------------------------------------------------------

    def _forget(self, key: str) -> None:
        """Drops what was parsed from variable ``key`` (set or unset)."""
        if key.startswith(_CP):
            self._cps.pop(key[len(_CP) :], None)
        elif key.startswith(_BLOB):
            self._blobs.pop(tuple(json.loads(key[len(_BLOB) :])), None)
        elif key.startswith(_WRITE):
            self._writes.pop(json.loads(key[len(_WRITE) :])[0], None)

    def apply(self, sets: Dict[str, Any]) -> None:
        """Takes in the variables a commit set."""
        for key, value in sets.items():
            existed = self._has(key)
            if not existed and self._sorted is not None:
                insort(self._sorted, key)
            if existed and key.startswith(_BLOB):  # overwritten: a memo may be stale
                self.resolved.clear()
            self._set[key] = value
            self._gone.discard(key)
            if existed or not key.startswith(_BLOB):
                self._forget(key)

    def remove(self, keys: Iterable[str]) -> None:
        """Forgets the variables a commit unset."""
        for key in keys:
            if not self._has(key):
                continue
            self._set.pop(key, None)
            if self._view is not None:
                self._gone.add(key)
            if self._sorted is not None:
                i = bisect_left(self._sorted, key)
                assert self._sorted[i] == key, key
                del self._sorted[i]
            if key.startswith(_BLOB):
                self.resolved.clear()
            self._forget(key)
