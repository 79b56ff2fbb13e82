//! The stores the workload runs against, behind one small trait.
//!
//! A new backend is a new file here holding a type that implements [`Backend`], its `mod`
//! line and one entry in [`ALL`]. The helpers it needs: [`crate::harness::drive`] runs the
//! workload's steps through its commit function, [`Measurement::from_run`] turns that
//! into figures, [`crate::harness::time_loads`] times its loads and reopens.

mod agentwal;
mod agentwal_recycled;
mod fsync_floor;
mod fsync_floor_group;
mod okaywal;
#[cfg(feature = "postgres")]
pub mod pg_cluster;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
mod postgres_floor;
#[cfg(feature = "postgres")]
mod postgres_seed;
mod sqlite;
mod sqlite_delta;
mod sqlite_seed;

use std::path::Path;
use std::time::Duration;

use plotters::style::RGBColor;

use crate::config::Config;
use crate::measurement::Measurement;

pub use self::agentwal::AGENTWAL;
pub use self::fsync_floor_group::FSYNC_FLOOR_GROUP;
pub use self::okaywal::OKAYWAL;
#[cfg(feature = "postgres")]
pub use self::postgres::AGENTWAL_POSTGRES;
#[cfg(feature = "postgres")]
pub use self::postgres_floor::POSTGRES_FLOOR;
#[cfg(feature = "postgres")]
pub use self::postgres_seed::POSTGRES_SEED;
pub use self::sqlite_delta::SQLITE_DELTA;
pub use self::sqlite_seed::SQLITE_SEED;

/// A store under test. `Sync` so the registry can be a `static`.
pub trait Backend: Sync {
    /// The name in the tables, the chart and `AGENTWAL_BENCH_BACKENDS`.
    fn name(&self) -> &'static str;

    /// Its bars' color in the chart.
    fn color(&self) -> RGBColor;

    /// Prepares `dir` for [`run`](Self::run) before the disk probe and outside the timed run
    /// and its I/O counters (a store that already lived, say); returns what that wrote.
    /// Most backends start from the empty directory and have nothing to prepare.
    fn prepare(&self, _cfg: &Config, _dir: &Path, _threads: usize) -> Option<Prepared> {
        None
    }

    /// Runs the workload with `threads` tasks in the directory `dir` (empty, or as
    /// [`prepare`](Self::prepare) left it) and measures it
    /// (the caller adds the disk probe). The figures a backend has no notion of (a load
    /// for a plain log, say) stay `None`.
    fn run(&self, cfg: &Config, dir: &Path, threads: usize) -> Measurement;

    /// A backend that acknowledges commits before they are durable is marked in the
    /// chart's legend, so its bars are not read as a fair peer.
    fn durable_per_commit(&self) -> bool {
        true
    }

    /// Whether it runs against the run's PostgreSQL cluster (which `main` then starts).
    fn needs_postgres(&self) -> bool {
        false
    }
}

/// What [`Backend::prepare`] did, outside the run's figures.
pub struct Prepared {
    /// Bytes the preparation's store appended to its log.
    pub log_bytes: u64,
    /// Bytes written to the stores' block device meanwhile (as `Measurement::device_bytes`).
    pub device_bytes: u64,
    pub elapsed: Duration,
}

/// Every backend, in the order of the tables and of the chart's bars.
pub static ALL: &[&dyn Backend] = &[
    &AGENTWAL,
    &agentwal::AGENTWAL_PERIODIC,
    &agentwal::AGENTWAL_UNCOMPRESSED,
    &SQLITE_SEED,
    &SQLITE_DELTA,
    &OKAYWAL,
    &fsync_floor::FSYNC_FLOOR,
    &FSYNC_FLOOR_GROUP,
];

/// Backends run only when `AGENTWAL_BENCH_BACKENDS` names them.
pub static BY_NAME_ONLY: &[&dyn Backend] = &[
    &agentwal::AGENTWAL_ZSTD_COMMIT,
    &agentwal::AGENTWAL_ZSTD_DELTAS,
    &agentwal::AGENTWAL_COMPACTING,
    &fsync_floor_group::FSYNC_FLOOR_GROUP_PREALLOC,
    &fsync_floor_group::FSYNC_FLOOR_GROUP_FALLOCATED,
    &agentwal_recycled::AGENTWAL_RECYCLED,
    &agentwal_recycled::AGENTWAL_RECYCLED_COLD,
    &agentwal_recycled::AGENTWAL_RECYCLED_UNCOMPRESSED,
];

/// The PostgreSQL suite (`AGENTWAL_BENCH_SUITE=postgres`, built with `--features
/// postgres`): agentwal on PostgreSQL, `postgres-seed` and `postgres-floor` on one
/// throwaway cluster, with the local engine beside them.
#[cfg(feature = "postgres")]
pub static POSTGRES_SUITE: &[&dyn Backend] = &[
    &AGENTWAL,
    &AGENTWAL_POSTGRES,
    &POSTGRES_SEED,
    &POSTGRES_FLOOR,
];

/// The PostgreSQL peers' names, for the note a build without `--features postgres` prints.
pub const POSTGRES_PEERS: [&str; 3] = ["agentwal-postgres", "postgres-seed", "postgres-floor"];

/// Whether `b` is `other`: backends are told apart by name, which is unique in [`ALL`].
pub fn is(b: &dyn Backend, other: &dyn Backend) -> bool {
    b.name() == other.name()
}
