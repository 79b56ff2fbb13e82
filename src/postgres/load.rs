//! Reads: a task's row, retention, and loads that read one snapshot and the deltas after
//! it and fold them exactly as the local store does (docs/postgres.md §2).

use std::sync::Arc;

use tokio_postgres::types::Type;
use tokio_postgres::{Client, GenericClient, IsolationLevel, Row};

use super::conn::{Attempt, Conn, Fail, RowExt, attempt};
use super::hint::Hint;
use super::statements;
use super::{PgOptions, PgStore};
use crate::error::{Error, Result};
use crate::rules::body::At;
use crate::rules::{self, BodyMeta, retention};
use crate::state::State;
use crate::store::policy::SnapshotCounters;
use crate::store::{
    CALL_ID_BYTES_MAX, Checkpoint, CheckpointInfo, PendingCall, TASK_ID_BYTES_MAX, now_ms,
    validate_id,
};

/// A task's row, as a write or a load finds it.
#[derive(Debug, Clone)]
pub(super) struct TaskRow {
    pub latest_seq: u64,
    pub latest_created_at_ms: u64,
    pub counters: SnapshotCounters,
    /// Its oldest stored checkpoint (retention deletes below the fold base; 0: none).
    pub first_seq: u64,
    /// The schema versions of the last snapshot and the deltas since (of the records the
    /// latest state folds from).
    pub versions: Vec<i32>,
}

/// The columns `TaskRow::from_row` reads, in its order (a macro, so that whole statements
/// holding them can be `const`s).
macro_rules! task_columns {
    () => {
        "latest_seq, latest_created_at_ms, snapshot_bytes, \
         deltas_since_snapshot, delta_bytes_since_snapshot, \
         (SELECT coalesce(min(c.seq), 0) FROM checkpoints c WHERE c.task = t.task), \
         versions_since_snapshot"
    };
}

pub(super) use task_columns;

/// The columns `TaskRow::from_row` reads, in its order.
pub(super) const TASK_COLUMNS: &str = task_columns!();

/// Locks the task's row for the rest of the transaction and reads it; `$1`: the task.
pub(super) const LOCK_TASK_SQL: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM tasks t WHERE task = $1 FOR UPDATE"
);

impl TaskRow {
    pub fn from_row(row: &Row) -> Attempt<Self> {
        let u = |i: usize| row.col::<i64>(i).map(|v| v as u64);
        Ok(TaskRow {
            latest_seq: u(0)?,
            latest_created_at_ms: u(1)?,
            counters: SnapshotCounters {
                snapshot_bytes: u(2)?,
                deltas_since_snapshot: row.col::<i32>(3)? as u32,
                delta_bytes_since_snapshot: u(4)?,
            },
            first_seq: u(5)?,
            versions: row.col(6)?,
        })
    }
}

/// Oldest seq retention serves for the task of `row` under `options` (one more round trip
/// when `max_age` is set: the first checkpoint created at or after the cutoff). The rule
/// is the local store's (`rules::retention`); retention deletes rows below the fold base,
/// so the oldest stored checkpoint is the oldest loadable one.
pub(super) async fn retained_from(
    c: &impl GenericClient,
    task: &str,
    row: &TaskRow,
    options: &PgOptions,
) -> Attempt<u64> {
    let young_from = match retention::age_cutoff_ms(options.max_age, now_ms()) {
        None => None,
        // Creation times never decrease along a task's seqs: with the latest aged, all are,
        // and the query would read every aged row of a task no one commits to.
        Some(cutoff) if row.latest_created_at_ms < cutoff => Some(row.latest_seq),
        Some(cutoff) => {
            let r = c
                .query_typed_one(
                    "SELECT min(seq) FROM checkpoints WHERE task = $1 AND created_at_ms >= $2",
                    &[
                        (&task.as_bytes(), Type::BYTEA),
                        (&(cutoff.min(i64::MAX as u64) as i64), Type::INT8),
                    ],
                )
                .await?;
            // None young enough: only the latest.
            Some(
                r.col::<Option<i64>>(0)?
                    .map_or(row.latest_seq, |s| s as u64),
            )
        }
    };
    let keep = options.keep_checkpoints;
    let first = row.first_seq;
    Ok(retention::retained_from(
        row.latest_seq,
        first,
        keep,
        young_from,
    ))
}

/// The task's row, or `None` if the task does not exist.
pub(super) async fn task_row(c: &impl GenericClient, task: &str) -> Attempt<Option<TaskRow>> {
    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks t WHERE task = $1");
    let row = c
        .query_typed_opt(&sql, &[(&task.as_bytes(), Type::BYTEA)])
        .await?;
    row.as_ref().map(TaskRow::from_row).transpose()
}

