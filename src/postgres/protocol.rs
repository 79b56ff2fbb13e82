//! The write protocol shared by every write (docs/postgres.md §2 to §4): a write id per
//! attempt, the fence check inside the transaction, and settling an unknown outcome before
//! the call returns.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::statements::{self, Session};
use tokio::time::{Instant, sleep, timeout_at};
use tokio_postgres::types::Type;

use super::conn::{
    Attempt, Conn, Fail, RETRY_PAUSE, RowExt, Shared, deadline_error, definite, driven, pg_error,
};
use super::resolve::{Resolution, resolve_on};
use crate::error::{Error, Result};

/// A write id no other write of any process uses: the milliseconds since the epoch it was
/// made at (decimal), `-`, then 128 bits from the process's random hash keys, its pid, the
/// time and a counter, as 32 hex digits. The time lets `resolve` tell an id whose row may
/// have been pruned from one never sent (docs/postgres.md §4).
pub(super) fn new_write_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let nanos = now.as_nanos() as u64;
    let mut halves = [0u64; 2];
    for (i, half) in halves.iter_mut().enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(n);
        h.write_u64(nanos);
        h.write_u32(std::process::id());
        h.write_usize(i);
        *half = h.finish();
    }
    format!("{}-{:016x}{:016x}", now.as_millis(), halves[0], halves[1])
}

/// The creation time (ms since the epoch) a write id of [`new_write_id`]'s form carries:
/// 1 to 18 digits, then `-`. `None` for any other id (ids of builds before schema version
/// 2: 32 hex digits). `PRUNE_SQL` recognises the same form on the server.
pub(super) fn write_id_created_ms(id: &str) -> Option<i64> {
    let (ms, _) = id.split_once('-')?;
    if ms.is_empty() || ms.len() > 18 || !ms.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    ms.parse().ok()
}

/// Every this many writes that returned `Ok`, a handle prunes `writes` once.
const PRUNE_EVERY: u64 = 64;
/// At most this many rows one prune deletes (so it never runs long): with `PRUNE_EVERY`,
/// pruning keeps up with up to 15 times the rate of writes.
const PRUNE_ROWS_MAX: i64 = 1000;
/// A prune gives up after this long (or the call's deadline, if sooner); it is tried again
/// `PRUNE_EVERY` writes later.
const PRUNE_TIME_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// Bounds a prune's wait for the watermark row's lock (sent before [`PRUNE_SQL`], in the
/// same implicit transaction).
const PRUNE_LOCK_TIMEOUT_SQL: &str = "SET LOCAL lock_timeout = '100ms'";

/// The prune's statement. The `UPDATE` raises the watermark to (server time −
/// `{kept_ms}`), never lowering it; the `DELETE` removes up to `{rows_max}` rows both
/// written (server time) and, for an id of the timed form, created (its own time) before
/// the watermark: so no id created at or after the watermark is ever deleted, whatever the
/// clocks' skew. The CASE keeps the cast off other ids. The ids to delete are collected
/// into an array first (through the index on `at`) and deleted by key: an `IN (subquery)`
/// let the planner hash them and scan the whole table, every 64 writes. Both values are
/// integers the handle formats in ([`prune_statement`]), never text from a caller.
const PRUNE_SQL: &str = "WITH w AS (UPDATE writes_pruned
    SET before_ms = GREATEST(before_ms,
        (extract(epoch FROM clock_timestamp()) * 1000)::bigint - {kept_ms})
    WHERE id = 1 RETURNING before_ms)
DELETE FROM writes WHERE write_id = ANY (ARRAY(
    SELECT d.write_id FROM writes d, w
    WHERE d.at < to_timestamp(w.before_ms / 1000.0)
      AND CASE WHEN d.write_id ~ '^[0-9]{1,18}-'
               THEN split_part(d.write_id, '-', 1)::bigint < w.before_ms
               ELSE true END
    LIMIT {rows_max}))";

/// The prune's statement ([`PRUNE_SQL`]) for a handle keeping write ids `kept_ms`
/// milliseconds. Public, hidden, for the test that checks its plan.
#[doc(hidden)]
pub fn prune_statement(kept_ms: i64) -> String {
    PRUNE_SQL
        .replace("{kept_ms}", &kept_ms.to_string())
        .replace("{rows_max}", &PRUNE_ROWS_MAX.to_string())
}

impl Shared {
    /// Counts a write that returned `Ok`; every `PRUNE_EVERY`th prunes `writes`, best
    /// effort (a failure is only logged) and bounded in time.
    async fn after_write(&self, deadline: Instant) {
        let n = self.writes_done.fetch_add(1, Ordering::Relaxed) + 1;
        if !n.is_multiple_of(PRUNE_EVERY) {
            return;
        }
        let until = deadline.min(Instant::now() + PRUNE_TIME_MAX);
        match timeout_at(until, self.prune()).await {
            Ok(Ok(deleted)) => tracing::debug!("pruned {deleted} rows of writes"),
            Ok(Err(Fail::Db(e))) => tracing::debug!("pruning writes failed: {e}"),
            Ok(Err(Fail::Api(e))) => tracing::debug!("pruning writes failed: {e}"),
            Err(_) => tracing::debug!("pruning writes ran out of time"),
        }
    }

