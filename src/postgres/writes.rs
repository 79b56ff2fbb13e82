//! The writes: commit, commit_if, fork, delete and the tool-call journal, each one
//! transaction that checks the fence first, locks the task's row, and records its write id
//! (DESIGN.md §7.13.2).

use tokio_postgres::types::Type;
use tokio_postgres::{Client, Transaction};

use super::PgStore;
use super::conn::{Attempt, Fail, RowExt};
use super::load::{TASK_COLUMNS, TaskRow, fold, task_row};
use super::write::{check_fence, record_write};
use crate::error::{Error, Result};
use crate::state::State;
use crate::store::codec;
use crate::store::policy::{SnapshotCounters, snapshot_due};
use crate::store::{
    CALL_ID_BYTES_MAX, TASK_ID_BYTES_MAX, TOOL_NAME_BYTES_MAX, now_ms, validate_id,
};

/// How one commit attempt ended.
enum Committed {
    /// At this seq.
    Seq(u64),
    /// Rolled back: a snapshot is due after `latest` and none was prepared for it.
    NeedsSnapshot { latest: u64 },
}

/// A snapshot encoded before the transaction: the state after the delta, on top of `base`.
struct Prepared {
    base: u64,
    bytes: Vec<u8>,
}

/// Locks the task's row for the rest of the transaction; `None` if the task does not exist.
async fn lock_task(tx: &Transaction<'_>, task: &str) -> Attempt<Option<TaskRow>> {
    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks t WHERE task = $1 FOR UPDATE");
    let row = tx
        .query_typed_opt(&sql, &[(&task.as_bytes(), Type::BYTEA)])
        .await?;
    row.as_ref().map(TaskRow::from_row).transpose()
}

/// Locks the task's row for the rest of the transaction, creating it (empty) first if it
/// does not exist (a rollback removes it again).
async fn lock_or_create_task(tx: &Transaction<'_>, task: &str) -> Attempt<TaskRow> {
    if let Some(row) = lock_task(tx, task).await? {
        return Ok(row);
    }
    // A concurrent creator's row wins the insert; the select then waits for it and locks it.
    tx.query_typed(
        "INSERT INTO tasks (task, latest_seq, latest_created_at_ms, snapshot_bytes,
             deltas_since_snapshot, delta_bytes_since_snapshot, versions_since_snapshot)
         VALUES ($1, 0, 0, 0, 0, 0, '{}') ON CONFLICT (task) DO NOTHING",
        &[(&task.as_bytes(), Type::BYTEA)],
    )
    .await?;
    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks t WHERE task = $1 FOR UPDATE");
    let row = tx
        .query_typed_one(&sql, &[(&task.as_bytes(), Type::BYTEA)])
        .await?;
    TaskRow::from_row(&row)
}

/// The columns one new checkpoint sets.
struct NewCheckpoint<'a> {
    seq: u64,
    created_at_ms: u64,
    schema_version: u32,
    snapshot: bool,
    body: &'a [u8],
    origin: Option<(&'a str, u64)>,
}

