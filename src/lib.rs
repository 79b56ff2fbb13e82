//! agentwal: an embedded, append-only write-ahead-log storage engine for AI-agent state.
#![deny(missing_docs)]

pub mod error;
pub mod log;

pub use error::{CorruptionReason, Error, Result};