    /// One prune, one round trip: [`PRUNE_LOCK_TIMEOUT_SQL`] and [`PRUNE_SQL`] as one
    /// simple query, so one implicit transaction: raise the watermark, then delete rows
    /// below it. The watermark row's lock orders it with `resolve_on` (which reads the row
    /// `FOR SHARE`), so a resolve never sees a row vanish under it; `lock_timeout` keeps a
    /// prune from queueing behind a resolve that waits for an open write.
    async fn prune(&self) -> Attempt<u64> {
        let kept_ms = self
            .options
            .write_ids_kept
            .as_millis()
            .min(i64::MAX as u128) as i64;
        let sql = format!("{PRUNE_LOCK_TIMEOUT_SQL}; {}", prune_statement(kept_ms));
        let client = self.get().await?;
        let (client, out) = driven(client, |client| async move {
            let out = client.simple_query(&sql).await;
            (client, out)
        })
        .await;
        let messages = out?;
        self.put(client);
        // The last statement's count: the rows the `DELETE` removed.
        let deleted = messages.iter().rev().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::CommandComplete(n) => Some(*n),
            _ => None,
        });
        Ok(deleted.unwrap_or(0))
    }

    /// Runs one write of `task`: `f` gets a connection and this attempt's write id, opens
    /// its transaction, checks the fence, records the write id and commits. A failure that
    /// leaves the outcome unknown is settled on a fresh connection (`resolve_on`): a write
    /// that landed returns `landed(seq)`; one that did not is tried again with a new id
    /// while the deadline allows; one that cannot be settled in time is
    /// `Error::Indeterminate`.
    pub fn run_write<T>(
        &self,
        context: &str,
        task: &str,
        landed: impl Fn(Option<u64>) -> T,
        f: impl AsyncFn(&mut Conn, &str) -> Attempt<T>,
    ) -> Result<T> {
        let f = &f;
        let f = move |mut c: Conn, id: String| async move {
            let out = f(&mut c, &id).await;
            (c, out)
        };
        self.block_on(self.run_write_async(context, task, landed, f))
    }

    /// [`run_write`](Self::run_write) as a future, `Send` when `f`'s futures are (write
    /// `f` with [`attempt!`](super::conn::attempt)); the deadline counts from its first
    /// poll. `f` gets each attempt's write id.
    pub async fn run_write_async<T, F>(
        &self,
        context: &str,
        task: &str,
        landed: impl Fn(Option<u64>) -> T,
        f: impl Fn(Conn, String) -> F,
    ) -> Result<T>
    where
        F: Future<Output = (Conn, Attempt<T>)>,
    {
        self.writable()?;
        let deadline = self.deadline();
        let mut last = String::from("no attempt finished");
        loop {
            let id = new_write_id();
            // Atomics, not `Cell`s, so that the future is `Send` (`AsyncPgStore` spawns
            // it); read once `attempt` has ended or the deadline dropped it.
            let sent = AtomicBool::new(false);
            let cancelled = AtomicBool::new(false);
            let attempt = async {
                let client = self.get().await?;
                sent.store(true, Ordering::Relaxed);
                let cancels = client.sync_rep_cancels();
                let (client, out) = driven(client, |c| f(c, id.clone())).await;
                cancelled.store(client.sync_rep_cancels() != cancels, Ordering::Relaxed);
                if !matches!(out, Err(Fail::Db(_))) {
                    self.put(client);
                }
                out
            };
            let cause = match timeout_at(deadline, attempt).await {
                // COMMIT said success, with the warning that its wait for the
                // synchronous standby was cancelled: committed on the primary, perhaps
                // not on the standby. Settled like an unknown outcome: `resolve_on`'s
                // own COMMIT waits for the standby (docs/postgres.md §5).
                Ok(Ok(v)) if cancelled.load(Ordering::Relaxed) => {
                    match self.settle(&id, deadline).await {
                        Some(Resolution::Landed { .. }) => {
                            self.after_write(deadline).await;
                            return Ok(v);
                        }
                        Some(Resolution::NotLanded) => {
                            "the wait for the standby was cancelled and the write did not land"
                                .to_string()
                        }
                        None => {
                            let cause = "the server cancelled the COMMIT's wait for the \
                                         synchronous standby (pg_cancel_backend): committed \
                                         on the primary, not known to be on the standby"
                                .to_string();
                            return Err(indeterminate(task, &id, cause));
                        }
                    }
                }
                Ok(Ok(v)) => {
                    self.after_write(deadline).await;
                    return Ok(v);
                }
                Ok(Err(Fail::Api(e))) => return Err(e),
                Ok(Err(Fail::Db(e))) if definite(&e) => return Err(pg_error(context, &e)),
                Ok(Err(Fail::Db(e))) if !sent.load(Ordering::Relaxed) => e.to_string(),
                Ok(Err(Fail::Db(e))) => match self.settle(&id, deadline).await {
                    Some(Resolution::Landed { seq }) => return Ok(landed(seq)),
                    Some(Resolution::NotLanded) => e.to_string(),
                    None => return Err(indeterminate(task, &id, e.to_string())),
                },
                Err(_) if !sent.load(Ordering::Relaxed) => {
                    return Err(deadline_error(context, &self.options, &last));
                }
                Err(_) => {
                    let cause = format!(
                        "no answer within the deadline of {} ms",
                        self.options.deadline.as_millis()
                    );
                    return Err(indeterminate(task, &id, cause));
                }
            };
            last = cause;
            if timeout_at(deadline, sleep(RETRY_PAUSE)).await.is_err() {
                return Err(deadline_error(context, &self.options, &last));
            }
        }
    }

    /// Settles write `id` before `deadline`: retried on fresh connections while the
    /// server cannot answer; `None` if it never did.
    async fn settle(&self, id: &str, deadline: Instant) -> Option<Resolution> {
        loop {
            let attempt = async {
                let client = self.get().await?;
                let cancels = client.sync_rep_cancels();
                let (client, out) = driven(client, |mut c| async move {
                    let out = resolve_on(&mut c, id).await;
                    (c, out)
                })
                .await;
                let again = client.sync_rep_cancels() != cancels;
                if out.is_ok() {
                    self.put(client);
                }
                out.map(|r| (r, again))
            };
            match timeout_at(deadline, attempt).await {
                // The resolve's own wait for the standby was cancelled too: ask again.
                Ok(Ok((_, true))) => {}
                Ok(Ok((resolution, false))) => return Some(resolution),
                // The id predates the pruned window (only with a client clock far behind
                // the server's): its outcome cannot be learnt.
                Ok(Err(Fail::Api(_))) => return None,
                Ok(Err(Fail::Db(_))) => {}
                Err(_) => return None,
            }
            if timeout_at(deadline, sleep(RETRY_PAUSE)).await.is_err() {
                return None;
            }
        }
    }
}

