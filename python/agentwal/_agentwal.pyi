"""Type stubs of agentwal's native module (import ``agentwal``, not ``agentwal._agentwal``)."""

from __future__ import annotations

import os
import pathlib
from types import TracebackType
from typing import (
    Any,
    Callable,
    Dict,
    List,
    Literal,
    Optional,
    Tuple,
    Type,
    TypedDict,
    Union,
    final,
)

# A value of a variable, of metadata, of tool-call args or of message data.
Value = Union[None, bool, int, float, str, bytes, List["Value"], Dict[str, "Value"]]

class ToolCallDict(TypedDict):
    """A tool call the model asked for."""

    id: str
    name: str
    args: Value

class MessageDict(TypedDict):
    """A message of a loaded state: all five keys are present."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_calls: List[ToolCallDict]
    tool_call_id: Optional[str]
    data: Value

class MessageIn(TypedDict, total=False):
    """A message in a delta: every key optional (role "user", empty content, no tool calls)."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_calls: List[ToolCallDict]
    tool_call_id: Optional[str]
    data: Value

class Delta(TypedDict, total=False):
    """What one commit changes: messages appended, variables set then unset, metadata merged."""

    messages: List[MessageIn]
    set: Dict[str, Value]
    unset: List[str]
    metadata: Dict[str, Value]

class StateDict(TypedDict):
    """A task's state as plain data."""

    messages: List[MessageDict]
    vars: Dict[str, Value]
    metadata: Dict[str, Value]

TASK_ID_BYTES_MAX: int
"""Longest task id accepted, in bytes (UTF-8)."""
CALL_ID_BYTES_MAX: int
"""Longest tool-call id accepted, in bytes (UTF-8)."""
TOOL_NAME_BYTES_MAX: int
"""Longest tool name accepted, in bytes (UTF-8)."""

def round_trip(value: Any) -> Value:
    """Converts ``value`` as a commit would store it, and back (tuples become lists, bytearrays
    bytes). Raises ``TypeError`` for an unsupported type, ``OverflowError`` for an int beyond
    64 bits, ``InvalidArgumentError`` for nesting deeper than 200 levels."""

@final
class Checkpoint:
    """A task's state as of one checkpoint."""

    @property
    def task(self) -> str:
        """The task id."""
    @property
    def seq(self) -> int:
        """The checkpoint's seq (1, 2, 3, ... per task)."""
    @property
    def created_at_ms(self) -> int:
        """When it was committed (ms since the Unix epoch)."""
    @property
    def state(self) -> StateDict:
        """The state as of this checkpoint (a new dict on every load: yours to change)."""

@final
class StateView:
    """A task's checkpoint whose state stays in the engine until asked for: each variable is
    converted to Python when read (``Checkpoint.state`` converts the whole state at once).
    Immutable: a later commit to the task does not change it."""

    @property
    def task(self) -> str:
        """The task id."""
    @property
    def seq(self) -> int:
        """The checkpoint's seq."""
    @property
    def created_at_ms(self) -> int:
        """When it was committed (ms since the Unix epoch)."""
    def var(self, key: str) -> Optional[Value]:
        """Variable ``key`` as plain data (a new object on every call); ``None`` if absent."""
    def var_keys(self, prefix: str = "") -> List[str]:
        """The keys of the variables starting with ``prefix`` (all by default), sorted."""
    def last_key(self, prefix: str = "") -> Optional[str]:
        """The greatest key starting with ``prefix`` (of all keys by default); ``None`` if no
        key does. One lookup, whatever the number of keys under the prefix."""
    def list_items(
        self, channel: str, version: Union[str, int], marker: str
    ) -> Optional[Tuple[Tuple[str, bytes], ...]]:
        """The items of the LangGraph saver's list blob ``(channel, version)`` (key
        ``"b:" + json.dumps([channel, version])``, value ``[marker, base version or None,
        [[type, bytes], ...]]``), following its chain of bases, oldest first; ``None`` if
        the chain cannot be resolved here (a blob absent or of another form, a version
        neither ``str`` nor ``int``, a loop)."""
    def vars(self, prefix: str = "") -> Dict[str, Value]:
        """The variables whose key starts with ``prefix`` (all by default), as a new dict."""
    def state(self) -> StateDict:
        """The whole state, as :attr:`Checkpoint.state` has it (a new dict)."""
    def __contains__(self, key: str) -> bool:
        """Whether variable ``key`` is set."""
    def __len__(self) -> int:
        """How many variables are set."""

