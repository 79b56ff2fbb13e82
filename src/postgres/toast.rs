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

use super::conn::{Attempt, RowExt};

/// Whether the server accepts lz4 for TOAST (PostgreSQL 14 or later, built with lz4).
const LZ4_SUPPORTED_SQL: &str = "SELECT coalesce((SELECT 'lz4' = ANY(enumvals) FROM pg_settings \
     WHERE name = 'default_toast_compression'), false)";

/// Makes this session compress the values it writes with lz4.
const USE_LZ4_SQL: &str = "SET default_toast_compression = lz4";

/// Whether a handle's sessions compress with lz4: learnt once, when the handle opens.
#[derive(Debug, Default)]
pub(super) struct Toast {
    lz4: AtomicBool,
}

impl Toast {
    /// Learns whether the server has lz4 and, if so, switches `c`'s session to it; every
    /// session the handle opens from now on is switched too (`prepare`).
    pub async fn enable_lz4(&self, c: &Client) -> Attempt<()> {
        let supported: bool = c.query_one(LZ4_SUPPORTED_SQL, &[]).await?.col(0)?;
        if supported {
            c.batch_execute(USE_LZ4_SQL).await?;
            self.lz4.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Sets up a new session as `enable_lz4` decided.
    pub async fn prepare(&self, c: &Client) -> Attempt<()> {
        if self.lz4.load(Ordering::Acquire) {
            c.batch_execute(USE_LZ4_SQL).await?;
        }
        Ok(())
    }

    /// Whether this handle's sessions compress with lz4.
    pub fn is_lz4(&self) -> bool {
        self.lz4.load(Ordering::Acquire)
    }
}
