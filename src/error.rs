//! The crate's one error type.

use std::path::PathBuf;

/// Result alias used throughout agentwal.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in agentwal.
///
/// Corruption errors say where (segment file and byte offset); misuse errors say
/// what to do instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O error, with what agentwal was doing when it happened.
    #[error("I/O error while {context}: {source}")]
    Io {
        /// What agentwal was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A checksum or structural check failed somewhere other than a torn tail.
    #[error("corruption in segment {} at byte offset {offset}: {reason}", segment.display())]
    Corruption {
        /// The segment file holding the bad bytes.
        segment: PathBuf,
        /// Byte offset of the bad record (or header) inside that file.
        offset: u64,
        /// What check failed.
        reason: CorruptionReason,
    },

    /// Another handle (in this or another process) holds the writer lock.
    #[error(
        "store {} is locked by another writer; open it read-only, or stop the other writer first",
        dir.display()
    )]
    Locked {
        /// The store directory.
        dir: PathBuf,
    },

    /// A write was attempted on a read-only handle.
    #[error("this handle is read-only; open the store with `open` (not `open_read_only`) to write")]
    ReadOnly,

    /// A read-only handle could not get (or no longer has) a consistent view: the store
    /// kept changing under every attempt to scan it (a writer compacting hard, say), or a
    /// read asked for a segment the handle never scanned.
    #[error(
        "store {} changed while this read-only handle was reading it; open it read-only again",
        dir.display()
    )]
    StoreChanged {
        /// The store directory.
        dir: PathBuf,
    },

    /// The path is not an agentwal store: not a directory, or a directory without
    /// segment files (holding files agentwal did not write, or nothing a reader can read).
    #[error("{} is not an agentwal store: {reason}", dir.display())]
    NotAStore {
        /// The path given as the store's directory.
        dir: PathBuf,
        /// What it holds instead.
        reason: NotAStoreReason,
    },

    /// A segment was written by a newer (or unknown) format version.
    #[error("segment {} has format version {found}; this build supports {supported}", segment.display())]
    UnsupportedFormat {
        /// The segment file.
        segment: PathBuf,
        /// Version found on disk.
        found: u32,
        /// Version this build reads and writes.
        supported: u32,
    },

    /// A previous fsync (or write) failed; the page cache can no longer be trusted.
    #[error(
        "an earlier write or fsync failed ({cause}); this handle accepts no more writes: reopen the store to recover"
    )]
    Poisoned {
        /// The first failure, as text.
        cause: String,
    },

    /// A record is larger than a segment can hold.
    #[error(
        "record of {payload_bytes} bytes exceeds the format's limit of {limit_bytes} bytes per record (keep large blobs outside the state and store a reference)"
    )]
    RecordTooLarge {
        /// Payload size requested.
        payload_bytes: u64,
        /// Largest payload accepted with the current options.
        limit_bytes: u64,
    },

    /// `commit_if` found the task at another seq.
    #[error("conflict on task {task:?}: expected seq {expected}, found {actual}")]
    Conflict {
        /// The task id.
        task: String,
        /// The seq the caller expected.
        expected: u64,
        /// The task's actual latest seq (0: the task does not exist).
        actual: u64,
    },

    /// The task (e.g. a fork's target) already exists.
    #[error("task {task:?} already exists; pick another id or delete it first")]
    TaskExists {
        /// The task id.
        task: String,
    },

    /// The task does not exist (or was deleted).
    #[error("no task {task:?} in this store")]
    UnknownTask {
        /// The task id.
        task: String,
    },

    /// A seq outside the task's retained checkpoints.
    #[error("task {task:?} has no checkpoint {seq} (latest is {latest})")]
    UnknownSeq {
        /// The task id.
        task: String,
        /// The seq asked for.
        seq: u64,
        /// The task's latest seq.
        latest: u64,
    },

    /// Bad argument from the caller (empty task id, unknown call id, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// Data written under another `State::VERSION` and no migration was provided.
    #[error(
        "data has schema version {found}, this program expects {expected}; implement `State::migrate_state` and `State::migrate_delta`"
    )]
    SchemaMismatch {
        /// Version on disk.
        found: u32,
        /// `State::VERSION` of the running program.
        expected: u32,
    },

    /// A checkpoint's body (the encoded state or delta it carries) does not decode as the
    /// program's state type, though the record around it checks out (checksum, record
    /// kind, task and seq). Not damage: the store was most likely written with another
    /// `State` type, or another encoding of it under the same `State::VERSION`.
    /// Both backends return it, naming where the body is stored.
    #[error(
        "checkpoint {seq} of task {task:?} ({location}, schema version {schema_version}) \
         does not decode as this program's state type: {reason}"
    )]
    BodyDecode {
        /// Where the body is stored: a log record, or a PostgreSQL row.
        location: BodyLocation,
        /// The task.
        task: String,
        /// The checkpoint's seq.
        seq: u64,
        /// The schema version stored with the body.
        schema_version: u32,
        /// The decoder's message.
        reason: String,
    },

    /// A record's checksum matched but its payload did not decode.
    #[error("record at segment {} offset {offset} does not decode: {reason}", segment.display())]
    Decode {
        /// The segment file.
        segment: PathBuf,
        /// Byte offset of the record.
        offset: u64,
        /// The decoder's message.
        reason: String,
    },
    /// The PostgreSQL backend: the server answered with an error, or could not be reached
    /// before anything was sent. Nothing of the call landed. What to do: read `message`;
    /// a connection failure can be retried once the server is back, anything else is a
    /// bug or a misconfiguration to fix first.
    #[error("PostgreSQL error while {context}: {message}")]
    Postgres {
        /// What agentwal was doing.
        context: String,
        /// The server's or the client's message.
        message: String,
    },

    /// The PostgreSQL backend: a write whose outcome is unknown. It was sent, and then the
    /// connection dropped or the call's deadline passed; resolving it (looking for its
    /// write id on a fresh connection) did not finish within the deadline either. It may
    /// have landed or not, and it is now settled one way or the other only once the server
    /// answers. What to do: call `PgStore::resolve(write_id)` once the server is
    /// reachable; it says which (and makes sure a write still in flight can no longer
    /// land). Do not simply retry a `commit`: if the first one landed, a retry commits the
    /// delta twice.
    #[error(
        "the outcome of write {write_id} on task {task:?} is unknown ({cause}); resolve it with PgStore::resolve once the server answers"
    )]
    Indeterminate {
        /// The task written.
        task: String,
        /// The write's id, to give to `PgStore::resolve`.
        write_id: String,
        /// What cut the write short.
        cause: String,
    },

    /// The PostgreSQL backend: the task's lease belongs to another worker. Either this
    /// handle's lease was taken over (its epoch is no longer the task's), or it writes
    /// without a lease to a task another worker holds a live lease on. Nothing of the call
    /// landed, and no later write under the old epoch ever will. What to do: stop working
    /// on the task (another worker owns it now); to work on it again, `acquire` a new
    /// lease and reload its state first.
    #[error(
        "task {task:?} is fenced: this writer's lease epoch is {epoch:?}, the task's is {current_epoch}; stop working on it, or acquire a new lease and reload"
    )]
    Fenced {
        /// The task.
        task: String,
        /// The epoch this writer wrote under (`None`: it held no lease).
        epoch: Option<u64>,
        /// The task's current lease epoch.
        current_epoch: u64,
    },

    /// The PostgreSQL backend: `acquire` found a live lease on the task held by someone.
    /// What to do: work on another task, or try again after `expires_in_ms` (the holder
    /// may renew it).
    #[error(
        "task {task:?} is leased by {holder:?} (epoch {epoch}) for another {expires_in_ms} ms; try another task or wait"
    )]
    LeaseHeld {
        /// The task.
        task: String,
        /// The holder's name as it acquired the lease.
        holder: String,
        /// The lease's epoch.
        epoch: u64,
        /// How long until it expires, by the server's clock, in milliseconds.
        expires_in_ms: u64,
    },
}

