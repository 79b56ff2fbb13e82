//! The write protocol shared by every write (DESIGN.md §7.13.2 to §7.13.4): a write id per
//! attempt, the fence check inside the transaction, and settling an unknown outcome before
//! the call returns.

use std::cell::Cell;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::time::{Instant, sleep, timeout_at};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Transaction};

use super::conn::{Attempt, Fail, RETRY_PAUSE, RowExt, Shared, deadline_error, definite, pg_error};
use super::resolve::{Resolution, resolve_on};
use crate::error::{Error, Result};

/// A write id no other write of any process uses: 128 bits from the process's random hash
/// keys, its pid, the time and a counter, as 32 hex digits.
pub(super) fn new_write_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut halves = [0u64; 2];
    for (i, half) in halves.iter_mut().enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(n);
        h.write_u64(nanos);
        h.write_u32(std::process::id());
        h.write_usize(i);
        *half = h.finish();
    }
    format!("{:016x}{:016x}", halves[0], halves[1])
}

impl Shared {
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
        f: impl AsyncFn(&mut Client, &str) -> Attempt<T>,
    ) -> Result<T> {
        self.writable()?;
        let deadline = self.deadline();
        self.block_on(async {
            let mut last = String::from("no attempt finished");
            loop {
                let id = new_write_id();
                let sent = Cell::new(false);
                let attempt = async {
                    let mut client = self.get().await?;
                    sent.set(true);
                    let out = f(&mut client, &id).await;
                    if !matches!(out, Err(Fail::Db(_))) {
                        self.put(client);
                    }
                    out
                };
                let cause = match timeout_at(deadline, attempt).await {
                    Ok(Ok(v)) => return Ok(v),
                    Ok(Err(Fail::Api(e))) => return Err(e),
                    Ok(Err(Fail::Db(e))) if definite(&e) => return Err(pg_error(context, &e)),
                    Ok(Err(Fail::Db(e))) if !sent.get() => e.to_string(),
                    Ok(Err(Fail::Db(e))) => match self.settle(&id, deadline).await {
                        Some(Resolution::Landed { seq }) => return Ok(landed(seq)),
                        Some(Resolution::NotLanded) => e.to_string(),
                        None => return Err(indeterminate(task, &id, e.to_string())),
                    },
                    Err(_) if !sent.get() => {
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
        })
    }

    /// Settles write `id` before `deadline`: retried on fresh connections while the
    /// server cannot answer; `None` if it never did.
    async fn settle(&self, id: &str, deadline: Instant) -> Option<Resolution> {
        loop {
            let attempt = async {
                let mut client = self.get().await?;
                let out = resolve_on(&mut client, id).await;
                if out.is_ok() {
                    self.put(client);
                }
                out
            };
            match timeout_at(deadline, attempt).await {
                Ok(Ok(resolution)) => return Some(resolution),
                Ok(Err(_)) => {}
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

/// The fence check, first in every write transaction of `task`: the lease row is read
/// `FOR SHARE`, so a takeover (which updates it) waits for this transaction to end, and
/// this transaction sees any takeover that committed before it (DESIGN.md §7.13.3).
/// `epoch` is the writer's lease epoch (`None`: it holds none).
pub(super) async fn check_fence(
    tx: &Transaction<'_>,
    task: &str,
    epoch: Option<u64>,
) -> Attempt<()> {
    let row = tx
        .query_typed_opt(
            "SELECT epoch, expires_at > clock_timestamp() FROM leases WHERE task = $1 FOR SHARE",
            &[(&task.as_bytes(), Type::BYTEA)],
        )
        .await?;
    let current = match row {
        Some(r) => Some((r.col::<i64>(0)? as u64, r.col::<bool>(1)?)),
        None => None,
    };
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
    tx: &Transaction<'_>,
    id: &str,
    task: &str,
    seq: Option<u64>,
) -> Attempt<()> {
    let seq = seq.map(|s| s as i64);
    tx.query_typed(
        "INSERT INTO writes (write_id, task, seq, landed) VALUES ($1, $2, $3, true)",
        &[
            (&id, Type::TEXT),
            (&task.as_bytes(), Type::BYTEA),
            (&seq, Type::INT8),
        ],
    )
    .await?;
    Ok(())
}