/// Inserts the checkpoint and moves the task's row to it (seq and snapshot counters).
async fn insert_checkpoint(
    tx: &Transaction<'_>,
    id: &str,
    task: &str,
    before: &TaskRow,
    cp: &NewCheckpoint<'_>,
) -> Attempt<()> {
    let (origin_task, origin_seq) = match cp.origin {
        Some((t, s)) => (Some(t.as_bytes()), Some(s as i64)),
        None => (None, None),
    };
    tx.query_typed(
        "INSERT INTO checkpoints (task, seq, created_at_ms, schema_version, snapshot, body,
             origin_task, origin_seq, write_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
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
    let version = cp.schema_version as i32;
    let (after, versions) = match cp.snapshot {
        true => {
            let counters = SnapshotCounters {
                snapshot_bytes: cp.body.len() as u64,
                ..SnapshotCounters::default()
            };
            (counters, vec![version])
        }
        false => {
            let c = before.counters;
            let counters = SnapshotCounters {
                deltas_since_snapshot: c.deltas_since_snapshot + 1,
                delta_bytes_since_snapshot: c.delta_bytes_since_snapshot + cp.body.len() as u64,
                ..c
            };
            let mut versions = before.versions.clone();
            if !versions.contains(&version) {
                versions.push(version);
            }
            (counters, versions)
        }
    };
    tx.query_typed(
        "UPDATE tasks SET latest_seq = $2, latest_created_at_ms = $3, snapshot_bytes = $4,
             deltas_since_snapshot = $5, delta_bytes_since_snapshot = $6,
             versions_since_snapshot = $7
         WHERE task = $1",
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

/// Retention: deletes the task's checkpoints below the newest snapshot at or before the
/// oldest retained seq (the fold base every retained checkpoint needs stays). The oldest
/// retained seq is the later of the keep-count bound and, with `max_age` (`cutoff_ms`),
/// the first checkpoint created at or after the cutoff (the latest if none is): one
/// statement either way.
async fn prune(
    tx: &Transaction<'_>,
    task: &str,
    latest: u64,
    keep: Option<u32>,
    cutoff_ms: Option<u64>,
) -> Attempt<()> {
    if keep.is_none() && cutoff_ms.is_none() {
        return Ok(());
    }
    let by_count = keep.map_or(1, |k| (latest + 1).saturating_sub(u64::from(k)).max(1)) as i64;
    let cutoff = cutoff_ms.map(|c| c.min(i64::MAX as u64) as i64);
    tx.execute(
        "DELETE FROM checkpoints WHERE task = $1 AND seq < (
             SELECT max(seq) FROM checkpoints WHERE task = $1 AND snapshot AND seq <= greatest(
                 $2::bigint,
                 CASE WHEN $3::bigint IS NULL THEN 0 ELSE coalesce(
                     (SELECT min(seq) FROM checkpoints
                      WHERE task = $1 AND created_at_ms >= $3::bigint), $4::bigint) END))",
        &[&task.as_bytes(), &by_count, &cutoff, &(latest as i64)],
    )
    .await?;
    Ok(())
}

/// One attempt at a commit, in one transaction.
#[allow(clippy::too_many_arguments)]
async fn commit_attempt(
    c: &mut Client,
    id: &str,
    task: &str,
    epoch: Option<u64>,
    expected: Option<u64>,
    delta: &[u8],
    prepared: Option<&Prepared>,
    version: u32,
    snapshot_every: u32,
    keep: Option<u32>,
    max_age: Option<std::time::Duration>,
) -> Attempt<Committed> {
    let tx = c.transaction().await?;
    check_fence(&tx, task, epoch).await?;
    let row = lock_or_create_task(&tx, task).await?;
    let latest = row.latest_seq;
    if let Some(expected) = expected
        && expected != latest
    {
        return Err(Fail::Api(Error::Conflict {
            task: task.to_string(),
            expected,
            actual: latest,
        }));
    }
    // A history written under another schema version is rebuilt (through the migration
    // hooks, refusing the commit if it cannot be read) and snapshotted first (§7.6).
    let due = snapshot_due(row.counters, delta.len() as u64, snapshot_every)
        || row.foreign_schema(version);
    let body = match (due, prepared) {
        (false, _) => None,
        (true, Some(p)) if p.base == latest => Some(p.bytes.as_slice()),
        // Another writer moved the task since the snapshot was prepared: the delta goes in
        // and the snapshot stays due for the next commit.
        (true, Some(_)) => None,
        (true, None) => return Ok(Committed::NeedsSnapshot { latest }),
    };
    let seq = latest + 1;
    record_write(&tx, id, task, Some(seq)).await?;
    let cp = NewCheckpoint {
        seq,
        // Never earlier than the previous checkpoint, as in the local store.
        created_at_ms: now_ms().max(row.latest_created_at_ms),
        schema_version: version,
        snapshot: body.is_some(),
        body: body.unwrap_or(delta),
        origin: None,
    };
    insert_checkpoint(&tx, id, task, &row, &cp).await?;
    let cutoff_ms = max_age.map(|age| {
        let age = age.as_millis().min(u128::from(u64::MAX)) as u64;
        now_ms().saturating_sub(age)
    });
    prune(&tx, task, seq, keep, cutoff_ms).await?;
    tx.commit().await?;
    Ok(Committed::Seq(seq))
}

impl<S: State> PgStore<S> {
    /// Commits `delta` as the task's next checkpoint and returns its seq (see
    /// [`Store::commit`](crate::Store::commit)). Durable when it returns, as far as the
    /// server's `synchronous_commit` promises (DESIGN.md §7.13.5).
    pub fn commit(&self, task: &str, delta: &S::Delta) -> Result<u64> {
        self.commit_inner(task, None, delta)
    }

    /// Like [`commit`](Self::commit), but only if the task's latest seq is `expected_seq`
    /// (0: the task must not exist); otherwise [`Error::Conflict`].
    pub fn commit_if(&self, task: &str, expected_seq: u64, delta: &S::Delta) -> Result<u64> {
        self.commit_inner(task, Some(expected_seq), delta)
    }

    fn commit_inner(&self, task: &str, expected: Option<u64>, delta: &S::Delta) -> Result<u64> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        // Values are encoded before any transaction begins.
        let delta_bytes = codec::encode(delta)?;
        let epoch = self.epoch_for(task);
        let o = &self.shared.options;
        let mut prepared = None;
        loop {
            let outcome = self.shared.run_write(
                "committing a checkpoint",
                task,
                |seq| Committed::Seq(seq.unwrap_or(0)),
                async |c, id| {
                    commit_attempt(
                        c,
                        id,
                        task,
                        epoch,
                        expected,
                        &delta_bytes,
                        prepared.as_ref(),
                        S::VERSION,
                        o.snapshot_every,
                        o.keep_checkpoints,
                        o.max_age,
                    )
                    .await
                },
            )?;
            match outcome {
                Committed::Seq(seq) => return Ok(seq),
                // Once only: a second attempt with a prepared snapshot never asks again.
                Committed::NeedsSnapshot { latest } => {
                    prepared = Some(self.prepare_snapshot(task, latest, delta)?);
                }
            }
        }
    }

    /// The state after `delta` on top of checkpoint `base`, encoded as a snapshot.
    fn prepare_snapshot(&self, task: &str, base: u64, delta: &S::Delta) -> Result<Prepared> {
        let mut state = match base {
            0 => S::default(),
            _ => self
                .shared
                .run_read("folding a state to snapshot", async |c| {
                    Ok(fold::<S>(&*c, task, base).await?.0)
                })?,
        };
        state.apply(delta);
        Ok(Prepared {
            base,
            bytes: codec::encode(&state)?,
        })
    }

    /// Starts `new_task` from `task`'s state at `seq` (see
    /// [`Store::fork`](crate::Store::fork)).
    pub fn fork(&self, task: &str, seq: u64, new_task: &str) -> Result<u64> {
        validate_id("task id", new_task, TASK_ID_BYTES_MAX)?;
        let Some(source) = self.load(task, seq)? else {
            let exists = self.shared.run_read("forking a task", async |c| {
                Ok(task_row(&*c, task).await?.is_some_and(|r| r.latest_seq > 0))
            })?;
            return Err(match exists {
                false => Error::UnknownTask {
                    task: task.to_string(),
                },
                true => Error::InvalidArgument(format!(
                    "checkpoint {seq} of task {task:?} is no longer retained"
                )),
            });
        };
        let body = codec::encode(&*source.state)?;
        let epoch = self.epoch_for(new_task);
        self.shared.run_write(
            "forking a task",
            new_task,
            |_| 1,
            async |c, id| {
                let tx = c.transaction().await?;
                check_fence(&tx, new_task, epoch).await?;
                let row = lock_or_create_task(&tx, new_task).await?;
                if row.latest_seq != 0 {
                    return Err(Fail::Api(Error::TaskExists {
                        task: new_task.to_string(),
                    }));
                }
                record_write(&tx, id, new_task, Some(1)).await?;
                let cp = NewCheckpoint {
                    seq: 1,
                    created_at_ms: now_ms(),
                    schema_version: S::VERSION,
                    snapshot: true,
                    body: &body,
                    origin: Some((task, seq)),
                };
                insert_checkpoint(&tx, id, new_task, &row, &cp).await?;
                tx.commit().await?;
                Ok(1)
            },
        )
    }

    /// Deletes a task: its checkpoints and tool calls (see
    /// [`Store::delete_task`](crate::Store::delete_task)). Its lease, if any, stays.
    pub fn delete_task(&self, task: &str) -> Result<()> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        let epoch = self.epoch_for(task);
        self.shared.run_write(
            "deleting a task",
            task,
            |_| (),
            async |c, id| {
                let tx = c.transaction().await?;
                check_fence(&tx, task, epoch).await?;
                if lock_task(&tx, task).await?.is_none() {
                    return Err(Fail::Api(Error::UnknownTask {
                        task: task.to_string(),
                    }));
                }
                for table in ["checkpoints", "calls", "tasks"] {
                    let sql = format!("DELETE FROM {table} WHERE task = $1");
                    tx.execute(&sql, &[&task.as_bytes()]).await?;
                }
                record_write(&tx, id, task, None).await?;
                tx.commit().await?;
                Ok(())
            },
        )
    }

    /// Durably records that `call_id` of `tool` with `args` is about to run (see
    /// [`Store::begin_call`](crate::Store::begin_call)).
    pub fn begin_call(&self, task: &str, call_id: &str, tool: &str, args: &[u8]) -> Result<()> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        validate_id("call id", call_id, CALL_ID_BYTES_MAX)?;
        validate_id("tool name", tool, TOOL_NAME_BYTES_MAX)?;
        let epoch = self.epoch_for(task);
        self.shared
            .run_write("beginning a tool call", task, |_| (), async |c, id| {
                let tx = c.transaction().await?;
                check_fence(&tx, task, epoch).await?;
                lock_or_create_task(&tx, task).await?;
                let existing = tx
                    .query_opt(
                        "SELECT tool, args, result IS NOT NULL FROM calls
                         WHERE task = $1 AND call_id = $2",
                        &[&task.as_bytes(), &call_id.as_bytes()],
                    )
                    .await?;
                if let Some(row) = existing {
                    if row.col::<bool>(2)? {
                        return Err(Fail::Api(Error::InvalidArgument(format!(
                            "call {call_id:?} of task {task:?} already finished; read it with call_result"
                        ))));
                    }
                    if row.col::<&[u8]>(0)? != tool.as_bytes() || row.col::<&[u8]>(1)? != args
                    {
                        return Err(Fail::Api(Error::InvalidArgument(format!(
                            "call {call_id:?} of task {task:?} already began with another tool or arguments"
                        ))));
                    }
                } else {
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
                record_write(&tx, id, task, None).await?;
                tx.commit().await?;
                Ok(())
            })
    }

    /// Durably records the result of a begun call (see
    /// [`Store::finish_call`](crate::Store::finish_call)).
    pub fn finish_call(&self, task: &str, call_id: &str, result: &[u8]) -> Result<()> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        validate_id("call id", call_id, CALL_ID_BYTES_MAX)?;
        let epoch = self.epoch_for(task);
        self.shared
            .run_write("finishing a tool call", task, |_| (), async |c, id| {
                let tx = c.transaction().await?;
                check_fence(&tx, task, epoch).await?;
                if lock_task(&tx, task).await?.is_none() {
                    return Err(Fail::Api(Error::UnknownTask {
                        task: task.to_string(),
                    }));
                }
                let existing = tx
                    .query_opt(
                        "SELECT result FROM calls WHERE task = $1 AND call_id = $2",
                        &[&task.as_bytes(), &call_id.as_bytes()],
                    )
                    .await?;
                let Some(row) = existing else {
                    return Err(Fail::Api(Error::InvalidArgument(format!(
                        "call {call_id:?} of task {task:?} was never begun; call begin_call first"
                    ))));
                };
                match row.col::<Option<&[u8]>>(0)? {
                    Some(previous) if previous == result => {}
                    Some(_) => {
                        return Err(Fail::Api(Error::InvalidArgument(format!(
                            "call {call_id:?} of task {task:?} already finished with a different result"
                        ))));
                    }
                    None => {
                        tx.execute(
                            "UPDATE calls SET result = $3 WHERE task = $1 AND call_id = $2",
                            &[&task.as_bytes(), &call_id.as_bytes(), &result],
                        )
                        .await?;
                    }
                }
                record_write(&tx, id, task, None).await?;
                tx.commit().await?;
                Ok(())
            })
    }
}
