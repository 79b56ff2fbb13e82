//! Benchmarks on a built history: loading the latest state, recovery, compaction.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{step, text};
use agentwal::log::{Log, LogOptions, SyncMode};
use agentwal::{AgentDelta, Options, Store};
use criterion::{BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput};
use tempfile::TempDir;

use crate::{Config, HISTORY_STEPS, TASKS, config, mib, nosync};

// ---------------------------------------------------------------------------------------

/// A store holding one task, "task", of `steps` agent steps; returns the bytes of the
/// records a fold of its latest checkpoint reads.
fn build_history(dir: &Path, steps: u64) -> u64 {
    let store: Store = Store::open_with(dir, nosync()).expect("open the store");
    for i in 1..=steps {
        store.commit("task", &step(1, i)).expect("commit");
    }
    store.flush().expect("flush");
    let infos = store.list_checkpoints("task").expect("list checkpoints");
    let base = infos.iter().rposition(|c| c.snapshot).unwrap_or(0);
    let read: u64 = infos[base..].iter().map(|c| c.bytes).sum();
    println!(
        "load_latest setup: {steps} steps; a fold reads {} record(s) ({} from seq {}, then {} deltas), {read} B",
        infos.len() - base,
        if infos[base].snapshot {
            "a snapshot"
        } else {
            "the first delta"
        },
        infos[base].seq,
        infos.len() - base - 1,
    );
    read
}

pub(crate) fn load_latest(c: &mut Criterion) {
    let cfg = config();
    let root = cfg.tempdir("bench-micro-load-");
    let stores: Vec<(u64, PathBuf, u64)> = HISTORY_STEPS
        .iter()
        .map(|&steps| {
            let dir = root.path().join(format!("steps-{steps}"));
            let read = build_history(&dir, steps);
            (steps, dir, read)
        })
        .collect();
    let mut group = cfg.group(c, "load_latest");
    // The cached loads first: they report no throughput, which a group cannot unset.
    for (steps, dir, _) in &stores {
        let store: Store = Store::open_with(dir, nosync()).expect("open the store");
        let warm = store
            .load_latest("task")
            .expect("load")
            .expect("task exists");
        assert_eq!(warm.seq, *steps);
        group.bench_function(BenchmarkId::new("cached", steps), |b| {
            b.iter(|| black_box(store.load_latest("task").expect("load").expect("exists")));
        });
    }
    for (steps, dir, read) in &stores {
        let options = Options {
            cache_bytes: 0,
            ..nosync()
        };
        let store: Store = Store::open_with(dir, options).expect("open the store");
        assert_eq!(
            store
                .load_latest("task")
                .expect("load")
                .expect("exists")
                .seq,
            *steps
        );
        group.throughput(Throughput::Bytes(*read));
        group.bench_function(BenchmarkId::new("fold", steps), |b| {
            b.iter(|| black_box(store.load_latest("task").expect("load").expect("exists")));
        });
    }
    group.finish();
}

// ---------------------------------------------------------------------------------------

pub(crate) fn recovery(c: &mut Criterion) {
    let cfg = config();
    let target: u64 = if cfg.small { 8 << 20 } else { 64 << 20 };
    let dir = cfg.tempdir("bench-micro-recovery-");
    {
        let store: Store = Store::open_with(dir.path(), nosync()).expect("open the store");
        let mut i = 0;
        while store.stats().bytes_written < target {
            i += 1;
            for t in 0..TASKS {
                store
                    .commit(&format!("task-{t}"), &step(t, i))
                    .expect("commit");
            }
        }
        store.flush().expect("flush");
    }
    // One open untimed: checks the store and warms the page cache.
    let report = Store::<agentwal::AgentState>::open_with(dir.path(), nosync())
        .expect("open the store")
        .recovery_report();
    println!(
        "recovery setup: {} records, {} B of records, {} segment(s), {} tasks",
        report.records, report.bytes, report.segments, report.tasks
    );
    let size = mib(report.bytes);
    let mut group = cfg.group(c, "recovery");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .throughput(Throughput::Bytes(report.bytes));
    group.bench_function(BenchmarkId::new("store_open", &size), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let started = Instant::now();
                let store: Store = Store::open_with(dir.path(), nosync()).expect("open");
                total += started.elapsed();
                assert_eq!(black_box(&store).recovery_report().records, report.records);
            }
            total
        });
    });
    group.bench_function(BenchmarkId::new("log_replay", &size), |b| {
        let options = LogOptions {
            sync: SyncMode::Never,
            ..LogOptions::default()
        };
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut records = 0u64;
                let started = Instant::now();
                let log = Log::open_with(dir.path(), options, |rec| {
                    records += 1;
                    black_box(rec.payload);
                    Ok(())
                })
                .expect("open the log");
                total += started.elapsed();
                assert_eq!(records, report.records);
                drop(log);
            }
            total
        });
    });
    group.finish();
}

