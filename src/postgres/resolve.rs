//! Settling a write whose outcome is unknown (docs/postgres.md §4).

use tokio_postgres::Client;

use super::PgStore;
use super::conn::{Attempt, Fail, RowExt, attempt};
use super::protocol::write_id_created_ms;
use crate::error::{Error, Result};
use crate::state::State;

/// What became of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// It committed. `seq`: the checkpoint a commit or fork wrote (`None` for the other
    /// writes: journal entries, deletes).
    Landed {
        /// The checkpoint's seq, for a commit or a fork.
        seq: Option<u64>,
    },
    /// It did not commit, and now never will: safe to do again.
    NotLanded,
}

/// Declares write `id` not landed unless it did: the insert of the id as not landed waits
/// while a transaction that inserted it is still open, and succeeds only if none committed
/// it, after which no transaction can (the id is the table's key).
///
/// The statement always writes a row version (on a conflict, an update that changes
/// nothing), so its own COMMIT waits for a synchronous standby, up to a WAL position past
/// the write's commit record. Without that, a write whose backend was terminated while it
/// waited for the standby (`pg_terminate_backend`, a fast shutdown: the server then
/// answers nothing) would resolve as `Landed` on the primary at once, committed locally
/// but perhaps never replicated; now `Landed` comes back only once the standby has it
/// (docs/postgres.md §5).
///
/// `writes` is pruned (`Shared::prune`): an id created before the watermark
/// (`writes_pruned.before_ms`), or any id without a creation time once something was
/// pruned, may have landed and lost its row, so if its row is gone the answer is
/// `Error::Postgres` (its outcome is no longer recorded), never `NotLanded`. The watermark
/// row is read `FOR SHARE` in the same transaction, so no prune deletes a row between that
/// check and the insert.
pub(super) async fn resolve_on(c: &mut Client, id: &str) -> Attempt<Resolution> {
    let tx = c.transaction().await?;
    let before_ms: i64 = tx
        .query_one(
            "SELECT before_ms FROM writes_pruned WHERE id = 1 FOR SHARE",
            &[],
        )
        .await?
        .col(0)?;
    let maybe_pruned = match write_id_created_ms(id) {
        Some(ms) => ms < before_ms,
        None => before_ms > 0,
    };
    if maybe_pruned
        && tx
            .query_opt("SELECT 1 FROM writes WHERE write_id = $1", &[&id])
            .await?
            .is_none()
    {
        tx.rollback().await?;
        return Err(Fail::Api(Error::Postgres {
            context: "resolving a write".into(),
            message: format!(
                "the outcome of write {id:?} is no longer recorded: it is older than the \
                 pruned window (PgOptions::write_ids_kept; pruned before {before_ms} ms since \
                 the epoch); whether it landed can only be read from the task's history"
            ),
        }));
    }
    tx.execute(
        "INSERT INTO writes (write_id, landed) VALUES ($1, false)
         ON CONFLICT (write_id) DO UPDATE SET landed = writes.landed",
        &[&id],
    )
    .await?;
    let row = tx
        .query_one("SELECT landed, seq FROM writes WHERE write_id = $1", &[&id])
        .await?;
    let resolution = match row.col::<bool>(0)? {
        true => Resolution::Landed {
            seq: row.col::<Option<i64>>(1)?.map(|s| s as u64),
        },
        false => Resolution::NotLanded,
    };
    tx.commit().await?;
    Ok(resolution)
}

impl<S: State> PgStore<S> {
    /// Settles the write named by an `Error::Indeterminate`: whether it landed (and at
    /// which seq), or that it did not and now never will. Waits for the write's transaction
    /// if the server still has it open; `Error::Postgres` if the server does not answer
    /// within the deadline (call again later), or if the id is older than the kept window
    /// ([`PgOptions::write_ids_kept`](super::PgOptions::write_ids_kept)) and its record was
    /// pruned: its outcome is then no longer known (read the task's history instead).
    /// A read-only handle refuses it ([`Error::ReadOnly`]):
    /// settling a write inserts its id.
    pub fn resolve(&self, write_id: &str) -> Result<Resolution> {
        self.shared.block_on(self.resolve_async(write_id))
    }

    /// [`resolve`](Self::resolve), as a future.
    pub(super) async fn resolve_async(&self, write_id: &str) -> Result<Resolution> {
        self.shared.writable()?;
        self.shared
            .run_read_async(
                "resolving a write",
                attempt!(|c| resolve_on(c, write_id).await),
            )
            .await
    }
}
