//! Task leases and their epochs (docs/postgres.md §3): a worker acquires a task, writes under
//! the lease's epoch, renews it while it works; a takeover raises the epoch, and every
//! write under an older one is refused (`Error::Fenced`). Expiry is judged by the server's
//! clock alone; safety rests on the epoch, never on a clock.

use std::sync::Arc;
use std::time::Duration;

use super::PgStore;
use super::conn::{Attempt, Fail, RowExt, attempt};
use crate::error::{Error, Result};
use crate::state::State;
use crate::store::{TASK_ID_BYTES_MAX, validate_id};

/// Longest lease accepted.
pub const LEASE_TTL_MAX: Duration = Duration::from_secs(24 * 3600);
/// Longest holder name accepted, in bytes.
pub const HOLDER_BYTES_MAX: usize = 512;

/// A worker's lease on one task: write under it with [`PgStore::with_lease`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The task.
    pub task: String,
    /// Who holds it (a name for people reading the table; it plays no part in fencing).
    pub holder: String,
    /// The epoch: 1 for a task's first lease, one more at each acquisition after.
    pub epoch: u64,
}

fn check_ttl(ttl: Duration) -> Result<f64> {
    if ttl.is_zero() || ttl > LEASE_TTL_MAX {
        return Err(Error::InvalidArgument(format!(
            "a lease's ttl must be more than 0 and at most {} s (renew it to keep it longer)",
            LEASE_TTL_MAX.as_secs()
        )));
    }
    Ok(ttl.as_secs_f64() * 1000.0)
}

impl<S: State> PgStore<S> {
    /// Acquires `task` for `ttl` (by the server's clock) unless another live lease holds
    /// it ([`Error::LeaseHeld`]); the task need not exist. The new lease's epoch fences
    /// every earlier one: their holders' later writes get [`Error::Fenced`]. A write of the
    /// previous holder that was in flight is either committed before this returns (and
    /// seen by a load after it) or refused.
    ///
    /// If this fails with `Error::Postgres` after reaching the server, the lease may have
    /// been taken all the same; acquiring again then finds it held until `ttl` passes.
    pub fn acquire(&self, task: &str, holder: &str, ttl: Duration) -> Result<Lease> {
        self.shared.block_on(self.acquire_async(task, holder, ttl))
    }

    /// [`acquire`](Self::acquire), as a future.
    pub(super) async fn acquire_async(
        &self,
        task: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Lease> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        validate_id("holder name", holder, HOLDER_BYTES_MAX)?;
        let ttl_ms = check_ttl(ttl)?;
        self.shared.writable()?;
        self.shared.run_read_async("acquiring a lease", attempt!(|c| {
            let row = c
                .query_opt(
                    "INSERT INTO leases AS l (task, epoch, holder, expires_at)
                     VALUES ($1, 1, $2, clock_timestamp() + $3::float8 * interval '1 millisecond')
                     ON CONFLICT (task) DO UPDATE
                         SET epoch = l.epoch + 1, holder = excluded.holder,
                             expires_at = excluded.expires_at
                         WHERE l.expires_at <= clock_timestamp()
                     RETURNING epoch",
                    &[&task.as_bytes(), &holder, &ttl_ms],
                )
                .await?;
            if let Some(row) = row {
                return Ok(Lease {
                    task: task.to_string(),
                    holder: holder.to_string(),
                    epoch: row.col::<i64>(0)? as u64,
                });
            }
            let held = c
                .query_one(
                    "SELECT holder, epoch,
                         greatest(0, extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint
                     FROM leases WHERE task = $1",
                    &[&task.as_bytes()],
                )
                .await?;
            Err(Fail::Api(Error::LeaseHeld {
                task: task.to_string(),
                holder: held.col(0)?,
                epoch: held.col::<i64>(1)? as u64,
                expires_in_ms: held.col::<i64>(2)? as u64,
            }))
        }))
        .await
    }

    /// Extends `lease` to `ttl` from now (by the server's clock). [`Error::Fenced`] if it
    /// was taken over; a lease that expired but was not taken over is renewed.
    pub fn renew(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        self.shared.block_on(self.renew_async(lease, ttl))
    }

    /// [`renew`](Self::renew), as a future.
    pub(super) async fn renew_async(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        let ttl_ms = check_ttl(ttl)?;
        self.shared.writable()?;
        self.shared.run_read_async("renewing a lease", attempt!(|c| {
            let n = c
                .execute(
                    "UPDATE leases SET expires_at = clock_timestamp() + $3::float8 * interval '1 millisecond'
                     WHERE task = $1 AND epoch = $2",
                    &[&lease.task.as_bytes(), &(lease.epoch as i64), &ttl_ms],
                )
                .await?;
            if n == 1 {
                return Ok(());
            }
            Err(Fail::Api(fenced(c, lease).await?))
        }))
        .await
    }

    /// Ends `lease` now, so that another worker can acquire the task at once. Its epoch
    /// stays fenced like any older one. [`Error::Fenced`] if it was already taken over.
    pub fn release(&self, lease: &Lease) -> Result<()> {
        self.shared.block_on(self.release_async(lease))
    }

    /// [`release`](Self::release), as a future.
    pub(super) async fn release_async(&self, lease: &Lease) -> Result<()> {
        self.shared.writable()?;
        self.shared.run_read_async("releasing a lease", attempt!(|c| {
            let n = c
                .execute(
                    "UPDATE leases SET expires_at = clock_timestamp() WHERE task = $1 AND epoch = $2",
                    &[&lease.task.as_bytes(), &(lease.epoch as i64)],
                )
                .await?;
            if n == 1 {
                return Ok(());
            }
            Err(Fail::Api(fenced(c, lease).await?))
        }))
        .await
    }

    /// A handle (sharing this one's connections) whose writes to `lease.task` carry the
    /// lease's epoch: each is refused with [`Error::Fenced`] once the lease was taken over.
    /// Its writes to other tasks are unleased.
    pub fn with_lease(&self, lease: &Lease) -> PgStore<S> {
        PgStore {
            lease: Some(Arc::new(lease.clone())),
            ..self.clone()
        }
    }
}

/// The `Fenced` error of `lease`, with the task's current epoch.
async fn fenced(c: &tokio_postgres::Client, lease: &Lease) -> Attempt<Error> {
    let row = c
        .query_opt(
            "SELECT epoch FROM leases WHERE task = $1",
            &[&lease.task.as_bytes()],
        )
        .await?;
    let current_epoch = match row {
        Some(r) => r.col::<i64>(0)? as u64,
        None => 0,
    };
    Ok(Error::Fenced {
        task: lease.task.clone(),
        epoch: Some(lease.epoch),
        current_epoch,
    })
}
