//! agentwal: an embedded, append-only write-ahead-log storage engine for AI-agent state.
//!
//! An agent commits what each step changed (a delta); the commit is durable when
//! [`Store::commit`] returns. After a crash, [`Store::open`] replays the log and
//! [`Store::load_latest`] hands back the last durable checkpoint. See README.md for a tour,
//! DESIGN.md for the design, docs/format.md for the on-disk format and docs/log.md for the
//! recovery rules.
#![deny(missing_docs)]

#[cfg(feature = "tokio")]
pub mod async_store;
mod background;
pub mod error;
pub mod log;
#[cfg(feature = "postgres")]
pub mod postgres;
pub(crate) mod rules;
mod sorted_map;
mod state;
pub mod storage;
mod store;
mod task_store;
mod value;

#[cfg(feature = "tokio")]
pub use async_store::AsyncStore;
pub use error::{BodyLocation, CorruptionReason, Error, NotAStoreReason, Result};
pub use log::{RecoveryMode, SyncMode};
pub use state::{AgentDelta, AgentState, Message, Role, State, ToolCall};
pub use store::{
    BodyCheck, BodySummary, CACHE_BYTES_DEFAULT, CALL_ID_BYTES_MAX, COMPACTION_DEAD_BYTES_MIN,
    COMPRESSED_BODY_BYTES_MAX, COMPRESSION_BODY_BYTES_MIN, CallInfo, Checkpoint, CheckpointInfo,
    CompactionReport, Compression, LostCheckpoints, Options, PendingCall, RecordSummary,
    RecoveryReport, SNAPSHOT_DELTA_BYTES_FLOOR, SNAPSHOT_DELTA_RATIO, SNAPSHOT_EVERY_DEFAULT,
    Stats, Store, TASK_ID_BYTES_MAX, TOOL_NAME_BYTES_MAX, TaskInfo, UndecodedBodies, VerifyReport,
    ZSTD_LEVEL_DEFAULT, describe_record,
};
pub use task_store::TaskStore;
pub use value::{NotJson, Value};

/// Runs the README's Rust examples as doctests, so the README cannot drift from the API.
#[doc = include_str!("../README.md")]
// With `tokio` only: README shows the async API too.
#[cfg(all(doctest, feature = "tokio"))]
pub struct ReadmeDoctests;
