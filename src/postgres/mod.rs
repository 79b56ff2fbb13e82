//! The PostgreSQL backend (feature `postgres`): the store's API on a PostgreSQL database
//! shared by many worker hosts, with task leases, fencing and resolved unknown outcomes.
//! docs/postgres.md gives the schema, the write transaction, the lease protocol and why a
//! fenced writer can never land a write.
//!
//! [`PgStore`] serves [`TaskStore`](crate::TaskStore) with the local store's rules (the
//! same encoding of states and deltas, the same snapshot policy, the same fold, the same
//! ids and limits); what only a shared database has is on `PgStore` itself: [`PgStore::acquire`],
//! [`PgStore::renew`], [`PgStore::release`], [`PgStore::with_lease`] and
//! [`PgStore::resolve`].
//!
//! The API is blocking, like [`Store`](crate::Store)'s: every call runs on a small tokio
//! runtime the handle owns and returns within [`PgOptions::deadline`]. Call it from plain
//! threads; from async code, through `AsyncPgStore` (with the `tokio` feature too), whose
//! calls run as tasks of that same runtime.

mod api;
#[cfg(feature = "tokio")]
mod async_api;
mod catch_up;
mod commit;
mod commit_fast;
mod commit_fn;
mod conn;
mod hint;
mod import;
mod inspect;
mod lease;
mod load;
mod protocol;
mod resolve;
mod schema;
mod statements;
mod toast;
mod writes;

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "tokio")]
pub use async_api::AsyncPgStore;
pub use import::Imported;
pub use inspect::{PgStats, PgVerifyReport};
pub use lease::{HOLDER_BYTES_MAX, LEASE_TTL_MAX, Lease};
#[doc(hidden)]
pub use load::latest_statement;
#[doc(hidden)]
pub use protocol::prune_statement;
pub use resolve::Resolution;

use crate::error::{Error, Result};
use crate::state::{AgentState, State};
use crate::store::SNAPSHOT_EVERY_DEFAULT;

/// Default for [`PgOptions::deadline`].
pub const DEADLINE_DEFAULT: Duration = Duration::from_secs(10);
/// Default for [`PgOptions::write_ids_kept`]: 7 days.
pub const WRITE_IDS_KEPT_DEFAULT: Duration = Duration::from_secs(7 * 24 * 3600);
/// Default for [`PgOptions::pool_idle_max`]: as many as a process with a few dozen threads
/// in calls at once uses, so that a burst does not close connections the next one opens
/// again (a new connection costs a server process and its first statements' prepares).
pub const POOL_IDLE_MAX_DEFAULT: usize = 32;
/// Default for [`PgOptions::pool_idle_time_max`]: 5 minutes.
pub const POOL_IDLE_TIME_MAX_DEFAULT: Duration = Duration::from_secs(300);
/// Default for [`PgOptions::schema`].
pub const SCHEMA_DEFAULT: &str = "agentwal";
/// Longest schema (namespace) name PostgreSQL accepts, in bytes.
pub const SCHEMA_NAME_BYTES_MAX: usize = 63;

