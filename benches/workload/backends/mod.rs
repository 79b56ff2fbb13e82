//! The stores the workload runs against, behind one small trait.
//!
//! A new backend is a new file here holding a type that implements [`Backend`], its `mod`
//! line and one entry in [`ALL`]. The helpers it needs: [`crate::harness::drive`] runs the
//! workload's steps through its commit function, [`Measurement::from_run`] turns that
//! into figures, [`crate::harness::time_loads`] times its loads and reopens.

mod agentwal;
mod fsync_floor;
mod fsync_floor_group;
mod okaywal;
mod sqlite;
mod sqlite_delta;
mod sqlite_seed;

use std::path::Path;

use plotters::style::RGBColor;

use crate::config::Config;
use crate::measurement::Measurement;

pub use self::agentwal::AGENTWAL;
pub use self::fsync_floor_group::FSYNC_FLOOR_GROUP;
pub use self::okaywal::OKAYWAL;
pub use self::sqlite_delta::SQLITE_DELTA;
pub use self::sqlite_seed::SQLITE_SEED;

/// A store under test. `Sync` so the registry can be a `static`.
pub trait Backend: Sync {
    /// The name in the tables, the chart and `AGENTWAL_BENCH_BACKENDS`.
    fn name(&self) -> &'static str;

    /// Its bars' color in the chart.
    fn color(&self) -> RGBColor;

    /// Runs the workload with `threads` tasks in the empty directory `dir` and measures it
    /// (the caller adds the disk probe). The figures a backend has no notion of (a load
    /// for a plain log, say) stay `None`.
    fn run(&self, cfg: &Config, dir: &Path, threads: usize) -> Measurement;

    /// A backend that acknowledges commits before they are durable is marked in the
    /// chart's legend, so its bars are not read as a fair peer.
    fn durable_per_commit(&self) -> bool {
        true
    }
}

/// Every backend, in the order of the tables and of the chart's bars.
pub static ALL: &[&dyn Backend] = &[
    &AGENTWAL,
    &agentwal::AGENTWAL_PERIODIC,
    &SQLITE_SEED,
    &SQLITE_DELTA,
    &OKAYWAL,
    &fsync_floor::FSYNC_FLOOR,
    &FSYNC_FLOOR_GROUP,
];

/// Whether `b` is `other`: backends are told apart by name, which is unique in [`ALL`].
pub fn is(b: &dyn Backend, other: &dyn Backend) -> bool {
    b.name() == other.name()
}
