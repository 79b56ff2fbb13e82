"""The exceptions agentwal raises.

Every error of the engine is an :class:`AgentwalError`; the subclasses name the cases a
caller may handle. Each carries the details of its case as attributes (``None`` where the
engine gave none). The Rust extension raises these classes; it never raises a bare
``RuntimeError``.
"""

from __future__ import annotations

from typing import Any, Optional


class AgentwalError(Exception):
    """Base class of every agentwal error.

    Extra keyword arguments become attributes of the exception (the subclasses document
    theirs).
    """

    def __init__(self, message: str, **attrs: Any) -> None:
        super().__init__(message)
        for key, value in attrs.items():
            setattr(self, key, value)


class CorruptionError(AgentwalError):
    """A checksum or structural check failed somewhere other than a torn tail.

    Attributes: ``segment`` (path of the segment file, ``str``), ``offset`` (byte offset of
    the bad record or header in it, ``int``), ``reason`` (what check failed, ``str``).
    """

    segment: str
    offset: int
    reason: str


class ConflictError(AgentwalError):
    """``commit_if`` found the task at another seq.

    Attributes: ``task``, ``expected`` (the seq the caller expected), ``actual`` (the
    task's latest seq; 0 if the task does not exist).
    """

    task: str
    expected: int
    actual: int


class LockedError(AgentwalError):
    """Another handle (in this or another process) holds the store's writer lock.

    Open the store read-only, or stop (or close) the other writer first. Attribute:
    ``dir``.
    """

    dir: str


class ReadOnlyError(AgentwalError):
    """A write was asked of a handle opened with ``Store.open_read_only``."""


class StoreChangedError(AgentwalError):
    """A read-only handle could not get (or no longer has) a consistent view of the store:
    open it read-only again. Attribute: ``dir``."""

    dir: str


class NotAStoreError(AgentwalError):
    """The path is not an agentwal store (not a directory, or a directory of files
    agentwal did not write). It is never taken over or cleaned up.

    Attributes: ``dir``, ``reason`` (``str``).
    """

    dir: str
    reason: str


class UnsupportedFormatError(AgentwalError):
    """A segment was written by a newer (or unknown) format version.

    Attributes: ``segment``, ``found``, ``supported``.
    """

    segment: str
    found: int
    supported: int


class PoisonedError(AgentwalError):
    """An earlier write or fsync failed; this handle accepts no more writes. Reopen the
    store to recover. Attribute: ``cause`` (the first failure, as text)."""

    cause: str


class RecordTooLargeError(AgentwalError):
    """A record is larger than a segment can hold (raise ``segment_bytes``).

    Attributes: ``payload_bytes``, ``limit_bytes``.
    """

    payload_bytes: int
    limit_bytes: int


class TaskExistsError(AgentwalError):
    """The task (a fork's target, say) already exists. Attribute: ``task``."""

    task: str


class UnknownTaskError(AgentwalError):
    """The task does not exist (or was deleted). Attribute: ``task``."""

    task: str


class UnknownSeqError(AgentwalError):
    """A seq that the task never had (0, or beyond its latest).

    Attributes: ``task``, ``seq``, ``latest``.
    """

    task: str
    seq: int
    latest: int


class InvalidArgumentError(AgentwalError, ValueError):
    """A bad argument: an empty or too long id, an unknown option, a malformed delta
    (an unknown key, an unknown role), a call begun again with other arguments, ...

    Also a ``ValueError``.
    """


class SchemaMismatchError(AgentwalError):
    """Data written under another schema version of the state type.

    Attributes: ``found`` (version on disk), ``expected`` (the program's).
    """

    found: int
    expected: int


class BodyDecodeError(AgentwalError):
    """A checkpoint's body does not decode as ``AgentState`` (the store was written by a
    program with another state type), though its record checks out.

    Attributes: ``segment``, ``offset``, ``task``, ``seq``, ``schema_version``, ``reason``;
    ``segment`` and ``offset`` are ``None`` when the body is a PostgreSQL row.
    """

    segment: str | None
    offset: int | None
    task: str
    seq: int
    schema_version: int
    reason: str