/// How a [`PgStore`] connects and behaves. Every field is public; start from `default()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgOptions {
    /// Every call returns within this time (default 10 s): with its result, with
    /// `Error::Postgres` when nothing landed, or with `Error::Indeterminate` when a write
    /// was sent and its outcome could not be learnt in time.
    pub deadline: Duration,
    /// Idle connections kept for reuse (default 32). More connections open on demand, one
    /// per concurrent call, and close when the call ends beyond this many.
    pub pool_idle_max: usize,
    /// Whether the server compresses the large values this handle writes (snapshots, big
    /// deltas) with lz4 rather than its default, pglz, where it has lz4 (PostgreSQL 14 or
    /// later built with it; default `true`): several times faster to compress at a commit
    /// and to decompress at a load, values a few percent larger (docs/postgres.md §6). A
    /// session setting: values written either way are read alike.
    pub toast_lz4: bool,
    /// An idle connection unused this long is closed (default 5 minutes), so that a
    /// handle's connections shrink back after a burst of concurrent calls. Checked when a
    /// call gives its connection back.
    pub pool_idle_time_max: Duration,
    /// The PostgreSQL schema (namespace) holding the tables (default `agentwal`; letters,
    /// digits and `_`, starting with a letter or `_`, at most 63 bytes). Several stores can
    /// share one database under different schemas.
    pub schema: String,
    /// At most this many deltas between a task's full snapshots (default 1024; ≥ 1), as
    /// [`Options::snapshot_every`](crate::Options::snapshot_every).
    pub snapshot_every: u32,
    /// Retention: keep the last N checkpoints per task (None: all), as
    /// [`Options::keep_checkpoints`](crate::Options::keep_checkpoints). Checkpoints no
    /// retained one needs are deleted in the commit that retires them.
    pub keep_checkpoints: Option<u32>,
    /// Retention by age (None: no age bound), as
    /// [`Options::max_age`](crate::Options::max_age): checkpoints created more than this
    /// long ago are no longer served (loads of them return `Ok(None)`), except the latest,
    /// which always is. With [`keep_checkpoints`](Self::keep_checkpoints) too, the
    /// stricter bound wins. Ages are measured by this client's clock (`now_ms()`, the
    /// clock each checkpoint's `created_at_ms` is written with, as on a local store), so
    /// hosts whose clocks disagree disagree on what is retained by that much. Checkpoints
    /// no retained one needs are deleted in the next commit to the task.
    pub max_age: Option<Duration>,
    /// How long the record of a write's outcome (its row in `writes`) is kept, counted
    /// from the write id's creation (default 7 days; longer than zero). Older rows are
    /// pruned now and then by writes; [`PgStore::resolve`] of a write id older than the
    /// pruned window is an `Error::Postgres` (its outcome is no longer known), never a
    /// wrong `NotLanded` (docs/postgres.md §4). Keep it many deadlines long.
    pub write_ids_kept: Duration,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            deadline: DEADLINE_DEFAULT,
            pool_idle_max: POOL_IDLE_MAX_DEFAULT,
            pool_idle_time_max: POOL_IDLE_TIME_MAX_DEFAULT,
            toast_lz4: true,
            schema: SCHEMA_DEFAULT.to_string(),
            snapshot_every: SNAPSHOT_EVERY_DEFAULT,
            keep_checkpoints: None,
            max_age: None,
            write_ids_kept: WRITE_IDS_KEPT_DEFAULT,
        }
    }
}

impl PgOptions {
    fn validate(&self) -> Result<()> {
        let s = &self.schema;
        let valid = !s.is_empty()
            && s.len() <= SCHEMA_NAME_BYTES_MAX
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !s.as_bytes()[0].is_ascii_digit();
        if !valid {
            return Err(Error::InvalidArgument(format!(
                "schema name {s:?} must be 1..=63 ASCII letters, digits or '_', not starting with a digit"
            )));
        }
        if self.snapshot_every == 0 {
            return Err(Error::InvalidArgument(
                "snapshot_every must be at least 1 (1: every checkpoint is a snapshot)".into(),
            ));
        }
        if self.keep_checkpoints == Some(0) {
            return Err(Error::InvalidArgument(
                "keep_checkpoints must be None (keep all) or at least 1".into(),
            ));
        }
        if self.write_ids_kept.is_zero() {
            return Err(Error::InvalidArgument(
                "write_ids_kept must be longer than zero".into(),
            ));
        }
        if self.deadline.is_zero() {
            return Err(Error::InvalidArgument(
                "deadline must be longer than zero".into(),
            ));
        }
        Ok(())
    }
}

