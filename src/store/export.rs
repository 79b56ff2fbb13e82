//! Raw checkpoint records, read back as stored, for copying a store into another backend
//! (`agentwal migrate`, `src/postgres/import.rs`): the body bytes as encoded (decompressed
//! if the record holds them compressed: PostgreSQL stores encoded bodies,
//! docs/postgres.md), with the schema version, so a copy needs neither the state type nor a
//! re-encoding.

use super::load::{indexed_checkpoint, stored_body};
use super::{Store, TASK_ID_BYTES_MAX, validate_id};
use crate::error::Result;
use crate::state::State;

/// One checkpoint record of a task, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawCheckpoint {
    pub seq: u64,
    pub created_at_ms: u64,
    /// `State::VERSION` of the program that wrote it.
    pub schema_version: u32,
    /// A full state (else a delta on the previous checkpoint's state).
    pub snapshot: bool,
    /// The postcard encoding of the state or delta (uncompressed).
    pub body: Vec<u8>,
    /// The fork origin a task's seq 1 records.
    pub origin: Option<(String, u64)>,
}

impl<S: State> Store<S> {
    /// Checkpoint `seq` of `task` as its record stores it, the body decompressed; `None`
    /// if the index holds no such checkpoint (unknown task, deleted, or forgotten by
    /// compaction). The record is checked to be that checkpoint, as every load checks it.
    pub(crate) fn raw_checkpoint(&self, task: &str, seq: u64) -> Result<Option<RawCheckpoint>> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        let Some(slot) = self.inner.index.get(task) else {
            return Ok(None);
        };
        let _reading = self.inner.relocation.read();
        let pos = {
            let data = slot.data.read();
            match data.checkpoint(seq) {
                Some(entry) if !data.deleted => entry.pos,
                _ => return Ok(None),
            }
        };
        self.inner.log.read_with(pos, |rec| {
            let c = indexed_checkpoint(&rec, task, seq)?;
            let body = stored_body(&rec, &c)?.into_owned();
            Ok(Some(RawCheckpoint {
                seq,
                created_at_ms: c.created_at_ms,
                schema_version: c.schema_version,
                snapshot: c.body_kind.is_snapshot(),
                body,
                origin: c.origin.map(|o| (o.task.to_string(), o.seq)),
            }))
        })
    }
}
