//! Commits on PostgreSQL (docs/postgres.md §2): one statement in autocommit, so one round
//! trip and one implicit transaction: the usual case's own statement (`commit_fast.rs`) or
//! a call of the commit function (`commit_fn.rs`), which settles whatever the statement
//! leaves to it. The rules stay here: the client decides delta or snapshot against its hint
//! of the task's row (`hint.rs`) and sends the row it decided for; a call writes only if
//! the row is still that one, and otherwise returns it, and the client decides again. A
//! second round trip comes only when the hint was missing or stale, or the statement
//! leaves the call to the function (a refused fence, a row changed under it).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;
use tokio_postgres::types::Type;

use super::PgStore;
use super::commit_fast;
use super::commit_fn::{self, Answer, CALL_SQL, CALL_TYPES, Call};
use super::conn::{Attempt, Conn, Fail, Shared, attempt};
use super::hint::Hint;
use super::load::latest;
use super::protocol::{check_fence, judge_fence};
use super::writes::{NewCheckpoint, advance};
use crate::error::{Error, Result};
use crate::state::State;
use crate::store::codec;
use crate::store::policy::snapshot_due;
use crate::store::{TASK_ID_BYTES_MAX, now_ms, validate_id};

/// The statements of a commit, prepared once per connection (`statements.rs`).
const COMMIT_STATEMENTS: &[(&str, &[Type])] = &[
    (commit_fast::FAST_SQL, commit_fast::FAST_TYPES),
    (CALL_SQL, CALL_TYPES),
];

/// A snapshot encoded outside any transaction: the state after the delta, on top of the
/// task's row `on` (read with the state it was built from).
struct Prepared {
    on: Hint,
    bytes: Vec<u8>,
}

/// What one commit call carries from one function call to the next.
struct Pending {
    /// The row the next decision is made on.
    hint: Hint,
    prepared: Option<Arc<Prepared>>,
}

/// What a commit needs besides the connection, its write id and the state being built.
struct Attempted<'a, S: State> {
    task: &'a str,
    epoch: Option<u64>,
    expected: Option<u64>,
    delta: &'a S::Delta,
    delta_bytes: &'a [u8],
    snapshot_every: u32,
    keep: Option<u32>,
    max_age: Option<std::time::Duration>,
}

/// The next step of a commit, decided on the row `Pending::hint`.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Call the function with a delta (`false`) or the prepared snapshot (`true`).
    Write { snapshot: bool },
    /// A snapshot is due and none is prepared: read the task's row and latest state, and
    /// prepare it on them.
    Prepare,
}

/// The snapshot policy (the local store's, `snapshot_due`) on the row `p.hint`. A history
/// written under another schema version is rebuilt (through the migration hooks, refusing
/// the commit if it cannot be read) and snapshotted first (docs/store.md §6). A snapshot is
/// prepared on a row read with the state (which becomes the hint), never on a hint alone (a
/// handle without one has the row of a task that does not exist), and written only on that
/// very row (its seq, counters, versions and time: a task deleted and written again up to
/// the same seq is another row). If the task moved on since, the delta is written and the
/// snapshot stays due for the next commit (a delta is always correct, a snapshot is an
/// optimization), unless a record of another version came in: then it is prepared again.
fn decide(p: &Pending, delta_len: u64, version: u32, snapshot_every: u32) -> Step {
    let foreign = p.hint.foreign_schema(version);
    let due = snapshot_due(p.hint.counters, delta_len, snapshot_every) || foreign;
    match (due, &p.prepared) {
        (false, _) => Step::Write { snapshot: false },
        (true, Some(prepared)) if prepared.on == p.hint => Step::Write { snapshot: true },
        // A record of another version came in since the read: never a delta on top of
        // it (the rule of docs/store.md §6), so read again (which refuses what it
        // cannot fold).
        (true, Some(_)) if foreign => Step::Prepare,
        (true, Some(_)) => Step::Write { snapshot: false },
        (true, None) => Step::Prepare,
    }
}

impl<S: State> Attempted<'_, S> {
    /// Retention for a commit at `seq`: the keep-count bound and the age cutoff (`None`
    /// without retention), as the function's prune takes them.
    fn prune(&self, seq: u64) -> Option<(u64, Option<u64>)> {
        if self.keep.is_none() && self.max_age.is_none() {
            return None;
        }
        let by_count = self
            .keep
            .map_or(1, |k| (seq + 1).saturating_sub(u64::from(k)).max(1));
        let cutoff = self.max_age.map(|age| {
            let age = age.as_millis().min(u128::from(u64::MAX)) as u64;
            now_ms().saturating_sub(age)
        });
        Some((by_count, cutoff))
    }
}

