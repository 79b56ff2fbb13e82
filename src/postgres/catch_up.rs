//! Bringing a loaded checkpoint up to date from the deltas committed after it
//! (docs/postgres.md §2): a worker that holds a task's state as of seq `s` and finds the
//! task moved on (another worker took a turn) reads the rows after `s` instead of the whole
//! history. It reads a subset of what a full load reads, or nothing: a snapshot after `s`
//! (the state is then as cheap to load whole; retention deletes only rows below one), or
//! a task deleted or written again from seq 1, make it answer `None`, and the caller loads.

use std::sync::Arc;

use tokio_postgres::types::Type;

use super::conn::{RowExt, attempt};
use super::hint::Hint;
use super::load::{TASK_COLUMN_COUNT, TaskRow, inconsistent, task_columns};
use super::{PgStore, statements};
use crate::error::Result;
use crate::rules::body::{At, DecodedBody};
use crate::rules::{self, BodyMeta};
use crate::state::State;
use crate::store::{Checkpoint, TASK_ID_BYTES_MAX, validate_id};

/// The checkpoints of task `$1` from seq `$2` (the base, without its body) to the latest,
/// in seq order; no row at all if one of those after the base is a snapshot. Its columns:
/// the task row's (`TASK_COLUMNS`: what the next commit decides on, as after a load), then
/// each row's seq, snapshot flag, schema version, body and creation time. One statement:
/// one snapshot of the database.
const CATCH_UP_SQL: &str = concat!(
    "WITH t AS MATERIALIZED (SELECT ",
    task_columns!(),
    " FROM tasks t WHERE task = $1)
     SELECT t.*, c.seq, c.snapshot, c.schema_version,
            CASE WHEN c.seq > $2 THEN c.body END, c.created_at_ms
     FROM t JOIN checkpoints c ON c.task = $1 AND c.seq >= $2 AND c.seq <= t.latest_seq
     WHERE NOT EXISTS (SELECT 1 FROM checkpoints s
                       WHERE s.task = $1 AND s.seq > $2 AND s.snapshot)
     ORDER BY c.seq"
);

/// The columns of a `CATCH_UP_SQL` row after the task row's.
const SEQ: usize = TASK_COLUMN_COUNT;
const SNAPSHOT: usize = SEQ + 1;
const SCHEMA_VERSION: usize = SEQ + 2;
const BODY: usize = SEQ + 3;
const CREATED_AT_MS: usize = SEQ + 4;

impl<S: State> PgStore<S> {
    /// The latest checkpoint of `base.task`, built from `base` and the deltas committed
    /// after it: `base` itself (the same state, shared) if nothing was committed since;
    /// `None` if it cannot be built that way (a snapshot was stored after `base`, which
    /// retention's deletes always follow; the task was deleted, or written again so that
    /// its checkpoint at `base.seq` is not `base`, judged by its creation time): then
    /// [`load_latest`](Self::load_latest) reads it. One round trip, which reads only the
    /// rows after `base`, and leaves the handle's hint of the task's row as a load does.
    pub fn catch_up(&self, base: &Checkpoint<S>) -> Result<Option<Checkpoint<S>>> {
        self.shared.block_on(self.catch_up_async(base))
    }

    /// [`catch_up`](Self::catch_up), as a future.
    pub(super) async fn catch_up_async(
        &self,
        base: &Checkpoint<S>,
    ) -> Result<Option<Checkpoint<S>>> {
        let task = base.task.as_str();
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        self.shared
            .run_read_async(
                "catching a checkpoint up",
                attempt!(|c| {
                    let rows = statements::query_hot(
                        c,
                        CATCH_UP_SQL,
                        &[
                            (&task.as_bytes(), Type::BYTEA),
                            (&(base.seq.min(i64::MAX as u64) as i64), Type::INT8),
                        ],
                    )
                    .await?;
                    if let Some(first) = rows.first() {
                        // What a commit after this read decides on (a hint: checked by it).
                        let row = TaskRow::from_row(first)?;
                        self.shared.hints.put(task, Hint::from(&row));
                    }
                    apply_rows(base, &rows)
                }),
            )
            .await
    }
}

/// `base` with the deltas of `rows` (`CATCH_UP_SQL`'s) applied; `None` if `rows` do not
/// start at `base` (by seq and creation time) or do not reach the latest seq.
fn apply_rows<S: State>(
    base: &Checkpoint<S>,
    rows: &[tokio_postgres::Row],
) -> super::conn::Attempt<Option<Checkpoint<S>>> {
    let task = base.task.as_str();
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let latest = first.col::<i64>(0)? as u64; // TASK_COLUMNS' first: the latest seq
    let starts_at_base = first.col::<i64>(SEQ)? as u64 == base.seq
        && first.col::<i64>(CREATED_AT_MS)? as u64 == base.created_at_ms;
    // Rows are contiguous seqs (a task's seqs have no holes above its fold base), so
    // their count says whether they reach the latest; anything else is not `base`'s task.
    if !starts_at_base || base.seq + rows.len() as u64 - 1 != latest {
        return Ok(None);
    }
    if rows.len() == 1 {
        return Ok(Some(base.clone()));
    }
    let mut state = S::clone(&base.state);
    let mut created_at_ms = base.created_at_ms;
    for (expected, row) in (base.seq + 1..).zip(&rows[1..]) {
        let seq = row.col::<i64>(SEQ)? as u64;
        if seq != expected {
            let why = format!("seq {seq} where {expected} was expected, catching up");
            return Err(inconsistent(task, why));
        }
        let meta = BodyMeta {
            task,
            seq,
            schema_version: row.col::<i32>(SCHEMA_VERSION)? as u32,
            snapshot: row.col(SNAPSHOT)?,
            at: At::Postgres,
        };
        let body: Option<&[u8]> = row.col(BODY)?;
        let Some(body) = body else {
            return Err(inconsistent(task, format!("seq {seq} has no body")));
        };
        match rules::decode_body::<S>(&meta, body)? {
            DecodedBody::Delta(d) => state.apply_owned(d),
            // The statement returns no rows when a snapshot follows the base.
            DecodedBody::Snapshot(_) => {
                return Err(inconsistent(task, format!("seq {seq} is a snapshot")));
            }
        }
        created_at_ms = row.col::<i64>(CREATED_AT_MS)? as u64;
    }
    Ok(Some(Checkpoint {
        task: task.to_string(),
        seq: latest,
        created_at_ms,
        state: Arc::new(state),
    }))
}