// ---------------------------------------------------------------------------------------

/// Copies the files of a closed store (all but its lock file) into a fresh directory.
fn copy_store(cfg: &Config, from: &Path) -> TempDir {
    let to = cfg.tempdir("bench-micro-compact-");
    for entry in std::fs::read_dir(from).expect("list the prepared store") {
        let entry = entry.expect("read a directory entry");
        if entry.file_name() != agentwal::log::LOCK_FILE_NAME {
            std::fs::copy(entry.path(), to.path().join(entry.file_name()))
                .expect("copy a segment file");
        }
    }
    to
}

pub(crate) fn compaction(c: &mut Criterion) {
    let cfg = config();
    let (target, segment_bytes): (u64, u64) = if cfg.small {
        (8 << 20, 1 << 20)
    } else {
        (32 << 20, 4 << 20)
    };
    let options = Options {
        segment_bytes,
        keep_checkpoints: Some(1),
        ..nosync()
    };
    let prepared = cfg.tempdir("bench-micro-compact-prepared-");
    let log_bytes = {
        let store: Store = Store::open_with(prepared.path(), options).expect("open the store");
        let mut i = 0;
        while store.stats().bytes_written < target {
            i += 1;
            for t in 0..TASKS {
                let delta = AgentDelta::default()
                    .set("scratchpad", text(t * 1_000_003 + i, 2000))
                    .set("step", i as i64)
                    .set("phase", if i.is_multiple_of(2) { "plan" } else { "act" });
                store.commit(&format!("task-{t}"), &delta).expect("commit");
            }
        }
        store.flush().expect("flush");
        let s = store.stats();
        // Stats::live_bytes counts checkpoints retention no longer serves until a pass
        // forgets them; the live figure after the check pass below is the real one.
        println!(
            "compaction setup: {} B of log records in {} segments, {i} steps per task",
            s.bytes_written, s.segments
        );
        s.bytes_written
    };
    // One pass untimed: checks that it compacts, and sizes the measurement.
    let copy = copy_store(&cfg, prepared.path());
    let store: Store = Store::open_with(copy.path(), options).expect("open the copy");
    let started = Instant::now();
    let report = store.compact().expect("compact");
    let once = started.elapsed();
    let after = store.stats();
    println!(
        "compaction check: {once:?}, {} segments deleted, {} records rewritten, {} B reclaimed; \
         after the pass {} B live in {} segments",
        report.segments_deleted,
        report.records_rewritten,
        report.bytes_reclaimed,
        after.live_bytes,
        after.segments
    );
    assert!(report.segments_deleted > 0, "the pass compacted nothing");
    drop((store, copy));

    let mut group = cfg.group(c, "compaction");
    // A few passes per sample: each also costs a copy and an open, untimed, so the
    // measurement time is sized from the check pass rather than fixed.
    let measurement = (once * 100).clamp(Duration::from_millis(250), cfg.measurement);
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(measurement / 4)
        .measurement_time(measurement)
        .throughput(Throughput::Bytes(log_bytes));
    group.bench_function(BenchmarkId::new("compact", mib(log_bytes)), |b| {
        b.iter_batched(
            || {
                let copy = copy_store(&cfg, prepared.path());
                let store: Store = Store::open_with(copy.path(), options).expect("open");
                (copy, store)
            },
            |(copy, store)| {
                let report = store.compact().expect("compact");
                // Dropped after the timing, the store before its directory.
                (store, copy, report)
            },
            BatchSize::PerIteration,
        );
    });
    group.finish();
}
