"""agentwal: an embedded, append-only write-ahead-log storage engine for AI-agent state.

An agent commits what each step changed (a *delta*); the commit is durable when
:meth:`Store.commit` returns. After a crash, :meth:`Store.open` replays the log and
:meth:`Store.load_latest` hands back the last durable checkpoint. Tool calls with side
effects go through the call journal (:meth:`Store.begin_call` / :meth:`Store.finish_call`,
or :meth:`Store.once`), so a restarted agent never runs a finished tool twice and knows
which calls are uncertain.

A delta is a dict, every key optional::

    {
        "messages": [{"role": "user", "content": "hi"}],  # appended
        "set": {"phase": "greeting"},                      # variables set
        "unset": ["scratch"],                              # variables removed (after set)
        "metadata": {"model": "m1"},                       # metadata merged in
    }

A message is ``{"role", "content", "tool_calls": [{"id", "name", "args"}],
"tool_call_id", "data"}`` (role one of ``"system"``, ``"user"``, ``"assistant"``,
``"tool"``; missing keys default to role ``"user"``, empty content, no tool calls, ``None``).
A loaded :class:`Checkpoint` has ``task``, ``seq``, ``created_at_ms`` and ``state``:
``{"messages": [...], "vars": {...}, "metadata": {...}}``, messages with all five keys.

Values (variables, metadata, tool-call args, message data) are None, bool, int (64-bit),
float, str, bytes, list and dict with str keys; a tuple is stored as a list, a bytearray as
bytes. Anything else raises ``TypeError``.

:class:`PgStore` serves the same methods, with the same meanings, on a PostgreSQL database
that many processes and hosts share (``PgStore.open("postgresql://...")``), plus task leases
with fencing (:meth:`PgStore.acquire`, :meth:`PgStore.with_lease`) and
:meth:`PgStore.resolve` for writes whose outcome a network failure left unknown.

Errors are :class:`AgentwalError` and its subclasses (see ``agentwal._errors``). A
LangGraph checkpointer is :class:`agentwal.langgraph.AgentwalSaver` (it needs
``langgraph-checkpoint``; ``import agentwal`` does not import it).
"""

from __future__ import annotations

# The exception classes first: the extension raises them from `agentwal._errors`.
from ._errors import (
    AgentwalError,
    BodyDecodeError,
    ClosedError,
    ConflictError,
    CorruptionError,
    FencedError,
    IndeterminateError,
    InvalidArgumentError,
    IoError,
    LeaseHeldError,
    LockedError,
    NotAStoreError,
    PendingCallError,
    PoisonedError,
    PostgresError,
    ReadOnlyError,
    RecordTooLargeError,
    SchemaMismatchError,
    StoreChangedError,
    TaskExistsError,
    UnknownSeqError,
    UnknownTaskError,
    UnsupportedFormatError,
)
from ._agentwal import (
    CALL_ID_BYTES_MAX,
    TASK_ID_BYTES_MAX,
    TOOL_NAME_BYTES_MAX,
    Checkpoint,
    CheckpointInfo,
    CompactionReport,
    Lease,
    LostCheckpoints,
    PendingCall,
    PgStore,
    RecoveryReport,
    Resolution,
    SkippedRange,
    StateView,
    Stats,
    Store,
    VerifyReport,
    round_trip,
)

__all__ = [
    "AgentwalError",
    "BodyDecodeError",
    "CALL_ID_BYTES_MAX",
    "Checkpoint",
    "CheckpointInfo",
    "ClosedError",
    "CompactionReport",
    "ConflictError",
    "CorruptionError",
    "FencedError",
    "IndeterminateError",
    "InvalidArgumentError",
    "IoError",
    "Lease",
    "LeaseHeldError",
    "LockedError",
    "LostCheckpoints",
    "NotAStoreError",
    "PendingCall",
    "PendingCallError",
    "PgStore",
    "PoisonedError",
    "PostgresError",
    "ReadOnlyError",
    "RecordTooLargeError",
    "RecoveryReport",
    "Resolution",
    "SchemaMismatchError",
    "SkippedRange",
    "StateView",
    "Stats",
    "Store",
    "StoreChangedError",
    "TASK_ID_BYTES_MAX",
    "TOOL_NAME_BYTES_MAX",
    "TaskExistsError",
    "UnknownSeqError",
    "UnknownTaskError",
    "UnsupportedFormatError",
    "VerifyReport",
    "round_trip",
]

# The exceptions are defined in agentwal._errors; they are agentwal's public names.
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) and issubclass(_obj, BaseException):
        _obj.__module__ = "agentwal"
del _name, _obj
