//! The writes but commits (`commit.rs`): fork, delete and the tool-call journal, each one
//! transaction that checks the fence first, locks the task's row, and records its write id
//! (docs/postgres.md §2); and the statements commits share with them.

use tokio_postgres::types::Type;
use tokio_postgres::{Client, Transaction};

use super::PgStore;
use super::conn::{Attempt, Fail, RowExt, attempt};
use super::load::{LOCK_TASK_SQL, TaskRow, task_row};
use super::protocol::{check_fence, record_write};
use super::statements::{self, Session};
use crate::error::{Error, Result};
use crate::rules::journal::{self, Known, Step};
use crate::state::State;
use crate::store::codec;
use crate::store::policy::SnapshotCounters;
use crate::store::{TASK_ID_BYTES_MAX, now_ms, validate_id};

/// Locks the task's row for the rest of the transaction; `None` if the task does not exist.
pub(super) async fn lock_task(c: &impl Session, task: &str) -> Attempt<Option<TaskRow>> {
    let row = statements::query_opt(c, LOCK_TASK_SQL, &[(&task.as_bytes(), Type::BYTEA)]).await?;
    row.as_ref().map(TaskRow::from_row).transpose()
}

/// Locks the task's row for the rest of the transaction, creating it (empty) first if it
/// does not exist (a rollback removes it again).
pub(super) async fn lock_or_create_task(c: &impl Session, task: &str) -> Attempt<TaskRow> {
    match lock_task(c, task).await? {
        Some(row) => Ok(row),
        None => create_task(c, task).await,
    }
}

/// Creates the task's row (empty) inside the open transaction and locks it. A concurrent
/// creator's row wins the insert; the select then waits for it and locks it.
pub(super) async fn create_task(c: &impl Session, task: &str) -> Attempt<TaskRow> {
    statements::query(
        c,
        "INSERT INTO tasks (task, latest_seq, latest_created_at_ms, snapshot_bytes,
             deltas_since_snapshot, delta_bytes_since_snapshot, versions_since_snapshot)
         VALUES ($1, 0, 0, 0, 0, 0, '{}') ON CONFLICT (task) DO NOTHING",
        &[(&task.as_bytes(), Type::BYTEA)],
    )
    .await?;
    match lock_task(c, task).await? {
        Some(row) => Ok(row),
        None => Err(super::load::inconsistent(
            task,
            "its row vanished between its insert and its lock".into(),
        )),
    }
}

/// Inserts a checkpoint's row: task, seq, created_at_ms, schema_version, snapshot, body,
/// origin_task, origin_seq, write_id.
pub(super) const INSERT_CHECKPOINT_SQL: &str = "INSERT INTO checkpoints (task, seq,
     created_at_ms, schema_version, snapshot, body, origin_task, origin_seq, write_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";
/// Moves a task's row to its new latest checkpoint: task, then seq, time, counters and
/// schema versions.
pub(super) const UPDATE_TASK_SQL: &str = "UPDATE tasks SET latest_seq = $2,
     latest_created_at_ms = $3, snapshot_bytes = $4, deltas_since_snapshot = $5,
     delta_bytes_since_snapshot = $6, versions_since_snapshot = $7 WHERE task = $1";

/// The columns one new checkpoint sets.
pub(super) struct NewCheckpoint<'a> {
    pub seq: u64,
    pub created_at_ms: u64,
    pub schema_version: u32,
    pub snapshot: bool,
    pub body: &'a [u8],
    pub origin: Option<(&'a str, u64)>,
}

/// Inserts the checkpoint and moves the task's row to it (seq and snapshot counters).
async fn insert_checkpoint(
    tx: &Transaction<'_>,
    id: &str,
    task: &str,
    before: &TaskRow,
    cp: &NewCheckpoint<'_>,
) -> Attempt<()> {
    insert_row(tx, id, task, cp).await?;
    update_task(tx, task, before, cp).await
}

/// Inserts the checkpoint's row: one statement.
pub(super) async fn insert_row(
    c: &impl Session,
    id: &str,
    task: &str,
    cp: &NewCheckpoint<'_>,
) -> Attempt<()> {
    let (origin_task, origin_seq) = match cp.origin {
        Some((t, s)) => (Some(t.as_bytes()), Some(s as i64)),
        None => (None, None),
    };
    statements::query(
        c,
        INSERT_CHECKPOINT_SQL,
        &[
            (&task.as_bytes(), Type::BYTEA),
            (&(cp.seq as i64), Type::INT8),
            (&(cp.created_at_ms as i64), Type::INT8),
            (&(cp.schema_version as i32), Type::INT4),
            (&cp.snapshot, Type::BOOL),
            (&cp.body, Type::BYTEA),
            (&origin_task, Type::BYTEA),
            (&origin_seq, Type::INT8),
            (&id, Type::TEXT),
        ],
    )
    .await?;
    Ok(())
}