/// Where a checkpoint's body is stored, as [`Error::BodyDecode`] names it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BodyLocation {
    /// A record of the local store's log.
    Log {
        /// The segment file.
        segment: PathBuf,
        /// Byte offset of the record.
        offset: u64,
    },
    /// The PostgreSQL backend's `checkpoints` row of the error's task and seq.
    Postgres,
}

impl std::fmt::Display for BodyLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyLocation::Log { segment, offset } => {
                write!(f, "segment {}, offset {offset}", segment.display())
            }
            BodyLocation::Postgres => f.write_str("PostgreSQL table checkpoints"),
        }
    }
}

/// Why a path is not an agentwal store ([`Error::NotAStore`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotAStoreReason {
    /// The path exists and is not a directory.
    #[error("it is not a directory")]
    NotADirectory,
    /// The directory holds no segment file (a read-only open has nothing to read).
    #[error("it holds no segment files")]
    NoSegments,
    /// The directory holds no segment file but a file agentwal did not write (the first
    /// such file found, by name); a writer does not take such a directory over.
    #[error("it holds no segment files but {}, which agentwal did not write", .0.display())]
    ForeignFile(PathBuf),
}

/// Which check a corrupt record or header failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CorruptionReason {
    /// The stored checksum does not match the bytes.
    #[error("checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    ChecksumMismatch {
        /// Checksum stored on disk.
        stored: u32,
        /// Checksum computed over the bytes read.
        computed: u32,
    },
    /// The record length runs past the end of the segment.
    #[error("record length {length} runs past the end of the segment")]
    BadLength {
        /// The length field.
        length: u64,
    },
    /// A record kind this build does not know (or 0, which marks unwritten space).
    #[error("unknown record kind {0}")]
    UnknownKind(u8),
    /// Flags or reserved bytes hold values no writer produces.
    #[error("invalid record flags {0:#04x}")]
    BadFlags(u8),
    /// The record's LSN does not follow its predecessor's.
    #[error("LSN {found} where {expected} was expected")]
    LsnGap {
        /// The LSN that should come next.
        expected: u64,
        /// The LSN found.
        found: u64,
    },
    /// The segment header is wrong (bad magic, mismatched id, truncated).
    #[error("bad segment header: {0}")]
    BadHeader(String),
    /// A sealed segment does not end with its seal record, or a segment is missing.
    #[error("segment chain broken: {0}")]
    BrokenChain(String),
    /// An invalid record is followed by a batch written after everything before it was
    /// durable, so it cannot be a torn write.
    #[error(
        "invalid record followed by a later durable batch at offset {later_offset} (not a torn tail)"
    )]
    ValidDataAfter {
        /// Where the later valid batch starts.
        later_offset: u64,
    },
    /// A record checks out but contradicts the records before it (e.g. a seq gap).
    #[error("record contradicts the log before it: {0}")]
    Inconsistent(String),
    /// Strict recovery found a torn tail.
    #[error("torn tail of {torn_bytes} bytes (strict recovery refuses to discard it)")]
    TornTail {
        /// Bytes that would have been discarded.
        torn_bytes: u64,
    },
}

impl Error {
    /// Wraps an `io::Error` with what agentwal was doing.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// Whether this is an I/O error saying the disk is full (`ENOSPC`). Compaction tells
    /// it apart to give up the retired files' space and retry; so may a caller, to make
    /// room (compact, delete tasks) before retrying a commit.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, Error::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC))
    }
}
