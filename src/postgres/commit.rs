//! Commits on PostgreSQL in two round trips (docs/postgres.md §2): the first sends `BEGIN`,
//! the fence check and the task row's lock together; the second the write id, the
//! checkpoint, the task row's update, retention and `COMMIT` together. tokio-postgres
//! sends a statement when its future is first polled and `try_join!` polls in the order
//! written, so the statements reach the server in that order, in one transaction, with no
//! wait between them; if one fails, the server refuses the rest and `COMMIT` rolls back.

use tokio_postgres::types::Type;

use super::PgStore;
use super::conn::{Attempt, Conn, Fail};
use super::load::{LOCK_TASK_SQL, TaskRow, fold};
use super::protocol::{
    FENCE_SQL, FENCE_TYPES, RECORD_WRITE_SQL, RECORD_WRITE_TYPES, fence_row, judge_fence,
    record_write,
};
use super::statements;
use super::writes::{
    INSERT_CHECKPOINT_SQL, INSERT_CHECKPOINT_TYPES, NewCheckpoint, UPDATE_TASK_SQL,
    UPDATE_TASK_TYPES, create_task, insert_row, lock_task, update_task,
};
use crate::error::{Error, Result};
use crate::state::State;
use crate::store::codec;
use crate::store::policy::snapshot_due;
use crate::store::{TASK_ID_BYTES_MAX, now_ms, validate_id};

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

/// What a commit attempt needs besides the connection and its write id.
struct Attempted<'a> {
    task: &'a str,
    epoch: Option<u64>,
    expected: Option<u64>,
    delta: &'a [u8],
    prepared: Option<&'a Prepared>,
    version: u32,
    snapshot_every: u32,
    keep: Option<u32>,
    max_age: Option<std::time::Duration>,
}

/// Retention's statement (see [`prune`]): task, keep-count bound, age cutoff, latest seq.
const PRUNE_SQL: &str = "DELETE FROM checkpoints WHERE task = $1 AND seq < (
     SELECT max(seq) FROM checkpoints WHERE task = $1 AND snapshot AND seq <= greatest(
         $2::bigint,
         CASE WHEN $3::bigint IS NULL THEN 0 ELSE coalesce(
             (SELECT min(seq) FROM checkpoints
              WHERE task = $1 AND created_at_ms >= $3::bigint), $4::bigint) END))";

/// The statements of a commit, prepared once per connection (`statements.rs`).
const COMMIT_STATEMENTS: &[(&str, &[Type])] = &[
    (FENCE_SQL, FENCE_TYPES),
    (LOCK_TASK_SQL, &[Type::BYTEA]),
    (RECORD_WRITE_SQL, RECORD_WRITE_TYPES),
    (INSERT_CHECKPOINT_SQL, INSERT_CHECKPOINT_TYPES),
    (UPDATE_TASK_SQL, UPDATE_TASK_TYPES),
    (
        PRUNE_SQL,
        &[Type::BYTEA, Type::INT8, Type::INT8, Type::INT8],
    ),
];

/// Retention: deletes the task's checkpoints below the newest snapshot at or before the
/// oldest retained seq (the fold base every retained checkpoint needs stays). The oldest
/// retained seq is the later of the keep-count bound and, with `max_age` (`cutoff_ms`),
/// the first checkpoint created at or after the cutoff (the latest if none is): one
/// statement either way.
async fn prune(
    c: &Conn,
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
    statements::query(
        c,
        PRUNE_SQL,
        &[
            (&task.as_bytes(), Type::BYTEA),
            (&by_count, Type::INT8),
            (&cutoff, Type::INT8),
            (&(latest as i64), Type::INT8),
        ],
    )
    .await?;
    Ok(())
}

/// One attempt at a commit, on a connection that has prepared the commit's statements
/// (the first commit on a connection prepares them, before its transaction). Whatever does
/// not end in a commit is rolled back before the connection can go back to the pool (on a
/// broken connection the `ROLLBACK` fails too, and the connection is dropped).
async fn commit_attempt(c: &mut Conn, id: &str, a: &Attempted<'_>) -> Attempt<Committed> {
    c.prepare_cached(COMMIT_STATEMENTS).await?;
    let out = commit_pipelined(c, id, a).await;
    if !matches!(out, Ok(Committed::Seq(_))) {
        let _ = c.batch_execute("ROLLBACK").await;
    }
    out
}

/// The attempt's transaction: two pipelined groups of statements (the module's doc), with
/// the checks and the snapshot decision between them.
async fn commit_pipelined(c: &Conn, id: &str, a: &Attempted<'_>) -> Attempt<Committed> {
    let task = a.task;
    let (_, fence, locked) = tokio::try_join!(
        async { Ok::<_, Fail>(c.batch_execute("BEGIN").await?) },
        fence_row(c, task),
        lock_task(c, task),
    )?;
    judge_fence(task, fence, a.epoch)?;
    let row: TaskRow = match locked {
        Some(row) => row,
        None => create_task(c, task).await?,
    };
    let latest = row.latest_seq;
    if let Some(expected) = a.expected
        && expected != latest
    {
        return Err(Fail::Api(Error::Conflict {
            task: task.to_string(),
            expected,
            actual: latest,
        }));
    }
    // A history written under another schema version is rebuilt (through the migration
    // hooks, refusing the commit if it cannot be read) and snapshotted first (docs/store.md §6).
    let due = snapshot_due(row.counters, a.delta.len() as u64, a.snapshot_every)
        || row.foreign_schema(a.version);
    let body = match (due, a.prepared) {
        (false, _) => None,
        (true, Some(p)) if p.base == latest => Some(p.bytes.as_slice()),
        // Another writer moved the task since the snapshot was prepared: the delta goes in
        // and the snapshot stays due for the next commit.
        (true, Some(_)) => None,
        (true, None) => return Ok(Committed::NeedsSnapshot { latest }),
    };
    let seq = latest + 1;
    let cp = NewCheckpoint {
        seq,
        // Never earlier than the previous checkpoint, as in the local store.
        created_at_ms: now_ms().max(row.latest_created_at_ms),
        schema_version: a.version,
        snapshot: body.is_some(),
        body: body.unwrap_or(a.delta),
        origin: None,
    };
    let cutoff_ms = a.max_age.map(|age| {
        let age = age.as_millis().min(u128::from(u64::MAX)) as u64;
        now_ms().saturating_sub(age)
    });
    tokio::try_join!(
        record_write(c, id, task, Some(seq)),
        insert_row(c, id, task, &cp),
        update_task(c, task, &row, &cp),
        prune(c, task, seq, a.keep, cutoff_ms),
        async { Ok::<_, Fail>(c.batch_execute("COMMIT").await?) },
    )?;
    Ok(Committed::Seq(seq))
}

impl<S: State> PgStore<S> {
    /// Commits `delta` as the task's next checkpoint and returns its seq (see
    /// [`Store::commit`](crate::Store::commit)). Durable when it returns, as far as the
    /// server's `synchronous_commit` promises (docs/postgres.md §5).
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
                    let attempted = Attempted {
                        task,
                        epoch,
                        expected,
                        delta: &delta_bytes,
                        prepared: prepared.as_ref(),
                        version: S::VERSION,
                        snapshot_every: o.snapshot_every,
                        keep: o.keep_checkpoints,
                        max_age: o.max_age,
                    };
                    commit_attempt(c, id, &attempted).await
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
                    Ok(fold::<S>(&**c, task, base).await?.0)
                })?,
        };
        state.apply(delta);
        Ok(Prepared {
            base,
            bytes: codec::encode(&state)?,
        })
    }
}