/// One attempt at a commit (one write id): calls (`call`) until one commits or refuses.
/// A stale answer wrote nothing, so the next call may use the same write id.
async fn commit_attempt<S: State>(
    shared: &Shared,
    c: &mut Conn,
    id: &str,
    a: &Attempted<'_, S>,
    pending: &Mutex<Pending>,
) -> Attempt<u64> {
    let prepared = c.prepare_cached(COMMIT_STATEMENTS).await?;
    shared
        .commit_round_trips
        .fetch_add(prepared, Ordering::Relaxed);
    loop {
        let (hint, step, snapshot) = {
            let p = pending.lock();
            let step = decide(&p, a.delta_bytes.len() as u64, S::VERSION, a.snapshot_every);
            (p.hint.clone(), step, p.prepared.clone())
        };
        let answer = match step {
            Step::Prepare => {
                let prepared = prepare_snapshot::<S>(shared, c, a).await?;
                let mut p = pending.lock();
                p.hint = prepared.on.clone();
                p.prepared = Some(Arc::new(prepared));
                continue;
            }
            Step::Write { snapshot: false } => call(shared, c, id, a, &hint, None).await?,
            Step::Write { snapshot: true } => {
                let body = snapshot.as_deref().map(|p| p.bytes.as_slice());
                call(shared, c, id, a, &hint, body).await?
            }
        };
        match answer {
            Answer::Ok(row) => {
                let seq = row.latest_seq;
                shared.hints.put(a.task, row);
                return Ok(seq);
            }
            Answer::Stale(row) => {
                shared.hints.put(a.task, row.clone());
                pending.lock().hint = row;
            }
            Answer::Conflict(row) => {
                let actual = row.latest_seq;
                shared.hints.put(a.task, row);
                return Err(Fail::Api(Error::Conflict {
                    task: a.task.to_string(),
                    expected: a.expected.unwrap_or(0),
                    actual,
                }));
            }
            Answer::Fenced(lease) => {
                judge_fence(a.task, lease, a.epoch)?;
                return Err(Fail::Api(Error::Postgres {
                    context: "committing a checkpoint".into(),
                    message: "the commit function refused a write the fence check admits".into(),
                }));
            }
        }
    }
}

/// One call on `hint`: the usual case's statement when it may take the call, then the
/// commit function if the statement left it the call. Writes the delta, or the snapshot
/// given.
async fn call<S: State>(
    shared: &Shared,
    c: &Conn,
    id: &str,
    a: &Attempted<'_, S>,
    hint: &Hint,
    snapshot_body: Option<&[u8]>,
) -> Attempt<Answer> {
    let snapshot = snapshot_body.is_some();
    let body = snapshot_body.unwrap_or(a.delta_bytes);
    let cp = NewCheckpoint {
        seq: hint.latest_seq + 1,
        // The server writes the later of this and the previous checkpoint's time.
        created_at_ms: now_ms(),
        schema_version: S::VERSION,
        snapshot,
        body,
        origin: None,
    };
    let (after, versions) = advance(hint.counters, &hint.versions, &cp);
    let call = Call {
        task: a.task,
        epoch: a.epoch,
        expected: a.expected,
        decided_on: hint,
        write_id: id,
        now_ms: cp.created_at_ms,
        schema_version: S::VERSION,
        snapshot,
        body,
        after: (after, &versions),
        prune: a.prune(cp.seq),
    };
    if let Some(decided) = commit_fast::eligible(&call) {
        shared.commit_round_trips.fetch_add(1, Ordering::Relaxed);
        if let Some(answer) = commit_fast::call(c, &call, decided).await? {
            return Ok(answer);
        }
    }
    shared.commit_round_trips.fetch_add(1, Ordering::Relaxed);
    commit_fn::call(c, &call).await
}

/// The task's row and a snapshot prepared on it: its latest state (read with the row, in
/// one statement, `load::latest`) after `delta`, encoded. A history this program cannot
/// read (another schema version without migration hooks, a corrupt body) refuses the
/// commit, but a fenced writer learns first that it is fenced, as the write would tell it.
async fn prepare_snapshot<S: State>(
    shared: &Shared,
    c: &Conn,
    a: &Attempted<'_, S>,
) -> Attempt<Prepared> {
    shared.commit_round_trips.fetch_add(1, Ordering::Relaxed);
    let (on, mut state) = match latest::<S>(c, a.task).await {
        Ok(Some((row, state, _))) => (Hint::from(&row), state),
        // No task: decide on the row of a task that does not exist.
        Ok(None) => (Hint::default(), S::default()),
        Err(Fail::Api(e)) => {
            check_fence(c, a.task, a.epoch).await?;
            return Err(Fail::Api(e));
        }
        Err(e) => return Err(e),
    };
    shared.hints.put(a.task, on.clone());
    state.apply(a.delta);
    let bytes = codec::encode(&state)?;
    Ok(Prepared { on, bytes })
}