/// An error for stored rows that contradict each other (never a state built from them).
pub(super) fn inconsistent(task: &str, why: String) -> Fail {
    Fail::Api(Error::Postgres {
        context: format!("reading the checkpoints of task {task:?}"),
        message: format!("the stored checkpoints are inconsistent: {why}"),
    })
}

/// The rows a fold to seq `$2` of task `$1` reads: from the newest snapshot at or before it
/// (a macro, so that a statement holding it can be a `const`). The newest snapshot is found
/// by walking the task's rows back from the bound until the first snapshot (`ORDER BY seq
/// DESC LIMIT 1`): with `max(seq)` the planner aggregated over every row of the task up to
/// the bound in its generic plan (a prepared statement's from its sixth run) and in the
/// custom plan of any task it did not know to be long, reading a task's whole history at
/// each load (tests/pg_store.rs checks the plan).
macro_rules! fold_rows_sql {
    ($seq:literal) => {
        concat!(
            "SELECT seq, snapshot, schema_version, body, created_at_ms FROM checkpoints
             WHERE task = $1 AND seq <= ",
            $seq,
            " AND seq >= coalesce((SELECT seq FROM checkpoints
                 WHERE task = $1 AND seq <= ",
            $seq,
            " AND snapshot ORDER BY seq DESC LIMIT 1), 0)"
        )
    };
}

/// A task's row and the rows its latest state folds from, in one statement (one snapshot
/// of the database, so no transaction): the task row's columns (`TASK_COLUMNS`), then the
/// fold's five (`fold_rows_sql!`) on every row; no row if the task does not exist, one row
/// with the fold's columns null if it has no checkpoint.
const LATEST_SQL: &str = concat!(
    "WITH t AS MATERIALIZED (SELECT ",
    task_columns!(),
    " FROM tasks t WHERE task = $1)
     SELECT t.*, c.* FROM t LEFT JOIN LATERAL (",
    fold_rows_sql!("t.latest_seq"),
    ") c ON true ORDER BY c.seq"
);

/// [`LATEST_SQL`], for the test that checks its plan. Public, hidden.
#[doc(hidden)]
pub fn latest_statement() -> &'static str {
    LATEST_SQL
}

/// A task's latest checkpoint's `CheckpointInfo` columns; `$1`: the task.
const LATEST_INFO_SQL: &str = "SELECT c.seq, c.created_at_ms, octet_length(c.body), c.snapshot,
        c.origin_task, c.origin_seq
     FROM tasks t JOIN checkpoints c ON c.task = t.task AND c.seq = t.latest_seq
     WHERE t.task = $1";

/// How many columns of a `LATEST_SQL` (or `CATCH_UP_SQL`) row are the task row's.
pub(super) const TASK_COLUMN_COUNT: usize = 7;

/// The state of `task` at `seq`, folded from the newest snapshot at or before it and the
/// deltas after it; and the checkpoint's `created_at_ms`.
pub(super) async fn fold<S: State>(
    c: &impl GenericClient,
    task: &str,
    seq: u64,
) -> Attempt<(S, u64)> {
    let rows = c
        .query_typed(
            concat!(fold_rows_sql!("$2"), " ORDER BY seq"),
            &[(&task.as_bytes(), Type::BYTEA), (&(seq as i64), Type::INT8)],
        )
        .await?;
    fold_rows::<S>(task, seq, &rows, 0)
}

/// Folds the state of `task` at `seq` from `rows` (the fold's columns from column `at`
/// on, in seq order): their first must be a snapshot, or seq 1, and they must run to `seq`
/// without a gap.
fn fold_rows<S: State>(task: &str, seq: u64, rows: &[Row], at: usize) -> Attempt<(S, u64)> {
    let mut state = S::default();
    let mut created_at_ms = 0;
    // No row at all is as inconsistent as too many: the task's row says `seq` exists.
    let first = (seq + 1)
        .checked_sub(rows.len() as u64)
        .filter(|f| *f >= 1 && !rows.is_empty());
    let Some(first) = first else {
        return Err(inconsistent(
            task,
            format!("{} rows up to seq {seq}", rows.len()),
        ));
    };
    for (expected, row) in (first..).zip(rows) {
        let found = row.col::<i64>(at)? as u64;
        let snapshot: bool = row.col(at + 1)?;
        if found != expected || (expected == first && !retention::fold_can_start(first, snapshot)) {
            let why = format!("seq {found} where {expected} was expected, folding to {seq}");
            return Err(inconsistent(task, why));
        }
        let meta = BodyMeta {
            task,
            seq: found,
            schema_version: row.col::<i32>(at + 2)? as u32,
            snapshot,
            at: At::Postgres,
        };
        created_at_ms = row.col::<i64>(at + 4)? as u64;
        rules::decode_body::<S>(&meta, row.col(at + 3)?)?.fold_into(&mut state);
    }
    Ok((state, created_at_ms))
}