@final
class CheckpointInfo:
    """Metadata of one retained checkpoint."""

    @property
    def seq(self) -> int:
        """The seq."""
    @property
    def created_at_ms(self) -> int:
        """When it was committed (ms since the Unix epoch)."""
    @property
    def bytes(self) -> int:
        """Bytes of its record on disk."""
    @property
    def snapshot(self) -> bool:
        """Whether the record holds the full state (a snapshot) rather than a delta."""
    @property
    def forked_from(self) -> Optional[Tuple[str, int]]:
        """For the first checkpoint of a fork: ``(task, seq)`` it was forked from."""

@final
class PendingCall:
    """A tool call that began and never finished: its side effect is uncertain."""

    @property
    def call_id(self) -> str:
        """The call id."""
    @property
    def tool(self) -> str:
        """The tool's name."""
    @property
    def args(self) -> bytes:
        """The arguments recorded by ``begin_call``."""

@final
class SkippedRange:
    """A corrupt range that salvage recovery skipped."""

    @property
    def segment(self) -> str:
        """The segment file."""
    @property
    def offset(self) -> int:
        """First byte skipped."""
    @property
    def bytes(self) -> int:
        """Bytes skipped."""
    @property
    def reason(self) -> str:
        """Why the first record there was rejected."""

@final
class LostCheckpoints:
    """Checkpoints of a task that salvage recovery could not restore."""

    @property
    def task(self) -> str:
        """The task."""
    @property
    def seqs(self) -> List[int]:
        """Seqs whose records were corrupt or no longer chain."""

@final
class RecoveryReport:
    """What ``open`` found."""

    @property
    def records(self) -> int:
        """Records replayed."""
    @property
    def bytes(self) -> int:
        """Bytes of valid records scanned."""
    @property
    def segments(self) -> int:
        """Segment files scanned."""
    @property
    def torn_bytes(self) -> int:
        """Bytes of a torn tail discarded (a crash cut the last batch)."""
    @property
    def skipped(self) -> List[SkippedRange]:
        """Corrupt ranges skipped (salvage mode only)."""
    @property
    def lost(self) -> List[LostCheckpoints]:
        """Checkpoints lost to skipped corruption (salvage mode only)."""
    @property
    def tasks(self) -> int:
        """Tasks in the store after recovery."""
    @property
    def elapsed_ms(self) -> int:
        """Wall time of the recovery, in milliseconds."""

@final
class Stats:
    """Counters a service would export. Counts are since this handle opened; sizes are now."""

    @property
    def commits(self) -> int:
        """Checkpoints committed through this handle."""
    @property
    def appends(self) -> int:
        """Log records appended (checkpoints, tool calls, deletions)."""
    @property
    def fsyncs(self) -> int:
        """fdatasync calls."""
    @property
    def batches(self) -> int:
        """Group-commit batches written."""
    @property
    def mean_batch_records(self) -> float:
        """Mean records per batch (how many commits shared one fsync)."""
    @property
    def bytes_written(self) -> int:
        """Bytes appended to the log."""
    @property
    def zero_bytes_written(self) -> int:
        """Bytes of zeros written ahead of the log's data."""
    @property
    def fill_bytes_written(self) -> int:
        """Bytes of zeros ending batches on a block boundary in a recycled segment file."""
    @property
    def live_bytes(self) -> int:
        """Bytes of the records the index holds (checkpoints and tool calls)."""
    @property
    def dead_bytes(self) -> int:
        """Bytes of records in the log that the index no longer holds (an estimate once
        compaction has run)."""
    @property
    def segments(self) -> int:
        """Segment files."""
    @property
    def disk_bytes(self) -> int:
        """Bytes of segment files on disk (including preallocated space)."""
    @property
    def tasks(self) -> int:
        """Tasks."""
    @property
    def checkpoints(self) -> int:
        """Checkpoint records the index holds over all tasks."""
    @property
    def compactions(self) -> int:
        """Compaction passes run by this handle."""