impl<S: State> PgStore<S> {
    /// Commits `delta` as the task's next checkpoint and returns its seq (see
    /// [`Store::commit`](crate::Store::commit)). Durable when it returns, as far as the
    /// server's `synchronous_commit` promises (docs/postgres.md §5).
    pub fn commit(&self, task: &str, delta: &S::Delta) -> Result<u64> {
        self.shared.block_on(self.commit_async(task, None, delta))
    }

    /// Like [`commit`](Self::commit), but only if the task's latest seq is `expected_seq`
    /// (0: the task must not exist); otherwise [`Error::Conflict`].
    pub fn commit_if(&self, task: &str, expected_seq: u64, delta: &S::Delta) -> Result<u64> {
        self.shared
            .block_on(self.commit_async(task, Some(expected_seq), delta))
    }

    /// Round trips this handle's commits made so far (statements prepared, calls of the
    /// commit function, folds of a state to snapshot): a test hook, to check that a
    /// steady-state commit is one round trip.
    #[doc(hidden)]
    pub fn commit_round_trips(&self) -> u64 {
        self.shared.commit_round_trips.load(Ordering::Relaxed)
    }

    /// [`commit`](Self::commit) (`expected`: `None`) or [`commit_if`](Self::commit_if),
    /// as a future.
    pub(super) async fn commit_async(
        &self,
        task: &str,
        expected: Option<u64>,
        delta: &S::Delta,
    ) -> Result<u64> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        // Values are encoded before any transaction begins.
        let delta_bytes = codec::encode(delta)?;
        let o = &self.shared.options;
        let attempted = Attempted::<S> {
            task,
            epoch: self.epoch_for(task),
            expected,
            delta,
            delta_bytes: &delta_bytes,
            snapshot_every: o.snapshot_every,
            keep: o.keep_checkpoints,
            max_age: o.max_age,
        };
        // A mutex, locked only between awaits, where a `RefCell` would do: the future
        // must be `Send` for `AsyncPgStore` to spawn it.
        let pending = Mutex::new(Pending {
            hint: self.shared.hints.get(task),
            prepared: None,
        });
        let (shared, attempted, pending) = (&*self.shared, &attempted, &pending);
        shared
            .run_write_async(
                "committing a checkpoint",
                task,
                // Landed, as `resolve` found: the row it left is not known here.
                |seq| {
                    shared.hints.forget(task);
                    seq.unwrap_or(0)
                },
                attempt!(|c, id| commit_attempt(shared, c, id, attempted, pending).await),
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::policy::SnapshotCounters;

    fn row(seq: u64, deltas: u32, created_at_ms: u64) -> Hint {
        Hint {
            latest_seq: seq,
            latest_created_at_ms: created_at_ms,
            counters: SnapshotCounters {
                snapshot_bytes: 100,
                deltas_since_snapshot: deltas,
                delta_bytes_since_snapshot: 10,
            },
            versions: vec![1],
        }
    }

    fn pending(deltas: u32, prepared_on: Option<Hint>) -> Pending {
        Pending {
            hint: row(10, deltas, 0),
            prepared: prepared_on.map(|on| Arc::new(Prepared { on, bytes: vec![] })),
        }
    }

    #[test]
    fn a_snapshot_is_written_only_on_the_row_it_was_prepared_on() {
        let write = |snapshot| Step::Write { snapshot };
        assert_eq!(decide(&pending(1, None), 1, 1, 4), write(false));
        assert_eq!(decide(&pending(3, None), 1, 1, 4), Step::Prepare);
        assert_eq!(
            decide(&pending(3, Some(row(10, 3, 0))), 1, 1, 4),
            write(true)
        );
        // Prepared on a row the task has moved on from: the delta, never a second prepare.
        assert_eq!(
            decide(&pending(3, Some(row(9, 2, 0))), 1, 1, 4),
            write(false)
        );
        // The same seq of another row (the task deleted and written again): the delta.
        assert_eq!(
            decide(&pending(3, Some(row(10, 3, 7))), 1, 1, 4),
            write(false)
        );
        assert_eq!(
            decide(&pending(3, Some(row(10, 1, 0))), 1, 1, 4),
            write(false)
        );
        // Another schema version in the history: due whatever the counters; and prepared
        // again, never written as a delta, when it came in after the read.
        assert_eq!(decide(&pending(1, None), 1, 2, 4), Step::Prepare);
        assert_eq!(
            decide(&pending(1, Some(row(9, 0, 0))), 1, 2, 4),
            Step::Prepare
        );
        assert_eq!(
            decide(&pending(1, Some(row(10, 1, 0))), 1, 2, 4),
            write(true)
        );
    }
}