/// The task's row and its latest state with that checkpoint's `created_at_ms`, in one
/// statement (`LATEST_SQL`); `None` if the task has no row, the default state (and 0) if
/// it has no checkpoint.
pub(super) async fn latest<S: State>(c: &Conn, task: &str) -> Attempt<Option<(TaskRow, S, u64)>> {
    let rows = statements::query_hot(c, LATEST_SQL, &[(&task.as_bytes(), Type::BYTEA)]).await?;
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let row = TaskRow::from_row(first)?;
    if row.latest_seq == 0 {
        return Ok(Some((row, S::default(), 0)));
    }
    debug_assert_eq!(first.len(), TASK_COLUMN_COUNT + 5, "LATEST_SQL's columns");
    // The join's one row of nulls: no checkpoint row (`fold_rows` says so).
    let none = first.col::<Option<i64>>(TASK_COLUMN_COUNT)?.is_none();
    let fold = if none { &rows[..0] } else { &rows[..] };
    let (state, created_at_ms) = fold_rows::<S>(task, row.latest_seq, fold, TASK_COLUMN_COUNT)?;
    Ok(Some((row, state, created_at_ms)))
}

/// The task ids of `rows` (column 0), sorted by bytes as the local store sorts them.
fn sorted_ids(rows: &[Row]) -> Attempt<Vec<String>> {
    let mut ids = rows
        .iter()
        .map(|r| utf8("task id", r.col(0)?))
        .collect::<Attempt<Vec<String>>>()?;
    ids.sort_unstable();
    Ok(ids)
}

/// Starts a read-only transaction that sees one snapshot of the database.
async fn read_tx(c: &mut Client) -> Attempt<tokio_postgres::Transaction<'_>> {
    Ok(c.build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?)
}

impl<S: State> PgStore<S> {
    /// The task's newest checkpoint, or `None` if it has none (see
    /// [`Store::load_latest`](crate::Store::load_latest)).
    pub fn load_latest(&self, task: &str) -> Result<Option<Checkpoint<S>>> {
        self.shared.block_on(self.load_latest_async(task))
    }

