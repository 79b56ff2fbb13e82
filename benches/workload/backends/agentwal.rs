//! agentwal itself: `Store::commit` with default `Options` (`agentwal`: bodies written as
//! encoded, compressed by compaction), the same with `SyncMode::Periodic`
//! (`agentwal-periodic`), which is not durable per commit, and with `Compression::None`
//! (`agentwal-uncompressed`), every body as encoded even through compaction; by name only
//! (`AGENTWAL_BENCH_BACKENDS`), `agentwal-zstd-commit`: snapshots compressed as they are
//! committed (`Compression::Zstd { deltas: false, .. }`, the default before compression
//! moved to compaction), `agentwal-zstd-deltas`: deltas too, the setting for a store
//! that would rather spend CPU than disk, and `agentwal-compacting`: the default with
//! segments small enough that compaction compresses during the run.

use std::path::Path;
use std::time::Duration;

use agentwal::{AgentState, Compression, Options, Store, SyncMode, ZSTD_LEVEL_DEFAULT};
use plotters::style::RGBColor;

use super::Backend;
use crate::config::Config;
use crate::generator::{delta_payload, expected_state, task_id};
use crate::harness::{drive, time_loads};
use crate::measurement::Measurement;
use crate::metering::{io_counters, io_since, read_bytes};

pub struct Agentwal {
    name: &'static str,
    color: RGBColor,
    sync: SyncMode,
    /// `None`: the default `Options::compression`.
    compression: Option<Compression>,
    /// `None`: the default `Options::segment_bytes` (64 MiB, more than a run writes).
    segment_bytes: Option<u64>,
    /// Run `Store::compact` after the commits (outside their figures), before the files
    /// are measured.
    compact_after: bool,
}

pub const AGENTWAL: Agentwal = Agentwal {
    name: "agentwal",
    color: RGBColor(0xD6, 0x27, 0x28),
    sync: SyncMode::Always,
    compression: None,
    segment_bytes: None,
    compact_after: false,
};

/// Outside the targets: a commit returns once written, and an fdatasync every 10 ms makes
/// it durable; it shows what the per-commit fsync costs.
pub const AGENTWAL_PERIODIC: Agentwal = Agentwal {
    name: "agentwal-periodic",
    color: RGBColor(0xF4, 0xA5, 0x82),
    sync: SyncMode::Periodic(Duration::from_millis(10)),
    compression: None,
    segment_bytes: None,
    compact_after: false,
};

/// Outside the targets: `agentwal` with every body stored as encoded, beside it in every
/// run, so that what compression saves and costs shows in one run.
pub const AGENTWAL_UNCOMPRESSED: Agentwal = Agentwal {
    name: "agentwal-uncompressed",
    color: RGBColor(0x8C, 0x1A, 0x1B),
    sync: SyncMode::Always,
    compression: Some(Compression::None),
    segment_bytes: None,
    compact_after: false,
};

/// By name only: `agentwal` with its snapshots compressed as they are committed, so that
/// what compressing on the commit path costs shows in one run.
pub const AGENTWAL_ZSTD_COMMIT: Agentwal = Agentwal {
    name: "agentwal-zstd-commit",
    color: RGBColor(0x9E, 0x4F, 0xA5),
    sync: SyncMode::Always,
    compression: Some(Compression::Zstd {
        level: ZSTD_LEVEL_DEFAULT,
        deltas: false,
    }),
    segment_bytes: None,
    compact_after: false,
};

/// By name only: `agentwal` with every body compressed as it is committed, deltas too, so
/// that what the disk gains and the commits pay shows in one run.
pub const AGENTWAL_ZSTD_DELTAS: Agentwal = Agentwal {
    name: "agentwal-zstd-deltas",
    color: RGBColor(0xE3, 0x77, 0xC2),
    sync: SyncMode::Always,
    compression: Some(Compression::Zstd {
        level: ZSTD_LEVEL_DEFAULT,
        deltas: true,
    }),
    segment_bytes: None,
    compact_after: false,
};

/// Segment bytes of [`AGENTWAL_COMPACTING`]: a run at 64 tasks fills about ten.
const COMPACTING_SEGMENT_BYTES: u64 = 4 << 20;

/// By name only: the default settings with 4 MiB segments, so that the background
/// compactor compresses sealed segments while the commits run (what it costs them shows
/// beside `agentwal`), and `Store::compact` after the commits, so that the files measured
/// are what compaction leaves: every sealed segment compressed, the active one raw. Its
/// bytes written include what compaction wrote.
pub const AGENTWAL_COMPACTING: Agentwal = Agentwal {
    name: "agentwal-compacting",
    color: RGBColor(0x6B, 0x3A, 0x2E),
    sync: SyncMode::Always,
    compression: None,
    segment_bytes: Some(COMPACTING_SEGMENT_BYTES),
    compact_after: true,
};

impl Backend for Agentwal {
    fn name(&self) -> &'static str {
        self.name
    }

    fn color(&self) -> RGBColor {
        self.color
    }

    fn durable_per_commit(&self) -> bool {
        matches!(self.sync, SyncMode::Always)
    }

    fn run(&self, cfg: &Config, dir: &Path, threads: usize) -> Measurement {
        self.run_with(cfg, dir, threads, &|_| ())
    }
}

impl Agentwal {
    /// [`Backend::run`], with `after_open` called on the directory once the store is
    /// open, before the commits (and outside their figures).
    pub fn run_with(
        &self,
        cfg: &Config,
        dir: &Path,
        threads: usize,
        after_open: &dyn Fn(&Path),
    ) -> Measurement {
        let payload = delta_payload(threads, cfg.steps);
        let io = io_counters();
        let d = Options::default();
        let options = Options {
            sync: self.sync,
            compression: self.compression.unwrap_or(d.compression),
            segment_bytes: self.segment_bytes.unwrap_or(d.segment_bytes),
            ..d
        };
        let store: Store = Store::open_with(dir, options).expect("open agentwal");
        after_open(dir);
        let read_before = read_bytes();
        let times = drive(
            threads,
            cfg.steps,
            |_| (),
            |_, task, seq, delta| {
                // The delta is the store's once committed: the cached state takes it over.
                let delta = std::mem::take(delta);
                let committed = store
                    .commit_owned(task, None, delta)
                    .expect("agentwal commit");
                debug_assert_eq!(committed, seq);
            },
        );
        let read = read_bytes() - read_before;
        let stats = store.stats();
        if self.compact_after {
            store.compact().expect("agentwal compact");
        }
        drop(store);
        let mut m = Measurement::from_run(&times, io_since(io), dir, payload);
        m.log_bytes = Some(stats.bytes_written as f64);
        m.fsyncs = Some(stats.fsyncs as f64);
        m.mean_batch = Some(stats.mean_batch_records);
        m.zero_bytes = Some(stats.zero_bytes_written as f64);
        m.read_bytes = Some(read as f64);
        let probe = task_id(0);
        let (warm, cold, recovery) = time_loads(
            cfg,
            || Store::<AgentState>::open_with(dir, Options::default()).expect("reopen agentwal"),
            |store| {
                store
                    .load_latest(&probe)
                    .expect("load_latest")
                    .expect("task 0 exists")
                    .state
            },
            &expected_state(0, cfg.steps),
        );
        m.load_warm_us = Some(warm);
        m.load_cold_us = Some(cold);
        m.recovery_ms = Some(recovery);
        m
    }
}