@final
class CompactionReport:
    """What a compaction pass did."""

    @property
    def segments_deleted(self) -> int:
        """Segments deleted."""
    @property
    def records_rewritten(self) -> int:
        """Records rewritten forward."""
    @property
    def bytes_reclaimed(self) -> int:
        """Bytes reclaimed on disk."""
    @property
    def elapsed_ms(self) -> int:
        """Wall time in milliseconds."""
    @property
    def removed(self) -> List[str]:
        """Segment files removed (paths), oldest first."""

@final
class VerifyReport:
    """What ``verify`` checked (it raises instead of returning on any damage)."""

    @property
    def tasks(self) -> int:
        """Tasks checked."""
    @property
    def checkpoints(self) -> int:
        """Checkpoint records checked."""
    @property
    def calls(self) -> int:
        """Tool calls checked."""
    @property
    def bodies_decoded(self) -> int:
        """Checkpoint bodies that decoded as the agent state (or its delta)."""

@final
class Store:
    """A store of agent tasks and their checkpoints (``agentwal::Store<AgentState>``).

    One writer per store (:meth:`open` takes the store's lock); any number of readers
    (:meth:`open_read_only`), also while a writer runs. A handle is safe to share between
    threads; the GIL is released while it reads, writes and fsyncs, so threads committing to
    different tasks share fsyncs (group commit). Use it in a ``with`` block, or call
    :meth:`close`, to release the lock deterministically.
    """

    @staticmethod
    def open(
        path: Union[str, os.PathLike[str]],
        *,
        sync: Literal["always", "periodic", "never"] = "always",
        periodic_ms: Optional[int] = None,
        segment_bytes: Optional[int] = None,
        keep_checkpoints: Optional[int] = None,
        max_age_s: Optional[float] = None,
        recovery: Literal["tolerate_torn_tail", "strict", "salvage"] = "tolerate_torn_tail",
        cache_bytes: Optional[int] = None,
        snapshot_every: Optional[int] = None,
        auto_compact: bool = True,
    ) -> Store:
        """Opens the store in ``path``, creating it if needed, and recovers every durable commit.

        - ``sync``: ``"always"``: a commit is durable when it returns (one fsync per
          group-commit batch); ``"periodic"``: written to the OS on return, fsynced every
          ``periodic_ms`` (default 100) and by :meth:`flush`; ``"never"``: only by
          :meth:`flush` (tests and throwaway data).
        - ``segment_bytes``: segment files rotate at this size (default 64 MiB).
        - ``keep_checkpoints`` / ``max_age_s``: retention (None: keep all).
        - ``recovery``: ``"tolerate_torn_tail"`` discards a torn tail and fails on other
          damage; ``"strict"`` fails on a torn tail too; ``"salvage"`` skips corrupt ranges
          and reports them in :meth:`recovery_report`.
        - ``cache_bytes``: memory for the latest-state cache (default 64 MiB; 0: off).
        - ``snapshot_every``: at most this many deltas between full snapshots (default 1024).
        - ``auto_compact``: compact on a background thread when segments rotate.

        Raises ``LockedError`` if another writer holds the store, ``NotAStoreError`` for a
        path that is not a store, ``InvalidArgumentError`` for a PostgreSQL URL (open it
        with :meth:`PgStore.open`), ``CorruptionError`` for damage, ``InvalidArgumentError``
        for a bad option.
        """
    @staticmethod
    def open_read_only(
        path: Union[str, os.PathLike[str]],
        *,
        recovery: Literal["tolerate_torn_tail", "strict", "salvage"] = "tolerate_torn_tail",
        keep_checkpoints: Optional[int] = None,
        max_age_s: Optional[float] = None,
        cache_bytes: Optional[int] = None,
    ) -> Store:
        """Opens the store read-only: no lock taken, nothing written; it sees what was durable
        when it opened (open it again to see newer commits). Writes raise ``ReadOnlyError``."""
    @property
    def path(self) -> pathlib.Path:
        """The store's directory."""
    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
    def close(self) -> None:
        """Closes this handle: the store's lock is released once calls running on other
        threads return. Later calls raise ``ClosedError``; closing twice is a no-op."""
    def __enter__(self) -> Store:
        """Returns the store itself."""
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool:
        """Closes the store; exceptions propagate."""
    def commit(self, task: str, delta: Delta) -> int:
        """Appends ``delta`` to ``task`` (creating the task); returns the new checkpoint's seq.
        Durable on return with ``sync="always"``. ``TypeError`` for a value of an unsupported
        type, ``InvalidArgumentError`` for an unknown key or role or a bad task id."""
    def commit_if(self, task: str, expected_seq: int, delta: Delta) -> int:
        """Like :meth:`commit`, only if the task's latest seq is ``expected_seq`` (0: the task
        does not exist yet); else ``ConflictError``."""
    def load_latest(self, task: str) -> Optional[Checkpoint]:
        """The task's newest checkpoint, or ``None`` if the task has none."""
    def load_latest_view(self, task: str) -> Optional[StateView]:
        """The task's newest checkpoint as a :class:`StateView` (its variables converted to
        Python only when read: for large states read in part), or ``None`` if it has none."""
    def load(self, task: str, seq: int) -> Optional[Checkpoint]:
        """The task's state exactly as of checkpoint ``seq``; ``None`` if the task does not
        exist or retention dropped that checkpoint; ``UnknownSeqError`` for seq 0 or beyond
        the latest."""
    def load_latest_matching(
        self, task: str, accept: Callable[[StateDict], bool]
    ) -> Optional[Checkpoint]:
        """The newest retained checkpoint whose state passes ``accept`` (falls back past
        unhealthy ones); ``None`` if none does. ``accept``'s exceptions propagate."""
    def list_checkpoints(self, task: str) -> List[CheckpointInfo]:
        """The task's retained checkpoints, oldest first (empty for an unknown task)."""
    def latest_info(self, task: str) -> Optional[CheckpointInfo]:
        """The task's newest checkpoint's info (seq, ``created_at_ms``, ...) without reading
        its state: a lookup in memory here, one query on PostgreSQL. ``None`` if the task has
        no checkpoint. A cache of a task's state is still valid while this names the
        checkpoint it was read at (seq and ``created_at_ms``: a deleted task's seqs start
        again at 1)."""
    def tasks(self) -> List[str]:
        """Ids of the store's tasks, sorted."""
    def tasks_with_prefix(self, prefix: str) -> List[str]:
        """Ids of the tasks whose id starts with ``prefix``, sorted (every task for
        ``""``): how the LangGraph saver finds one thread's tasks."""
    def fork(self, task: str, seq: int, new_task: str) -> int:
        """Starts ``new_task`` as a copy of ``task`` at checkpoint ``seq``; returns the new
        task's seq (1). ``TaskExistsError`` if ``new_task`` exists."""
    def delete_task(self, task: str) -> None:
        """Deletes the task, its checkpoints and its call journal. ``UnknownTaskError`` if
        there is no such task."""
    def begin_call(self, task: str, call_id: str, tool: str, args: bytes) -> None:
        """Durably records that ``call_id`` of ``tool`` with ``args`` is about to run (before
        the side effect). Again with the same tool and args: a no-op; with other ones or after
        it finished: ``InvalidArgumentError``."""
    def finish_call(self, task: str, call_id: str, result: bytes) -> None:
        """Durably records the result of a begun call (after the side effect)."""
    def call_result(self, task: str, call_id: str) -> Optional[bytes]:
        """The recorded result of a finished call; ``None`` if unknown or still pending.

        With retention configured (``keep_checkpoints``, ``max_age_ms``), a call that
        finished before the task's oldest retained checkpoint is pruned by compaction and
        then reads as ``None``: no retained checkpoint can resume before it (docs/store.md §4).
        Use call ids that a resumed step recomputes, never ids of calls older than the
        checkpoint it resumes from."""
    def pending_calls(self, task: str) -> List[PendingCall]:
        """Calls of the task that began and never finished, in the order they began."""
    def once(
        self,
        task: str,
        call_id: str,
        tool: str,
        args: bytes,
        fn: Callable[[], bytes],
        *,
        retry_pending: bool = False,
        reconcile: Optional[Callable[[PendingCall], Optional[bytes]]] = None,
    ) -> bytes:
        """Runs a tool call at most once, across crashes.

        If ``call_id`` finished, returns its recorded result without calling ``fn``. If it
        began and never finished (a crash or an exception during the side effect), raises
        ``PendingCallError``, unless ``retry_pending=True`` (run it again, whatever
        happened) or ``reconcile`` is given: ``reconcile(pending_call)`` checks the effect
        itself (by the idempotency key it was sent with, e.g. the call id) and returns its
        result as bytes if it happened, which is recorded and returned without calling
        ``fn``, or None if it did not, and then the call runs. If ``reconcile`` raises, the
        call stays pending and the exception propagates. Otherwise records the begin,
        runs ``fn()`` (GIL held), records its bytes result and returns it. If ``fn`` raises,
        the call stays pending and the exception propagates. Two threads of one process
        never run the same call together: the second gets ``PendingCallError`` with
        ``in_flight=True``.
        """
    def compact(self) -> CompactionReport:
        """Runs a compaction pass now (retention, deleted tasks, dead segments)."""
    def flush(self) -> None:
        """Makes everything committed so far durable (needed with ``sync="periodic"`` or
        ``"never"``)."""
    def stats(self) -> Stats:
        """Counters of this handle (commits, fsyncs, group-commit batches, sizes)."""
    def recovery_report(self) -> RecoveryReport:
        """What ``open`` found: records replayed, torn bytes discarded, corruption skipped."""
    def verify(self) -> VerifyReport:
        """Re-reads and checks every record and decodes every checkpoint body; raises
        ``CorruptionError`` (or another error) on the first problem."""