class IoError(AgentwalError, OSError):
    """An operating-system I/O error, with what agentwal was doing when it happened.

    Also an ``OSError``: ``errno`` is the OS error number when there is one. Attribute:
    ``context`` (what agentwal was doing).
    """

    context: str

    def __init__(self, message: str, *, errno: Optional[int] = None, context: str = "") -> None:
        if errno is None:
            OSError.__init__(self, message)
        else:
            OSError.__init__(self, errno, message)
        self.context = context

    def __str__(self) -> str:
        return str(self.strerror if self.strerror is not None else self.args[0])


class ClosedError(AgentwalError):
    """The store handle was closed (``Store.close``, or the end of its ``with`` block)."""


class PendingCallError(AgentwalError):
    """``Store.once`` found the call begun and never finished: a crash (or an exception)
    came between its begin and its finish, or another thread of this process runs it right
    now, so whether its side effect happened is unknown. Check the side effect, then call
    ``once(..., retry_pending=True)`` to run it again, or ``finish_call`` with the result
    you found.

    Attributes: ``task``, ``call_id``, ``tool``, ``call_args`` (the call's recorded
    arguments, ``bytes``; not ``args``, which every exception has), ``in_flight``
    (``True``: another thread of this process is running it now).
    """

    task: str
    call_id: str
    tool: str
    call_args: bytes
    in_flight: bool


class PostgresError(AgentwalError):
    """The PostgreSQL backend: the server answered with an error, or could not be reached
    before anything was sent (within the deadline). Nothing of the call landed. A
    connection failure can be retried once the server is back; anything else (its message
    has the SQLSTATE) is a misconfiguration or a bug to fix first.

    Attributes: ``context`` (what agentwal was doing), ``detail`` (the server's or the
    client's message).
    """

    context: str
    detail: str


class IndeterminateError(AgentwalError):
    """The PostgreSQL backend: a write was sent and its outcome is unknown (the connection
    dropped or the deadline passed, and settling it did not finish in time). Once the
    server answers, call ``PgStore.resolve(e.write_id)``: ``landed`` says whether it
    committed, and a write settled as not landed never will. Never retry a ``commit``
    blindly: if it landed, the delta would be applied twice (journal calls are idempotent).

    Attributes: ``task``, ``write_id`` (``str``), ``cause`` (what cut the write short).
    """

    task: str
    write_id: str
    cause: str


class FencedError(AgentwalError):
    """The PostgreSQL backend: the task's lease belongs to another worker. This handle's
    lease was taken over (its epoch is no longer the task's), or it wrote without a lease
    to a task someone holds a live lease on. Nothing of the call landed, and no later write
    under the old epoch ever will: stop working on the task; to resume, ``acquire`` a new
    lease and reload its state.

    Attributes: ``task``, ``epoch`` (this writer's; ``None`` without a lease),
    ``current_epoch`` (the task's).
    """

    task: str
    epoch: Optional[int]
    current_epoch: int


class LeaseHeldError(AgentwalError):
    """The PostgreSQL backend: ``acquire`` found a live lease on the task. Work on another
    task, or try again after ``expires_in_ms``.

    Attributes: ``task``, ``holder``, ``epoch``, ``expires_in_ms`` (by the server's clock).
    """

    task: str
    holder: str
    epoch: int
    expires_in_ms: int


__all__ = [
    "AgentwalError",
    "BodyDecodeError",
    "ClosedError",
    "ConflictError",
    "CorruptionError",
    "FencedError",
    "IndeterminateError",
    "InvalidArgumentError",
    "IoError",
    "LeaseHeldError",
    "LockedError",
    "NotAStoreError",
    "PendingCallError",
    "PoisonedError",
    "PostgresError",
    "ReadOnlyError",
    "RecordTooLargeError",
    "SchemaMismatchError",
    "StoreChangedError",
    "TaskExistsError",
    "UnknownSeqError",
    "UnknownTaskError",
    "UnsupportedFormatError",
]