/// A store of agent tasks in a PostgreSQL database. Cheap to clone; share it across
/// threads and processes (any number of handles on any number of hosts may use one
/// database at once).
pub struct PgStore<S: State = AgentState> {
    shared: Arc<conn::Shared>,
    /// The lease this handle writes under (see [`PgStore::with_lease`]).
    lease: Option<Arc<Lease>>,
    _state: PhantomData<fn() -> S>,
}

impl<S: State> Clone for PgStore<S> {
    fn clone(&self) -> Self {
        PgStore {
            shared: self.shared.clone(),
            lease: self.lease.clone(),
            _state: PhantomData,
        }
    }
}

impl<S: State> std::fmt::Debug for PgStore<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("schema", &self.shared.options.schema)
            .field("lease", &self.lease.as_deref())
            .finish_non_exhaustive()
    }
}

impl<S: State> PgStore<S> {
    /// Connects to the database at `url` (a `postgresql://` URL or libpq key-value words,
    /// e.g. `host=/tmp/pg user=postgres dbname=postgres`), creates or migrates the schema,
    /// and returns the store. Fails within the deadline if the server cannot be reached.
    pub fn open(url: &str, options: PgOptions) -> Result<Self> {
        options.validate()?;
        let shared = conn::Shared::new(url, options.clone(), false)?;
        let schema = options.schema.clone();
        shared.run_read("opening the schema", async |c| {
            // Both requests go out before either answer is read: one round trip, where
            // the schema is already at this build's version.
            let (version, lz4) = tokio::join!(schema::stored_version(c), async {
                if options.toast_lz4 {
                    shared.toast.enable_lz4(c).await
                } else {
                    Ok(())
                }
            });
            lz4?;
            if version? != Some(schema::SCHEMA_VERSION) {
                schema::migrate(c, &schema).await?;
            }
            Ok(())
        })?;
        Ok(PgStore {
            shared: Arc::new(shared),
            lease: None,
            _state: PhantomData,
        })
    }

    /// Connects to the database at `url` for reading only: nothing is created or
    /// migrated (a schema without agentwal's tables, or at another version, is an
    /// `Error::Postgres` saying so), every write and lease call returns
    /// [`Error::ReadOnly`] before it reaches the server, and the sessions are read-only on
    /// the server too (`default_transaction_read_only`). What the CLI's read commands
    /// open. Reads see the database as it is at each call (each load is one snapshot).
    pub fn open_read_only(url: &str, options: PgOptions) -> Result<Self> {
        options.validate()?;
        let shared = conn::Shared::new(url, options.clone(), true)?;
        let schema = options.schema.clone();
        shared.run_read("opening the schema read-only", async |c| {
            schema::check_readable(c, &schema).await
        })?;
        Ok(PgStore {
            shared: Arc::new(shared),
            lease: None,
            _state: PhantomData,
        })
    }

    /// Whether this handle was opened with [`open_read_only`](Self::open_read_only).
    pub fn is_read_only(&self) -> bool {
        self.shared.read_only
    }

    /// The options this handle was opened with.
    pub fn options(&self) -> &PgOptions {
        &self.shared.options
    }

    /// The connections this handle's pool holds idle, and the sessions the handle opened
    /// so far: a test hook, to check that a burst of calls does not churn sessions and
    /// that idle ones close after [`PgOptions::pool_idle_time_max`].
    #[doc(hidden)]
    pub fn pool_counts(&self) -> (usize, u64) {
        self.shared.pool_counts()
    }

    /// Whether this handle's sessions compress the values they write with lz4
    /// ([`PgOptions::toast_lz4`], and the server has it): a test hook.
    #[doc(hidden)]
    pub fn values_lz4(&self) -> bool {
        self.shared.toast.is_lz4()
    }

    /// The epoch this handle writes `task` under: its lease's, if it holds one on `task`.
    fn epoch_for(&self, task: &str) -> Option<u64> {
        self.lease
            .as_ref()
            .filter(|l| l.task == task)
            .map(|l| l.epoch)
    }
}