    /// [`load_latest`](Self::load_latest), as a future.
    pub(super) async fn load_latest_async(&self, task: &str) -> Result<Option<Checkpoint<S>>> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        self.shared
            .run_read_async(
                "loading a checkpoint",
                attempt!(|c| {
                    let Some((row, state, created_at_ms)) = latest::<S>(c, task).await? else {
                        return Ok(None);
                    };
                    // What a commit after this load decides on (a hint: checked by the commit).
                    self.shared.hints.put(task, Hint::from(&row));
                    if row.latest_seq == 0 {
                        return Ok(None);
                    }
                    Ok(Some(checkpoint(task, row.latest_seq, created_at_ms, state)))
                }),
            )
            .await
    }

    /// The task's state exactly as of checkpoint `seq` (see
    /// [`Store::load`](crate::Store::load)).
    pub fn load(&self, task: &str, seq: u64) -> Result<Option<Checkpoint<S>>> {
        self.shared.block_on(self.load_async(task, seq))
    }

    /// [`load`](Self::load), as a future.
    pub(super) async fn load_async(&self, task: &str, seq: u64) -> Result<Option<Checkpoint<S>>> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        let options = &self.shared.options;
        self.shared
            .run_read_async(
                "loading a checkpoint",
                attempt!(|c| {
                    let tx = read_tx(c).await?;
                    let Some(row) = task_row(&tx, task).await? else {
                        return Ok(None);
                    };
                    if seq == 0 || seq > row.latest_seq {
                        return Err(Fail::Api(Error::UnknownSeq {
                            task: task.to_string(),
                            seq,
                            latest: row.latest_seq,
                        }));
                    }
                    if seq < retained_from(&tx, task, &row, options).await? {
                        return Ok(None);
                    }
                    let (state, created_at_ms) = fold::<S>(&tx, task, seq).await?;
                    tx.commit().await?;
                    Ok(Some(checkpoint(task, seq, created_at_ms, state)))
                }),
            )
            .await
    }

    /// The newest retained checkpoint whose state passes `accept` (see
    /// [`Store::load_latest_matching`](crate::Store::load_latest_matching)).
    pub fn load_latest_matching(
        &self,
        task: &str,
        accept: impl Fn(&S) -> bool,
    ) -> Result<Option<Checkpoint<S>>> {
        self.shared
            .block_on(self.load_latest_matching_async(task, accept))
    }

    /// [`load_latest_matching`](Self::load_latest_matching), as a future.
    pub(super) async fn load_latest_matching_async(
        &self,
        task: &str,
        accept: impl Fn(&S) -> bool,
    ) -> Result<Option<Checkpoint<S>>> {
        for info in self.list_checkpoints_async(task).await?.iter().rev() {
            if let Some(cp) = self.load_async(task, info.seq).await?
                && accept(&cp.state)
            {
                return Ok(Some(cp));
            }
        }
        Ok(None)
    }

    /// The task's retained checkpoints, oldest first (see
    /// [`Store::list_checkpoints`](crate::Store::list_checkpoints)). `bytes` is the
    /// stored body's size.
    pub fn list_checkpoints(&self, task: &str) -> Result<Vec<CheckpointInfo>> {
        self.shared.block_on(self.list_checkpoints_async(task))
    }

    /// [`list_checkpoints`](Self::list_checkpoints), as a future.
    pub(super) async fn list_checkpoints_async(&self, task: &str) -> Result<Vec<CheckpointInfo>> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        let options = &self.shared.options;
        self.shared.run_read_async("listing checkpoints", attempt!(|c| {
            let tx = read_tx(c).await?;
            let Some(row) = task_row(&tx, task).await? else {
                return Ok(Vec::new());
            };
            if row.latest_seq == 0 {
                return Ok(Vec::new());
            }
            let from = retained_from(&tx, task, &row, options).await?;
            let rows = tx
                .query(
                    "SELECT seq, created_at_ms, octet_length(body), snapshot, origin_task, origin_seq
                     FROM checkpoints WHERE task = $1 AND seq >= $2 ORDER BY seq",
                    &[&task.as_bytes(), &(from as i64)],
                )
                .await?;
            tx.commit().await?;
            rows.iter().map(checkpoint_info).collect()
        }))
        .await
    }

    /// The task's newest checkpoint's info, without its state: one query (see
    /// [`Store::latest_info`](crate::Store::latest_info)).
    pub fn latest_info(&self, task: &str) -> Result<Option<CheckpointInfo>> {
        self.shared.block_on(self.latest_info_async(task))
    }

    /// [`latest_info`](Self::latest_info), as a future.
    pub(super) async fn latest_info_async(&self, task: &str) -> Result<Option<CheckpointInfo>> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        self.shared
            .run_read_async(
                "reading a task's latest checkpoint",
                attempt!(|c| {
                    let rows = statements::query_hot(
                        c,
                        LATEST_INFO_SQL,
                        &[(&task.as_bytes(), Type::BYTEA)],
                    )
                    .await?;
                    if rows.len() > 1 {
                        let why = format!("{} rows for its latest checkpoint", rows.len());
                        return Err(inconsistent(task, why));
                    }
                    rows.first().map(checkpoint_info).transpose()
                }),
            )
            .await
    }

    /// Ids of all tasks, sorted (see [`Store::tasks`](crate::Store::tasks)).
    pub fn tasks(&self) -> Result<Vec<String>> {
        self.shared.block_on(self.tasks_async())
    }

    /// [`tasks`](Self::tasks), as a future.
    pub(super) async fn tasks_async(&self) -> Result<Vec<String>> {
        self.shared
            .run_read_async(
                "listing tasks",
                attempt!(|c| {
                    let rows = c.query("SELECT task FROM tasks", &[]).await?;
                    sorted_ids(&rows)
                }),
            )
            .await
    }

    /// Ids of the tasks whose id starts with `prefix`, sorted (see
    /// [`Store::tasks_with_prefix`](crate::Store::tasks_with_prefix)): a range of the
    /// `tasks` key, `[prefix, the least bytes after every id it starts)`, so it reads those
    /// tasks only.
    pub fn tasks_with_prefix(&self, prefix: &str) -> Result<Vec<String>> {
        self.shared.block_on(self.tasks_with_prefix_async(prefix))
    }

    /// [`tasks_with_prefix`](Self::tasks_with_prefix), as a future.
    pub(super) async fn tasks_with_prefix_async(&self, prefix: &str) -> Result<Vec<String>> {
        // Every id starting with `prefix` sorts below this, every other id at or above
        // the prefix sorts at or above it. A UTF-8 prefix never ends in 0xFF, so the last
        // byte can always be raised; an empty prefix has no bound: every task.
        let Some((last, head)) = prefix.as_bytes().split_last() else {
            return self.tasks_async().await;
        };
        let Some(bumped) = last.checked_add(1) else {
            unreachable!("a str's bytes never end in 0xFF");
        };
        let end = [head, &[bumped]].concat();
        let end = &end;
        self.shared
            .run_read_async(
                "listing tasks",
                attempt!(|c| {
                    let rows = c
                        .query_typed(
                            "SELECT task FROM tasks WHERE task >= $1 AND task < $2",
                            &[(&prefix.as_bytes(), Type::BYTEA), (end, Type::BYTEA)],
                        )
                        .await?;
                    sorted_ids(&rows)
                }),
            )
            .await
    }

    /// The recorded result of a finished call (see
    /// [`Store::call_result`](crate::Store::call_result)).
    pub fn call_result(&self, task: &str, call_id: &str) -> Result<Option<Vec<u8>>> {
        self.shared.block_on(self.call_result_async(task, call_id))
    }

    /// [`call_result`](Self::call_result), as a future.
    pub(super) async fn call_result_async(
        &self,
        task: &str,
        call_id: &str,
    ) -> Result<Option<Vec<u8>>> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        validate_id("call id", call_id, CALL_ID_BYTES_MAX)?;
        self.shared
            .run_read_async(
                "reading a call's result",
                attempt!(|c| {
                    let row = c
                        .query_opt(
                            "SELECT result FROM calls WHERE task = $1 AND call_id = $2",
                            &[&task.as_bytes(), &call_id.as_bytes()],
                        )
                        .await?;
                    match row {
                        Some(r) => r.col::<Option<Vec<u8>>>(0),
                        None => Ok(None),
                    }
                }),
            )
            .await
    }

    /// Calls of the task that began and never finished, in the order they began (see
    /// [`Store::pending_calls`](crate::Store::pending_calls)).
    pub fn pending_calls(&self, task: &str) -> Result<Vec<PendingCall>> {
        self.shared.block_on(self.pending_calls_async(task))
    }

    /// [`pending_calls`](Self::pending_calls), as a future.
    pub(super) async fn pending_calls_async(&self, task: &str) -> Result<Vec<PendingCall>> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        self.shared
            .run_read_async(
                "listing pending calls",
                attempt!(|c| {
                    let rows = c
                        .query(
                            "SELECT call_id, tool, args FROM calls
                     WHERE task = $1 AND result IS NULL ORDER BY begun",
                            &[&task.as_bytes()],
                        )
                        .await?;
                    rows.iter()
                        .map(|r| {
                            Ok(PendingCall {
                                call_id: utf8("call id", r.col(0)?)?,
                                tool: utf8("tool name", r.col(1)?)?,
                                args: r.col(2)?,
                            })
                        })
                        .collect()
                }),
            )
            .await
    }
}

