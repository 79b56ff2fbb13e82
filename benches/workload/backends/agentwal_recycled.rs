//! By name only (`AGENTWAL_BENCH_BACKENDS`): `agentwal-recycled`, the `agentwal` backend
//! (the same workload, the same code, the same default `Options`) on a store that lived
//! before, whose **active segment is a recycled file** when the timed run starts
//! (docs/format.md §6): its blocks were written by an earlier life, so appends to it change
//! no file size and convert no unwritten extent. A fresh store's first segment never
//! fills in this workload, so `agentwal` never gets there.
//!
//! [`Backend::prepare`] makes that store in the run's directory, before the disk probe and
//! outside the run's figures, with the default `segment_bytes` (64 MiB):
//!
//! 1. a filler task of 1 MiB deltas (`SyncMode::Never`, uncompressed, no background
//!    compaction) until the log has rotated twice (segments 1 and 2 sealed, 3 active);
//! 2. the filler deleted and `Store::compact`: both sealed segments are dead; the pass
//!    retires segment 1's file to `1.wal.free` and puts its (empty) compacted segment in
//!    place of segment 2's file, so one file waits for reuse;
//! 3. a second filler until a rotation takes it (`Stats::free_segments` falls): segment 4,
//!    the active one, is now a recycled file, about 1 MiB into it. That filler is deleted
//!    and compacted too (segment 3 becomes an empty compacted segment, 2 goes), the store
//!    closed (a recycled segment's close record), every file fsynced. Left: `3.wal`
//!    (68 B) and `4.wal` (64 MiB, recycled), nothing waiting in `.wal.free`. About 190 MiB
//!    appended (and as many zeros ahead: the filler never syncs, so agentwal zeroes
//!    ahead of it), a quarter of a second on the development machine.
//!
//! The run then opens the directory with `agentwal`'s options and measures as `agentwal`
//! does. Before it, the backend checks the active segment's header (it must carry the
//! recycled flag) and how far from the header on its blocks are written extents (FIEMAP),
//! and fails if the workload would not fit there; after it, that the log did not rotate
//! onto a new file. Its "on disk" figure is the recycled segment's full 64 MiB (and any
//! retired file waiting for reuse, 64 MiB each; none here), so it is not comparable with a
//! fresh store's; nor is its recovery, which opens a 64 MiB segment.
//!
//! `agentwal-recycled-cold`, by name only as well: the same, with the active segment's
//! pages dropped from the page cache (`posix_fadvise(DONTNEED)`) once the store is open
//! (its recovery reads the segment, so not before), as a long-lived store's retired file
//! may well be by the time a rotation reuses it: a write into part of a page that is not
//! cached may then have to read it first.
//!
//! `agentwal-recycled-uncompressed`, by name only: the recycled store measured as
//! `agentwal-uncompressed` (`Compression::None`), to tell what compression costs there.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use agentwal::log::{
    SEGMENT_HEADER_BYTES, SegmentHeader, parse_free_file_name, parse_segment_file_name,
};
use agentwal::storage::{RealStorage, Storage};
use agentwal::{AgentDelta, Compression, Options, Store, SyncMode};
use plotters::style::RGBColor;

use super::agentwal::{AGENTWAL, AGENTWAL_UNCOMPRESSED, Agentwal};
use super::{Backend, Prepared};
use crate::config::Config;
use crate::generator::delta_payload;
use crate::measurement::Measurement;
use crate::metering::{io_counters, io_since};

pub struct AgentwalRecycled {
    name: &'static str,
    color: RGBColor,
    /// The backend whose options and measurement it runs.
    base: &'static Agentwal,
    /// Drop the active segment from the page cache after preparing.
    cold: bool,
}

pub const AGENTWAL_RECYCLED: AgentwalRecycled = AgentwalRecycled {
    name: "agentwal-recycled",
    color: RGBColor(0xFF, 0x7F, 0x0E),
    base: &AGENTWAL,
    cold: false,
};

pub const AGENTWAL_RECYCLED_COLD: AgentwalRecycled = AgentwalRecycled {
    name: "agentwal-recycled-cold",
    color: RGBColor(0xBC, 0xBD, 0x22),
    base: &AGENTWAL,
    cold: true,
};

pub const AGENTWAL_RECYCLED_UNCOMPRESSED: AgentwalRecycled = AgentwalRecycled {
    name: "agentwal-recycled-uncompressed",
    color: RGBColor(0x17, 0xBE, 0xCF),
    base: &AGENTWAL_UNCOMPRESSED,
    cold: false,
};

/// Bytes of each filler delta (one variable, overwritten: the state stays this size).
const FILLER_BYTES: usize = 1 << 20;

/// Rotations of the first filler: each leaves a sealed segment for compaction to retire.
const FILLER_ROTATIONS: u64 = 2;