fn indeterminate(task: &str, id: &str, cause: String) -> Error {
    Error::Indeterminate {
        task: task.to_string(),
        write_id: id.to_string(),
        cause,
    }
}

/// The fence check's statement; `$1`: the task.
pub(super) const FENCE_SQL: &str =
    "SELECT epoch, expires_at > clock_timestamp() FROM leases WHERE task = $1 FOR SHARE";
/// Records a write id as landed, in the write's transaction: write id, task, seq.
pub(super) const RECORD_WRITE_SQL: &str =
    "INSERT INTO writes (write_id, task, seq, landed) VALUES ($1, $2, $3, true)";

/// The fence check, first in every write transaction of `task`: the lease row is read
/// `FOR SHARE`, so a takeover (which updates it) waits for this transaction to end, and
/// this transaction sees any takeover that committed before it (docs/postgres.md §3).
/// `epoch` is the writer's lease epoch (`None`: it holds none).
pub(super) async fn check_fence(c: &impl Session, task: &str, epoch: Option<u64>) -> Attempt<()> {
    judge_fence(task, fence_row(c, task).await?, epoch)
}

/// The task's lease as the fence check reads it: `(epoch, live)`, locked `FOR SHARE` until
/// the transaction ends, so that no takeover commits in between. One statement.
pub(super) async fn fence_row(c: &impl Session, task: &str) -> Attempt<Option<(u64, bool)>> {
    let row = statements::query_opt(c, FENCE_SQL, &[(&task.as_bytes(), Type::BYTEA)]).await?;
    match row {
        Some(r) => Ok(Some((r.col::<i64>(0)? as u64, r.col::<bool>(1)?))),
        None => Ok(None),
    }
}

/// The fence check's verdict on the lease `current` (from [`fence_row`]) for a write
/// holding `epoch`.
pub(super) fn judge_fence(
    task: &str,
    current: Option<(u64, bool)>,
    epoch: Option<u64>,
) -> Attempt<()> {
    let ok = match (current, epoch) {
        (None, None) => true,
        (Some((_, live)), None) => !live,
        (Some((current, _)), Some(epoch)) => current == epoch,
        (None, Some(_)) => false,
    };
    if ok {
        return Ok(());
    }
    Err(Fail::Api(Error::Fenced {
        task: task.to_string(),
        epoch,
        current_epoch: current.map_or(0, |(e, _)| e),
    }))
}

/// Records that write `id` landed, in the write's own transaction (seq: the checkpoint it
/// committed, if any). If `resolve` already declared the id not landed, the insert fails
/// and the transaction with it.
pub(super) async fn record_write(
    c: &impl Session,
    id: &str,
    task: &str,
    seq: Option<u64>,
) -> Attempt<()> {
    let seq = seq.map(|s| s as i64);
    statements::query(
        c,
        RECORD_WRITE_SQL,
        &[
            (&id, Type::TEXT),
            (&task.as_bytes(), Type::BYTEA),
            (&seq, Type::INT8),
        ],
    )
    .await?;
    Ok(())
}
