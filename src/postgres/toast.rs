//! How the server compresses the large values a handle writes (snapshot bodies, big
//! deltas): with lz4 where the server has it, not PostgreSQL's default pglz.
//!
//! A value over about 2 KB is compressed by the server's TOAST before it is stored, inside
//! the commit's statement: with pglz a snapshot of a few hundred KB took milliseconds of the
//! commit, and again to decompress at every load. lz4 compresses and decompresses several
//! times faster for values a few percent larger (docs/postgres.md §6). The choice is the
//! session's `default_toast_compression`, not a property of the tables: no schema change,
//! and values written either way are read alike by every build and every server.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

use super::conn::Attempt;

/// Makes this session compress the values it writes with lz4. A server without lz4 refuses
/// it: "invalid value for parameter" (built without lz4) or "unrecognized configuration
/// parameter" (before PostgreSQL 14).
const USE_LZ4_SQL: &str = "SET default_toast_compression = lz4";

/// Whether a handle's sessions compress with lz4: learnt once, when the handle opens.
#[derive(Debug, Default)]
pub(super) struct Toast {
    lz4: AtomicBool,
}

impl Toast {
    /// Switches `c`'s session to lz4 if the server has it (one statement, outside any
    /// transaction: a refusal leaves the session as it was); every session the handle
    /// opens from now on is switched too (`prepare`).
    pub async fn enable_lz4(&self, c: &Client) -> Attempt<()> {
        let on = set_lz4(c).await?;
        self.lz4.store(on, Ordering::Release);
        Ok(())
    }

    /// Sets up a new session as `enable_lz4` decided. A server that refuses lz4 now (the
    /// handle reconnected to another one, built without it) turns it off for the handle's
    /// next sessions instead of failing the call: its values stay pglz.
    pub async fn prepare(&self, c: &Client) -> Attempt<()> {
        if self.lz4.load(Ordering::Acquire) && !set_lz4(c).await? {
            self.lz4.store(false, Ordering::Release);
        }
        Ok(())
    }

    /// Whether this handle's sessions compress with lz4.
    pub fn is_lz4(&self) -> bool {
        self.lz4.load(Ordering::Acquire)
    }
}

/// Sets the session's `default_toast_compression` to lz4: `false` if the server refuses
/// the value (built without lz4) or the setting (before PostgreSQL 14).
async fn set_lz4(c: &Client) -> Attempt<bool> {
    match c.batch_execute(USE_LZ4_SQL).await {
        Ok(()) => Ok(true),
        Err(e)
            if e.code() == Some(&SqlState::INVALID_PARAMETER_VALUE)
                || e.code() == Some(&SqlState::UNDEFINED_OBJECT) =>
        {
            tracing::debug!("the server has no lz4 for TOAST, values stay pglz: {e}");
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}