impl Backend for AgentwalRecycled {
    fn name(&self) -> &'static str {
        self.name
    }

    fn color(&self) -> RGBColor {
        self.color
    }

    fn prepare(&self, _cfg: &Config, dir: &Path, _threads: usize) -> Option<Prepared> {
        Some(prepare(dir))
    }

    fn run(&self, cfg: &Config, dir: &Path, threads: usize) -> Measurement {
        let (path, id) = active_segment(dir);
        let written = check_recycled(&path, "at the start of the run");
        // The log appends at most the deltas' bytes plus their snapshots; with default
        // compression about the postcard payload (28 MiB at T=64). Generously twice that.
        let needed = 2 * delta_payload(threads, cfg.steps).0;
        assert!(
            written >= needed,
            "the recycled segment {} has only {written} bytes of written extents, the run \
             needs about {needed}",
            path.display()
        );
        let free = free_files(dir);
        // Dropped after the open: its recovery reads the active segment into the page
        // cache again.
        let cold = |dir: &Path| {
            if self.cold {
                drop_from_page_cache(&active_segment(dir).0);
            }
        };
        let mut m = self.base.run_with(cfg, dir, threads, &cold);
        let (after, after_id) = active_segment(dir);
        assert_eq!(
            after_id,
            id,
            "the run rotated from the recycled segment to {}",
            after.display()
        );
        check_recycled(&after, "after the run");
        m.free_files = Some(free as f64);
        m.recycled_written_bytes = Some(written as f64);
        m
    }
}

/// Makes the store described in the module's documentation in `dir` (empty).
fn prepare(dir: &Path) -> Prepared {
    let t0 = Instant::now();
    let io = io_counters();
    let options = Options {
        sync: SyncMode::Never,
        compression: Compression::None,
        auto_compact: false,
        ..Options::default()
    };
    let store: Store = Store::open_with(dir, options).expect("open the store to prepare");
    let mut step = 0u64;
    let mut commit = |task: &str| {
        step += 1;
        let delta = AgentDelta::default().set("filler", filler(step));
        store.commit(task, &delta).expect("commit filler");
    };

    // 1. Two rotations.
    let segments = store.stats().segments;
    while store.stats().segments < segments + FILLER_ROTATIONS {
        commit("filler-1");
    }
    // 2. Retire the sealed segments.
    store.delete_task("filler-1").expect("delete filler-1");
    store.flush().expect("flush");
    store.compact().expect("compact after filler-1");
    let free = store.stats().free_segments;
    assert!(
        free >= 1,
        "compaction retired none of the filler's {FILLER_ROTATIONS} sealed segments"
    );
    // 3. A rotation onto a retired file.
    while store.stats().free_segments >= free {
        commit("filler-2");
    }
    check_recycled(
        &active_segment(dir).0,
        "after the rotation onto a retired file",
    );
    store.delete_task("filler-2").expect("delete filler-2");
    store.flush().expect("flush");
    store.compact().expect("compact after filler-2");
    store.flush().expect("flush");
    let log_bytes = store.stats().bytes_written;
    drop(store);
    sync_all(dir);
    check_recycled(&active_segment(dir).0, "after preparing");
    Prepared {
        log_bytes,
        device_bytes: io_since(io).1,
        elapsed: t0.elapsed(),
    }
}

/// A filler value: `FILLER_BYTES` of text that differs from step to step.
fn filler(step: u64) -> String {
    let line = format!("filler step {step:>12} ");
    line.repeat(FILLER_BYTES / line.len())
}

/// The log's last segment file (the active one) and its id.
fn active_segment(dir: &Path) -> (PathBuf, u64) {
    std::fs::read_dir(dir)
        .expect("list the store")
        .filter_map(|e| {
            let name = e.expect("list the store").file_name();
            let id = parse_segment_file_name(name.to_str()?)?;
            Some((dir.join(name), id))
        })
        .max_by_key(|(_, id)| *id)
        .expect("the store has a segment file")
}

/// Retired files waiting for reuse.
fn free_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .expect("list the store")
        .filter(|e| {
            let name = e.as_ref().expect("list the store").file_name();
            name.to_str().and_then(parse_free_file_name).is_some()
        })
        .count()
}

/// Fails unless the segment at `path` is a recycled file; returns how many bytes from its
/// header on are written extents (agentwal's own FIEMAP probe).
fn check_recycled(path: &Path, when: &str) -> u64 {
    let file = RealStorage
        .open(path, false)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut header = [0u8; SEGMENT_HEADER_BYTES];
    file.read_exact_at(&mut header, 0)
        .expect("read the segment header");
    let header = SegmentHeader::decode(&header, path).expect("decode the segment header");
    assert!(
        header.is_recycled(),
        "{when}: the active segment {} is not a recycled file (flags {:#x})",
        path.display(),
        header.flags
    );
    let from = SEGMENT_HEADER_BYTES as u64;
    file.written_end(from) - from
}

/// fsyncs every file of `dir` and the directory: nothing of the preparation is left for
/// the run's device counter or its disk.
fn sync_all(dir: &Path) {
    for e in std::fs::read_dir(dir).expect("list the store") {
        let path = e.expect("list the store").path();
        if path.is_file() {
            File::open(&path)
                .and_then(|f| f.sync_all())
                .unwrap_or_else(|e| panic!("sync {}: {e}", path.display()));
        }
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .expect("sync the store directory");
}

/// Drops the (synced) file at `path` from the page cache.
fn drop_from_page_cache(path: &Path) {
    let f = File::open(path).expect("open the active segment");
    f.sync_all().expect("sync the active segment");
    // SAFETY: a plain syscall on an open descriptor.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "posix_fadvise(DONTNEED) on {}", path.display());
}
