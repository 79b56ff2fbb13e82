"""A LangGraph checkpointer over an agentwal store: :class:`AgentwalSaver`.

Needs ``langgraph-checkpoint`` (4.x), which this module imports; ``agentwal`` itself does not.
The store is a local :class:`agentwal.Store` or a PostgreSQL :class:`agentwal.PgStore`; the
mapping below is the same on both.

Storage mapping (docs/store.md §11):

- one agentwal task per ``(thread_id, checkpoint_ns)``, named
  ``lg:<quote(thread_id)>:<quote(checkpoint_ns)>`` (percent-encoding, so ``:`` never appears
  inside a part and the name decodes back);
- every ``put`` is one commit whose ``set`` holds ``cp:<checkpoint_id>`` (the checkpoint
  without its channel values, its metadata and its parent id, serialized by ``self.serde``)
  and one ``b:<json [channel, version]>`` blob per channel in ``new_versions`` (only those:
  unchanged channels are never rewritten); a ``list`` value whose parent version's items
  are a byte prefix of its items stores only the appended items (the prefix rule);
- every ``put_writes`` is one commit whose ``set`` holds ``w:<json [checkpoint_id, task_id,
  idx]>`` per new write.

Values are stored as ``[type_str, bytes]`` pairs from ``serde.dumps_typed``: opaque to
agentwal. The saver keeps an index of each task's variables in memory once it has read the
task (the same memory InMemorySaver uses), as a hint checked against the store: a read
uses it while the task's latest checkpoint is the one it was read at, and every write is
``commit_if`` on its seq, recomputed from a fresh read after a conflict. So savers in many
processes and hosts can take a thread's turns one after another, on one store.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from typing import Any, Dict, List, Optional, Tuple, Union

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        SerializerProtocol,
        get_checkpoint_id,
        get_checkpoint_metadata,
    )
except ImportError as e:  # pragma: no cover - exercised only without langgraph
    raise ImportError(
        "agentwal.langgraph needs langgraph-checkpoint 4.x: pip install 'langgraph-checkpoint>=4,<5'"
    ) from e

from ._agentwal import PgStore, Store
from ._errors import ConflictError, UnknownTaskError
from ._lg_async import AsyncTwins
from ._lg_dumps import ListDump, dump_list
from ._lg_index import _CP, _LIST, TaskIndex as _TaskIndex, blob_key, write_key
from ._lg_names import (
    check_thread_id,
    ns_of,
    parse_task_name,
    task_name,
    thread_id_of,
    thread_prefix,
)
from ._lg_values import (
    checkpoint_tuple,
    delta_channel_history,
    list_prefix,
    parent_versions,
    unset_delta,
)

__all__ = ["AgentwalSaver"]

# Locks striped over task names: operations on one task are serialized, those on different
# tasks (mostly) run concurrently, so that their commits share fsyncs.
_STRIPES = 512
# A `store` argument starting with one of these is a PostgreSQL URL, not a directory.
_PG_SCHEMES = ("postgres://", "postgresql://")
# How many times a write recomputes its commit after a conflict (another writer committed
# to the task first) before it gives up with the ConflictError. Workers that take a
# thread's turns one after another never conflict; only writers of one thread at the same
# moment do, and each retry follows someone else's successful commit.
_CONFLICT_RETRIES = 64


class AgentwalSaver(AsyncTwins, BaseCheckpointSaver[str]):
    """A LangGraph checkpoint saver that stores checkpoints in an agentwal store.

    ``store`` is an open :class:`agentwal.Store` or :class:`agentwal.PgStore` (the saver uses
    it, the caller closes it), a ``postgres://`` / ``postgresql://`` URL (the saver opens a
    :class:`agentwal.PgStore` with ``open_kwargs``, e.g. ``schema="lg"``) or a directory path
    (the saver opens a :class:`agentwal.Store` with ``open_kwargs``, e.g. ``sync="always"``);
    :meth:`close` closes a store the saver opened. It works the same on both backends. The
    saver's tasks are named ``lg:...``; other tasks of the same store are ignored. Any number
    of savers may serve the same threads: several on one :class:`agentwal.Store`, or worker
    processes on many hosts on one PostgreSQL schema, taking a thread's turns in any order.
    What a saver caches of a thread is checked against the store before every read (the
    latest checkpoint's seq and time, one ``latest_info``), and every write is conditional
    on the seq it was computed from (``commit_if``): a saver that is behind reads the thread
    again and recomputes its write, so no turn is lost and no history forks. (Not detected:
    a thread deleted and written again up to the same seq, between a saver's own commit and
    its next read, by another saver.)

    Durability is the store's: with ``sync="always"`` (the default) a checkpoint or write is
    on disk when ``put``/``put_writes`` return. The async methods run the sync ones in a
    worker thread (``asyncio.to_thread``) so that an fsync never blocks the event loop; the
    store releases the GIL while it writes. The saver's operations on one thread and namespace
    are serialized (a lock per task, striped); those on different threads run concurrently,
    so their commits share fsyncs (group commit).
    """

    def __init__(
        self,
        store: Union[Store, PgStore, str, "os.PathLike[str]"],
        *,
        serde: Optional[SerializerProtocol] = None,
        **open_kwargs: Any,
    ) -> None:
        """Uses ``store`` (a :class:`agentwal.Store` or :class:`agentwal.PgStore`), or opens
        the PostgreSQL store at the URL ``store`` or the local store at the path ``store``."""
        super().__init__(serde=serde)
        self.store: Union[Store, PgStore]
        if isinstance(store, (Store, PgStore)):
            if open_kwargs:
                raise TypeError(
                    f"open options {sorted(open_kwargs)} given with an already open Store"
                )
            self.store = store
            self._owns_store = False
        elif isinstance(store, str) and store.startswith(_PG_SCHEMES):
            self.store = PgStore.open(store, **open_kwargs)
            self._owns_store = True
        elif isinstance(store, (str, os.PathLike)):
            self.store = Store.open(store, **open_kwargs)
            self._owns_store = True
        else:
            raise TypeError(
                "store must be an agentwal.Store, an agentwal.PgStore, a postgresql:// URL or "
                f"a path, got {type(store).__name__}"
            )
        # Made on first use (a saver opened per request takes a few, not 512).
        self._locks: Dict[int, Any] = {}
        self._index: Dict[str, _TaskIndex] = {}

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Closes the store if the saver opened it (a no-op for a store passed in)."""
        with self._locked(None):
            self._index.clear()
            if self._owns_store:
                self.store.close()

    def __enter__(self) -> "AgentwalSaver":
        """Returns the saver."""
        return self

    def __exit__(self, *exc: Any) -> None:
        """Closes the saver (see :meth:`close`)."""
        self.close()

    # -- internals ---------------------------------------------------------------------

    def _locked(self, tasks: Optional[Iterable[str]]) -> ExitStack:
        """Holds the locks of ``tasks`` (all of them if None) until the block ends. The public
        methods take their tasks' locks once, up front, in stripe order (no deadlock); the
        helpers below take none."""
        if tasks is None:
            stripes: Iterable[int] = range(_STRIPES)
        else:
            stripes = sorted({hash(t) % _STRIPES for t in tasks})
        stack = ExitStack()
        try:
            for i in stripes:
                stack.enter_context(self._stripe(i))
        except BaseException:  # e.g. KeyboardInterrupt while waiting: release what was taken
            stack.close()
            raise
        return stack

    def _stripe(self, i: int) -> Any:
        """The lock of stripe ``i``, made on first use: ``dict.setdefault`` is atomic, so
        threads that race to make it all get the one that was kept."""
        lock = self._locks.get(i)
        return lock if lock is not None else self._locks.setdefault(i, threading.RLock())

    def _task(self, task: str, *, fresh: bool = True) -> _TaskIndex:
        """The index of ``task``. The cache is a hint, never the truth: other savers,
        processes and hosts commit to the same store. With ``fresh`` (every read) a cached
        index is used only while the store's latest checkpoint is the one it was read at
        (``latest_info``: a lookup in memory locally, one query on PostgreSQL), else the
        index is brought up to date (``_catch_up``) or the task read again. Without it
        (writes) the cached index is used as it is: the write is conditional on its seq
        (``commit_if``), so a stale index gets a conflict and the write is recomputed from
        a fresh one, never applied."""
        idx = self._index.get(task)
        if idx is not None:
            if not fresh:
                return idx
            info = self.store.latest_info(task)
            # created_at_ms tells a task deleted and committed to again up to the same seq
            # from the one cached; after the saver's own commit it is learnt here.
            if info is not None and info.seq == idx.seq and idx.created_at_ms in (
                None,
                info.created_at_ms,
            ):
                idx.created_at_ms = info.created_at_ms
                return idx
            if info is not None:
                caught_up = self._catch_up(task, idx)
                if caught_up is not None:
                    return caught_up
        return self._load(task)

    def _catch_up(self, task: str, idx: _TaskIndex) -> Optional[_TaskIndex]:
        """On PostgreSQL, the index of ``task`` built from the state ``idx`` was loaded from
        and the deltas committed after it, the saver's own included (one round trip that
        reads only those: a worker whose thread another worker moved on does not read the
        thread's whole history again); None if the store cannot build it that way."""
        catch_up = getattr(self.store, "catch_up_view", None)  # PgStore's, not Store's
        base = idx.loaded_view()
        if base is None or catch_up is None:
            return None
        view = catch_up(base)
        if view is None:
            return None
        new = _TaskIndex(view.seq, view.created_at_ms, view)
        new.dumps = idx.dumps  # a cache of serialization only (_lg_dumps), not of the store
        self._index[task] = new
        return new

    def _load(self, task: str) -> _TaskIndex:
        """Reads ``task``'s latest state from the store into a new index (cached unless the
        task has no checkpoint: looking up unknown threads must not grow memory)."""
        self._index.pop(task, None)
        view = self.store.load_latest_view(task)
        if view is None:
            return _TaskIndex()
        # Converted and parsed lazily: a read of the latest checkpoint touches only what it
        # needs, not the thread's history.
        idx = _TaskIndex(view.seq, view.created_at_ms, view)
        self._index[task] = idx
        return idx

    def _commit(self, task: str, build: Callable[[_TaskIndex], Optional[Dict[str, Any]]]) -> None:
        """Commits ``build(index)`` (a delta with ``set`` and/or ``unset``; None: nothing to
        commit) on the condition that the task is still at the index's seq. On a conflict
        (someone else committed first) the index is brought up to date (``_catch_up``) or
        the task read again, and the delta built again from what it now holds, so a stale
        view is never extended."""
        for attempt in range(_CONFLICT_RETRIES):
            idx = self._task(task, fresh=False)
            delta = build(idx)
            if delta is None:
                return
            try:
                seq = self.store.commit_if(task, idx.seq, delta)
            except ConflictError:
                if attempt + 1 == _CONFLICT_RETRIES:
                    self._index.pop(task, None)
                    raise
                if self._catch_up(task, idx) is None:
                    self._index.pop(task, None)  # the next attempt loads the task
                continue
            assert seq == idx.seq + 1, (task, seq, idx.seq)
            idx.apply(delta.get("set", {}))
            idx.remove(delta.get("unset", ()))
            idx.seq = seq
            idx.created_at_ms = None
            self._index[task] = idx
            return

    def _saver_tasks(self, thread_id: Optional[str] = None) -> List[Tuple[str, str, str]]:
        """``(task, thread_id, ns)`` of every saver task, or of ``thread_id``'s: a range of
        the store's task ids (on PostgreSQL a range of the key, not every task)."""
        out = []
        for name in self.store.tasks_with_prefix(thread_prefix(thread_id)):
            parsed = parse_task_name(name)
            if parsed is not None and thread_id in (None, parsed[0]):
                out.append((name, parsed[0], parsed[1]))
        return out

    # -- the saver interface -----------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        """The checkpoint of ``config`` (its ``checkpoint_id``, else the namespace's newest,
        i.e. the largest id), with its channel values and pending writes; None if absent."""
        thread_id = thread_id_of(config)
        ns = ns_of(config)
        task = task_name(thread_id, ns)
        with self._locked([task]):
            idx = self._task(task)
            cid = get_checkpoint_id(config)
            if cid:
                if idx.cp(cid) is None:
                    return None
                return checkpoint_tuple(self.serde, idx, thread_id, ns, cid, config=config)
            latest = idx.latest()
            if latest is None:
                return None
            return checkpoint_tuple(self.serde, idx, thread_id, ns, latest)

    def list(
        self,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[Dict[str, Any]] = None,
        before: Optional[RunnableConfig] = None,
        limit: Optional[int] = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id): of ``config``'s thread (all threads if
        None), of its ``checkpoint_ns`` (all namespaces if absent), only ``checkpoint_id`` if
        given; ids strictly below ``before``'s; metadata equal to ``filter`` on each of its
        keys; at most ``limit``. The result is computed when iteration starts."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise TypeError(f"limit must be an int or None, got {type(limit).__name__}")
        if filter is not None and not isinstance(filter, dict):
            raise TypeError(f"filter must be a dict or None, got {type(filter).__name__}")
        return iter(self._list(config, filter=filter, before=before, limit=limit))

    def _list(
        self,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[Dict[str, Any]],
        before: Optional[RunnableConfig],
        limit: Optional[int],
    ) -> List[CheckpointTuple]:
        before_id = get_checkpoint_id(before) if before else None
        if config is None:
            tasks = self._saver_tasks()
            want_id = None
        else:
            thread_id = thread_id_of(config)
            want_id = get_checkpoint_id(config)
            if config["configurable"].get("checkpoint_ns") is not None:
                ns = ns_of(config)
                tasks = [(task_name(thread_id, ns), thread_id, ns)]
            else:
                tasks = self._saver_tasks(thread_id)
        with self._locked(t[0] for t in tasks):
            candidates = []
            for task, thread_id, ns in tasks:
                idx = self._task(task)
                for cid in idx.cids():
                    if want_id and cid != want_id:
                        continue
                    if before_id and cid >= before_id:
                        continue
                    candidates.append((cid, thread_id, ns, idx))
            candidates.sort(key=lambda c: (c[0], c[1], c[2]), reverse=True)
            out: List[CheckpointTuple] = []
            for cid, thread_id, ns, idx in candidates:
                if limit is not None and len(out) >= limit:
                    break
                metadata = self.serde.loads_typed(idx.cp(cid).metadata)
                if filter and not all(metadata.get(k) == v for k, v in filter.items()):
                    continue
                out.append(checkpoint_tuple(self.serde, idx, thread_id, ns, cid, metadata=metadata))
            return out

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Dict[str, Dict[str, Any]]:
        """For each of ``channels`` (DeltaChannel support, beta in LangGraph): the writes to
        it along the parent chain of ``config``'s checkpoint (its newest if no id), oldest
        first, back to the nearest ancestor that stores a value of it, returned as ``seed``
        (absent if the walk reaches the root first). The ancestors are walked once for all
        channels, in the saver's index (validated against the store first), with no read
        per ancestor; a seed ancestor's own writes are included (they made its child)."""
        if isinstance(channels, str):
            raise TypeError("channels must be a sequence of channel names, not one str")
        if not channels:
            return {}
        thread_id = thread_id_of(config)
        task = task_name(thread_id, ns_of(config))
        with self._locked([task]):
            idx = self._task(task)
            cid = get_checkpoint_id(config) or idx.latest()
            return delta_channel_history(self.serde, idx, cid, channels)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Stores ``checkpoint`` (child of ``config``'s ``checkpoint_id``) in one commit, with
        a blob for each channel of ``new_versions`` only; returns the checkpoint's config."""
        thread_id = thread_id_of(config)
        ns = ns_of(config)
        if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("id"), str):
            raise ValueError("checkpoint must be a dict with a str 'id'")
        cid = checkpoint["id"]
        c = dict(checkpoint)
        values: Dict[str, Any] = c.pop("channel_values", None) or {}
        parent = config["configurable"].get("checkpoint_id")
        ct, cb = self.serde.dumps_typed(c)
        mt, mb = self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))
        task = task_name(thread_id, ns)
        # Serialized once: a retry after a conflict only recomputes the prefix rule's bases.
        # A list's items the last put serialized are not serialized again (_lg_dumps).
        cached = self._index.get(task)
        last_dumps = cached.dumps if cached is not None else {}
        dumps: Dict[str, ListDump] = {}
        serialized: Dict[str, Any] = {}
        for channel in new_versions:
            if channel in values:
                value = values[channel]
                if type(value) is list:
                    serialized[channel], dumps[channel] = dump_list(
                        self.serde, value, last_dumps.get(channel)
                    )
                else:
                    serialized[channel] = self.serde.dumps_typed(value)

        def build(idx: _TaskIndex) -> Dict[str, Any]:
            sets: Dict[str, Any] = {}
            parents: Optional[Dict[str, Any]] = None  # read once, if a list needs it
            for channel, version in new_versions.items():
                key = blob_key(channel, version)
                if channel not in serialized:
                    sets[key] = ["empty", b""]
                elif type(values[channel]) is not list:
                    sets[key] = list(serialized[channel])
                else:
                    if parents is None:
                        parents = parent_versions(self.serde, idx, parent)
                    base, items = list_prefix(
                        idx, channel, version, parents, serialized[channel]
                    )
                    sets[key] = [_LIST, base, [list(i) for i in items]]
            sets[_CP + cid] = [[ct, cb], [mt, mb], parent]
            return {"set": sets}

        with self._locked([task]):
            self._commit(task, build)
            idx = self._index.get(task)
            if idx is not None:
                idx.dumps.update(dumps)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[Tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Stores ``task_id``'s writes at ``config``'s checkpoint in one commit. A write is
        keyed by ``(task_id, idx)``; ordinary ones are insert-or-ignore, the special channels
        of ``WRITES_IDX_MAP`` (negative idx) replace."""
        thread_id = thread_id_of(config)
        ns = ns_of(config)
        cid = config["configurable"].get("checkpoint_id")
        if not cid:
            raise ValueError("put_writes: config['configurable'] has no 'checkpoint_id'")
        if not isinstance(task_id, str):
            raise TypeError(f"task_id must be a str, got {type(task_id).__name__}")
        serialized = [
            (WRITES_IDX_MAP.get(channel, i), channel, self.serde.dumps_typed(value))
            for i, (channel, value) in enumerate(writes)
        ]

        def build(idx: _TaskIndex) -> Optional[Dict[str, Any]]:
            # Looked up one by one: a checkpoint with many tasks (a fan-out) gets one call
            # per task, and parsing all its writes at each would cost the square of them.
            sets: Dict[str, Any] = {}
            for widx, channel, (typ, data) in serialized:
                if widx >= 0 and idx.has_write(cid, task_id, widx):
                    continue
                sets[write_key(cid, task_id, widx)] = [
                    task_id,
                    channel,
                    typ,
                    data,
                    task_path,
                ]
            return {"set": sets} if sets else None

        task = task_name(thread_id, ns)
        with self._locked([task]):
            self._commit(task, build)

    def delete_thread(self, thread_id: str) -> None:
        """Deletes every checkpoint, blob and write of ``thread_id``, in every namespace (one
        agentwal task each; the space is reclaimed by compaction)."""
        thread_id = check_thread_id(thread_id)
        tasks = self._saver_tasks(thread_id)
        with self._locked(t[0] for t in tasks):
            for task, _, _ in tasks:
                self._delete_task(task)

    def _delete_task(self, task: str) -> None:
        """Deletes ``task``; one that another saver deleted first is as good as deleted."""
        self._index.pop(task, None)
        try:
            self.store.delete_task(task)
        except UnknownTaskError:
            pass

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copies every checkpoint, blob and write of ``source_thread_id`` (every namespace)
        to ``target_thread_id``: one ``Store.fork`` per namespace (no value is re-serialized;
        the fork's first record is a snapshot of the source task's state). A source without
        checkpoints copies nothing. ``ValueError`` if the target thread already has any."""
        src = check_thread_id(source_thread_id)
        dst = check_thread_id(target_thread_id)
        if src == dst:
            raise ValueError("copy_thread: source and target are the same thread")
        with self._locked(None):  # all tasks: the check and the forks are one step
            if self._saver_tasks(dst):
                raise ValueError(f"copy_thread: target thread {dst!r} already has checkpoints")
            for task, _, ns in self._saver_tasks(src):
                seq = self._task(task).seq
                if seq:
                    new = task_name(dst, ns)
                    self.store.fork(task, seq, new)
                    self._index.pop(new, None)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Deletes the checkpoints whose metadata ``run_id`` is in ``run_ids``, with their
        writes, in every thread: one commit per namespace touched, unsetting their keys.
        Blobs stay (other checkpoints may share them), and the records of the agentwal
        task's older checkpoints still hold the values until its retention drops them."""
        if isinstance(run_ids, str):
            raise TypeError("run_ids must be a sequence of run ids, not one str")
        runs = set(run_ids)
        if not runs:
            return
        def build(idx: _TaskIndex) -> Optional[Dict[str, Any]]:
            doomed = [
                cid
                for cid in idx.cids()
                if self.serde.loads_typed(idx.cp(cid).metadata).get("run_id") in runs
            ]
            return unset_delta(idx, doomed)

        with self._locked(None):
            for task, _, _ in self._saver_tasks():
                self._commit(task, build)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prunes the threads: ``"keep_latest"`` keeps, per namespace, only the newest
        checkpoint, its writes and the blobs it references (one commit unsetting the rest);
        ``"delete"`` deletes the threads (as :meth:`delete_thread`). With ``keep_latest`` the
        space comes back only once the store's retention drops the task's older agentwal
        checkpoints (``keep_checkpoints``), since those still hold the old values."""
        if isinstance(thread_ids, str):
            raise TypeError("thread_ids must be a sequence of thread ids, not one str")
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"prune: strategy must be 'keep_latest' or 'delete', got {strategy!r}")
        threads = {check_thread_id(t) for t in thread_ids}
        if not threads:
            return
        def keep_latest(idx: _TaskIndex) -> Optional[Dict[str, Any]]:
            cids = idx.cids()
            if len(cids) <= 1:
                return None
            latest = cids[-1]
            doomed = cids[:-1]
            versions = self.serde.loads_typed(idx.cp(latest).checkpoint)["channel_versions"]
            keep = {k for ch, v in versions.items() for k in idx.bases(ch, v)}
            return unset_delta(idx, doomed, [b for b in idx.blob_ids() if b not in keep])

        with self._locked(None):
            tasks = [t for thread_id in sorted(threads) for t in self._saver_tasks(thread_id)]
            for task, _, _ in tasks:
                if strategy == "delete":
                    self._delete_task(task)
                else:
                    self._commit(task, keep_latest)

    def get_next_version(self, current: Optional[str], channel: None) -> str:
        """A zero-padded counter plus a random suffix (as InMemorySaver), so versions from
        a fork never collide on ``(channel, version)``."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(str(current).split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"