@final
class Lease:
    """A worker's lease on one task (:meth:`PgStore.acquire`): write under it with
    :meth:`PgStore.with_lease`. Compares equal to a lease of the same task, holder, epoch."""

    @property
    def task(self) -> str:
        """The task."""
    @property
    def holder(self) -> str:
        """Who holds it (a name for people; it plays no part in fencing)."""
    @property
    def epoch(self) -> int:
        """1 for a task's first lease, one more at each acquisition after."""

@final
class Resolution:
    """What became of a write whose outcome was unknown (:meth:`PgStore.resolve`)."""

    @property
    def landed(self) -> bool:
        """Whether it committed. ``False``: it did not, and now never will (safe to redo)."""
    @property
    def seq(self) -> Optional[int]:
        """For a commit or fork that landed: the checkpoint's seq; else ``None``."""

@final
class PgStore:
    """A store of agent tasks in a PostgreSQL database (``agentwal::postgres::PgStore``).

    The methods it shares with :class:`Store` (``commit``, ``commit_if``, ``load_latest``,
    ``load_latest_view``, ``load``, ``load_latest_matching``, ``list_checkpoints``, ``latest_info``, ``tasks``, ``fork``,
    ``delete_task``, ``begin_call``, ``finish_call``, ``call_result``, ``pending_calls``,
    ``once``, ``close`` and the ``with`` block) take the same arguments and mean the same;
    code written against them runs on either backend. What only a local store has
    (``flush``, ``compact``, ``stats``, ``verify``, ``recovery_report``, read-only opens)
    is not here; what only a shared database has is: leases (:meth:`acquire`,
    :meth:`renew`, :meth:`release`, :meth:`with_lease`) and :meth:`resolve`.

    Any number of handles in any number of processes and hosts may use one database at
    once; a handle is safe to share between threads. Every call releases the GIL while it
    talks to the server and returns within ``deadline_ms``. Besides the errors of
    :class:`Store`'s methods, a call may raise ``PostgresError`` (nothing landed),
    ``IndeterminateError`` (a write whose outcome is unknown: :meth:`resolve` it),
    ``FencedError`` (the task's lease is someone else's) and, from :meth:`acquire`,
    ``LeaseHeldError``. ``CheckpointInfo.bytes`` is the stored body's size.
    """

    @staticmethod
    def open(
        url: str,
        *,
        schema: str = "agentwal",
        deadline_ms: Optional[int] = None,
        pool_idle_max: Optional[int] = None,
        pool_idle_time_max_ms: Optional[int] = None,
        snapshot_every: Optional[int] = None,
        keep_checkpoints: Optional[int] = None,
        max_age_ms: Optional[int] = None,
    ) -> PgStore:
        """Connects to the database, creates or migrates the store's tables, and returns it.

        - ``url``: a ``postgresql://user@host/dbname`` URL (a unix-socket directory as a
          percent-encoded host, ``postgresql://postgres@%2Ftmp%2Fpg/postgres``, or as
          ``?host=/tmp/pg``) or libpq key-value words
          (``"host=/tmp/pg user=postgres dbname=postgres"``).
        - ``schema``: the PostgreSQL schema (namespace) of the tables (letters, digits and
          ``_``, at most 63 bytes); several stores can share one database under different
          schemas.
        - ``deadline_ms``: every call returns within this time (default 10,000).
        - ``pool_idle_max``: idle connections kept for reuse (default 32; keep at least as
          many as threads in calls at once, or bursts close and reopen sessions).
        - ``pool_idle_time_max_ms``: an idle connection unused this long is closed (default
          300,000: 5 minutes).
        - ``snapshot_every`` / ``keep_checkpoints``: as for :meth:`Store.open`.
        - ``max_age_ms``: retention by age, as ``max_age_s`` for :meth:`Store.open` but in
          milliseconds: checkpoints created longer ago than this are no longer served,
          except each task's latest (ages by this client's clock, which also stamps
          ``created_at_ms``).

        Raises ``PostgresError`` if the server cannot be reached within the deadline,
        ``InvalidArgumentError`` for a bad option.
        """
    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding the store's tables."""
    @property
    def deadline_ms(self) -> int:
        """Each call's deadline, in milliseconds."""
    @property
    def lease(self) -> Optional[Lease]:
        """The lease this handle writes under (``None`` for a handle from :meth:`open`)."""
    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
    def close(self) -> None:
        """Closes this handle; the connections close with the last handle sharing them (the
        handles of :meth:`with_lease` share them). Later calls raise ``ClosedError``."""
    def __enter__(self) -> PgStore:
        """Returns the store itself."""
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool:
        """Closes the handle; exceptions propagate."""
    def commit(self, task: str, delta: Delta) -> int:
        """As :meth:`Store.commit`: durable when it returns (COMMIT acknowledged by the
        server). Never retry one that raised ``IndeterminateError``: resolve it first."""
    def commit_if(self, task: str, expected_seq: int, delta: Delta) -> int:
        """As :meth:`Store.commit_if`."""
    def load_latest(self, task: str) -> Optional[Checkpoint]:
        """As :meth:`Store.load_latest`."""
    def load_latest_view(self, task: str) -> Optional[StateView]:
        """The task's newest checkpoint as a :class:`StateView` (its variables converted to
        Python only when read: for large states read in part), or ``None`` if it has none."""
    def catch_up_view(self, view: StateView) -> Optional[StateView]:
        """The newest checkpoint of ``view``'s task as a :class:`StateView`, built from
        ``view`` and the deltas committed after it in one round trip that reads only those
        (the same checkpoint if nothing was committed since); ``None`` if it cannot be
        built that way (a snapshot was stored after it, or the task was deleted or written
        again): then :meth:`load_latest_view` reads it."""
    def load(self, task: str, seq: int) -> Optional[Checkpoint]:
        """As :meth:`Store.load`."""
    def load_latest_matching(
        self, task: str, accept: Callable[[StateDict], bool]
    ) -> Optional[Checkpoint]:
        """As :meth:`Store.load_latest_matching`."""
    def list_checkpoints(self, task: str) -> List[CheckpointInfo]:
        """As :meth:`Store.list_checkpoints` (``bytes`` is the stored body's size)."""
    def latest_info(self, task: str) -> Optional[CheckpointInfo]:
        """As :meth:`Store.latest_info`: one query, no state read."""
    def tasks(self) -> List[str]:
        """As :meth:`Store.tasks`: every task of the schema, from every host."""
    def tasks_with_prefix(self, prefix: str) -> List[str]:
        """As :meth:`Store.tasks_with_prefix`: a range of the ``tasks`` key, so it reads
        only the tasks it returns."""
    def fork(self, task: str, seq: int, new_task: str) -> int:
        """As :meth:`Store.fork`."""
    def delete_task(self, task: str) -> None:
        """As :meth:`Store.delete_task` (the task's lease row stays: epochs only grow)."""
    def begin_call(self, task: str, call_id: str, tool: str, args: bytes) -> None:
        """As :meth:`Store.begin_call` (idempotent: safe to retry)."""
    def finish_call(self, task: str, call_id: str, result: bytes) -> None:
        """As :meth:`Store.finish_call` (idempotent: safe to retry)."""
    def call_result(self, task: str, call_id: str) -> Optional[bytes]:
        """As :meth:`Store.call_result`."""
    def pending_calls(self, task: str) -> List[PendingCall]:
        """As :meth:`Store.pending_calls`."""
    def once(
        self,
        task: str,
        call_id: str,
        tool: str,
        args: bytes,
        fn: Callable[[], bytes],
        *,
        retry_pending: bool = False,
        reconcile: Optional[Callable[[PendingCall], Optional[bytes]]] = None,
    ) -> bytes:
        """As :meth:`Store.once` (``reconcile`` too). The check that no other thread runs the call now covers
        this handle and those :meth:`with_lease` made from it, not other processes: across
        workers, hold the task's lease."""
    def acquire(self, task: str, holder: str, ttl_ms: int) -> Lease:
        """Acquires ``task`` for ``ttl_ms`` (by the server's clock; at most a day) unless a
        live lease holds it (``LeaseHeldError``); the task need not exist. The new epoch
        fences every earlier lease: their holders' later writes raise ``FencedError``, and a
        write of theirs in flight has landed before this returns or never will."""
    def renew(self, lease: Lease, ttl_ms: int) -> None:
        """Extends ``lease`` to ``ttl_ms`` from now. ``FencedError`` if it was taken over (a
        lease that expired but was not taken over is renewed)."""
    def release(self, lease: Lease) -> None:
        """Ends ``lease`` now so another worker can acquire the task at once.
        ``FencedError`` if it was already taken over."""
    def with_lease(self, lease: Lease) -> PgStore:
        """A handle sharing this one's connections whose writes to ``lease.task`` carry the
        lease's epoch: each raises ``FencedError`` once the lease was taken over (and
        nothing of it lands). Its writes to other tasks are unleased."""
    def resolve(self, write_id: str) -> Resolution:
        """Settles the write ``write_id`` of an ``IndeterminateError``: landed (with its seq)
        or not landed, in which case it never will (do it again). Waits at most the
        deadline for a transaction of that write still open on the server."""