/// A task row's snapshot counters and schema versions after checkpoint `cp`, from
/// `counters` and `versions` before it: a snapshot starts them again, a delta adds to them.
pub(super) fn advance(
    counters: SnapshotCounters,
    versions: &[i32],
    cp: &NewCheckpoint<'_>,
) -> (SnapshotCounters, Vec<i32>) {
    let version = cp.schema_version as i32;
    match cp.snapshot {
        true => {
            let counters = SnapshotCounters {
                snapshot_bytes: cp.body.len() as u64,
                ..SnapshotCounters::default()
            };
            (counters, vec![version])
        }
        false => {
            let counters = SnapshotCounters {
                deltas_since_snapshot: counters.deltas_since_snapshot + 1,
                delta_bytes_since_snapshot: counters.delta_bytes_since_snapshot
                    + cp.body.len() as u64,
                ..counters
            };
            let mut versions = versions.to_vec();
            if !versions.contains(&version) {
                versions.push(version);
            }
            (counters, versions)
        }
    }
}

/// Moves the task's row (`before`) to checkpoint `cp`: its seq, time, snapshot counters
/// and schema versions. One statement.
pub(super) async fn update_task(
    c: &impl Session,
    task: &str,
    before: &TaskRow,
    cp: &NewCheckpoint<'_>,
) -> Attempt<()> {
    let (after, versions) = advance(before.counters, &before.versions, cp);
    statements::query(
        c,
        UPDATE_TASK_SQL,
        &[
            (&task.as_bytes(), Type::BYTEA),
            (&(cp.seq as i64), Type::INT8),
            (&(cp.created_at_ms as i64), Type::INT8),
            (&(after.snapshot_bytes as i64), Type::INT8),
            (&(after.deltas_since_snapshot as i32), Type::INT4),
            (&(after.delta_bytes_since_snapshot as i64), Type::INT8),
            (&versions, Type::INT4_ARRAY),
        ],
    )
    .await?;
    Ok(())
}

/// What a write needs of its task's row.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TaskRowNeed {
    /// Create it (empty) if the task does not exist.
    Create,
    /// The task must exist: otherwise the write fails with `unknown_task`.
    Existing,
}

/// Opens a write's transaction on `c`, as every write but a commit starts (docs/postgres.md
/// §2): checks the task's fence, then locks its row, created or required as `need` says.
async fn open_write<'c>(
    c: &'c mut Client,
    task: &str,
    epoch: Option<u64>,
    need: TaskRowNeed,
) -> Attempt<(Transaction<'c>, TaskRow)> {
    let tx = c.transaction().await?;
    check_fence(&tx, task, epoch).await?;
    let row = match need {
        TaskRowNeed::Create => lock_or_create_task(&tx, task).await?,
        TaskRowNeed::Existing => match lock_task(&tx, task).await? {
            Some(row) => row,
            None => return Err(Fail::Api(journal::unknown_task(task))),
        },
    };
    Ok((tx, row))
}

/// Ends a write's transaction: records its write id (with the seq of the checkpoint it
/// made, if any) and commits.
async fn close_write(tx: Transaction<'_>, id: &str, task: &str, seq: Option<u64>) -> Attempt<()> {
    record_write(&tx, id, task, seq).await?;
    tx.commit().await?;
    Ok(())
}

impl<S: State> PgStore<S> {
    /// Starts `new_task` from `task`'s state at `seq` (see
    /// [`Store::fork`](crate::Store::fork)).
    pub fn fork(&self, task: &str, seq: u64, new_task: &str) -> Result<u64> {
        self.shared.block_on(self.fork_async(task, seq, new_task))
    }

    /// [`fork`](Self::fork), as a future: the load of the source and the write, each
    /// within its own deadline, as the blocking call does them.
    pub(super) async fn fork_async(&self, task: &str, seq: u64, new_task: &str) -> Result<u64> {
        validate_id("task id", new_task, TASK_ID_BYTES_MAX)?;
        let Some(source) = self.load_async(task, seq).await? else {
            let exists = self
                .shared
                .run_read_async(
                    "forking a task",
                    attempt!(|c| {
                        Ok(task_row(&**c, task)
                            .await?
                            .is_some_and(|r| r.latest_seq > 0))
                    }),
                )
                .await?;
            return Err(journal::fork_source_gone(task, seq, exists));
        };
        let bytes = codec::encode(&*source.state)?;
        let body = bytes.as_slice();
        let epoch = self.epoch_for(new_task);
        self.shared
            .run_write_async(
                "forking a task",
                new_task,
                |_| 1,
                attempt!(|c, id| {
                    let (tx, row) = open_write(c, new_task, epoch, TaskRowNeed::Create).await?;
                    if row.latest_seq != 0 {
                        return Err(Fail::Api(Error::TaskExists {
                            task: new_task.to_string(),
                        }));
                    }
                    let cp = NewCheckpoint {
                        seq: 1,
                        created_at_ms: now_ms(),
                        schema_version: S::VERSION,
                        snapshot: true,
                        body,
                        origin: Some((task, seq)),
                    };
                    insert_checkpoint(&tx, id, new_task, &row, &cp).await?;
                    close_write(tx, id, new_task, Some(1)).await?;
                    Ok(1)
                }),
            )
            .await
    }