fn checkpoint<S>(task: &str, seq: u64, created_at_ms: u64, state: S) -> Checkpoint<S> {
    Checkpoint {
        task: task.to_string(),
        seq,
        created_at_ms,
        state: Arc::new(state),
    }
}

fn checkpoint_info(r: &Row) -> Attempt<CheckpointInfo> {
    let seq = r.col::<i64>(0)? as u64;
    let origin_task: Option<Vec<u8>> = r.col(4)?;
    let origin_seq: Option<i64> = r.col(5)?;
    let forked_from = match (seq, origin_task, origin_seq) {
        (1, Some(t), Some(s)) => Some((utf8("origin task id", t)?, s as u64)),
        _ => None,
    };
    Ok(CheckpointInfo {
        seq,
        created_at_ms: r.col::<i64>(1)? as u64,
        bytes: r.col::<i32>(2)? as u64,
        snapshot: r.col(3)?,
        forked_from,
    })
}

/// An id stored as bytes, as the `String` it was written from.
pub(super) fn utf8(what: &str, bytes: Vec<u8>) -> Attempt<String> {
    String::from_utf8(bytes).map_err(|e| {
        Fail::Api(Error::Postgres {
            context: format!("reading a {what}"),
            message: format!("a stored {what} is not UTF-8: {e}"),
        })
    })
}