    /// Deletes a task: its checkpoints and tool calls (see
    /// [`Store::delete_task`](crate::Store::delete_task)). Its lease, if any, stays.
    pub fn delete_task(&self, task: &str) -> Result<()> {
        self.shared.block_on(self.delete_task_async(task))
    }

    /// [`delete_task`](Self::delete_task), as a future.
    pub(super) async fn delete_task_async(&self, task: &str) -> Result<()> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        let epoch = self.epoch_for(task);
        self.shared.hints.forget(task);
        self.shared
            .run_write_async(
                "deleting a task",
                task,
                |_| (),
                attempt!(|c, id| {
                    let (tx, _) = open_write(c, task, epoch, TaskRowNeed::Existing).await?;
                    for table in ["checkpoints", "calls", "tasks"] {
                        let sql = format!("DELETE FROM {table} WHERE task = $1");
                        tx.execute(&sql, &[&task.as_bytes()]).await?;
                    }
                    close_write(tx, id, task, None).await
                }),
            )
            .await
    }

    /// Durably records that `call_id` of `tool` with `args` is about to run (see
    /// [`Store::begin_call`](crate::Store::begin_call)).
    pub fn begin_call(&self, task: &str, call_id: &str, tool: &str, args: &[u8]) -> Result<()> {
        self.shared
            .block_on(self.begin_call_async(task, call_id, tool, args))
    }

    /// [`begin_call`](Self::begin_call), as a future.
    pub(super) async fn begin_call_async(
        &self,
        task: &str,
        call_id: &str,
        tool: &str,
        args: &[u8],
    ) -> Result<()> {
        journal::check_begin_args(task, call_id, tool)?;
        let epoch = self.epoch_for(task);
        self.shared
            .run_write_async(
                "beginning a tool call",
                task,
                |_| (),
                attempt!(|c, id| {
                    let (tx, _) = open_write(c, task, epoch, TaskRowNeed::Create).await?;
                    let existing = tx
                        .query_opt(
                            "SELECT tool, args, result IS NOT NULL FROM calls
                         WHERE task = $1 AND call_id = $2",
                            &[&task.as_bytes(), &call_id.as_bytes()],
                        )
                        .await?;
                    let known = match &existing {
                        None => Known::Unknown,
                        Some(row) if row.col::<bool>(2)? => Known::Finished(()),
                        Some(row) => Known::Pending((row.col::<&[u8]>(0)?, row.col::<&[u8]>(1)?)),
                    };
                    let step = journal::begin(task, call_id, known, |(begun_tool, begun_args)| {
                        Ok(begun_tool == tool.as_bytes() && begun_args == args)
                    })?;
                    if step == Step::Write {
                        tx.execute(
                            "INSERT INTO calls (task, call_id, tool, args, created_at_ms)
                         VALUES ($1, $2, $3, $4, $5)",
                            &[
                                &task.as_bytes(),
                                &call_id.as_bytes(),
                                &tool.as_bytes(),
                                &args,
                                &(now_ms() as i64),
                            ],
                        )
                        .await?;
                    }
                    close_write(tx, id, task, None).await
                }),
            )
            .await
    }

    /// Durably records the result of a begun call (see
    /// [`Store::finish_call`](crate::Store::finish_call)).
    pub fn finish_call(&self, task: &str, call_id: &str, result: &[u8]) -> Result<()> {
        self.shared
            .block_on(self.finish_call_async(task, call_id, result))
    }

    /// [`finish_call`](Self::finish_call), as a future.
    pub(super) async fn finish_call_async(
        &self,
        task: &str,
        call_id: &str,
        result: &[u8],
    ) -> Result<()> {
        journal::check_call_args(task, call_id)?;
        let epoch = self.epoch_for(task);
        self.shared
            .run_write_async(
                "finishing a tool call",
                task,
                |_| (),
                attempt!(|c, id| {
                    let (tx, _) = open_write(c, task, epoch, TaskRowNeed::Existing).await?;
                    let existing = tx
                        .query_opt(
                            "SELECT result FROM calls WHERE task = $1 AND call_id = $2",
                            &[&task.as_bytes(), &call_id.as_bytes()],
                        )
                        .await?;
                    let known = match &existing {
                        None => Known::Unknown,
                        Some(row) => match row.col::<Option<&[u8]>>(0)? {
                            Some(previous) => Known::Finished(previous),
                            None => Known::Pending(()),
                        },
                    };
                    let step = journal::finish(task, call_id, known, result, Ok)?;
                    if step == Step::Write {
                        tx.execute(
                            "UPDATE calls SET result = $3 WHERE task = $1 AND call_id = $2",
                            &[&task.as_bytes(), &call_id.as_bytes(), &result],
                        )
                        .await?;
                    }
                    close_write(tx, id, task, None).await
                }),
            )
            .await
    }
}
