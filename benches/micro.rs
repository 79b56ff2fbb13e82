//! Criterion micro benchmarks of the engine's single-threaded paths:
//!
//! - `record`: encode (`payload_crc` + `encode_into` into a reused buffer) and decode
//!   (`decode`: header checks and checksum) of one log record, payloads of 64 B, 1 KiB,
//!   16 KiB and 256 KiB; throughput in payload bytes.
//! - `commit`: `Store::commit` of an `AgentDelta` holding one tool-result message of
//!   ~256 B, 2 KiB, 16 KiB and 128 KiB. `commit/nosync/*` runs with `SyncMode::Never`, so
//!   it measures the CPU path (encode, snapshot policy, cache update, write to the page
//!   cache); `commit/durable/2KiB` (`SyncMode::Always`, one fdatasync per commit) is the
//!   reference with the disk in it. Commits go to tasks of 64 checkpoints each (then the
//!   next task), so the figure includes the amortized snapshots a task's history causes;
//!   every 32 MiB of deltas the store is replaced by a fresh one, outside the timing.
//!   Throughput in postcard-encoded delta bytes.
//! - `load_latest`: one task of 10, 100 and 1000 agent steps (~1.9 KB delta each: an
//!   assistant message with a tool call, a tool result, three variables).
//!   `load_latest/cached/N`: the latest-state cache on (default options): a cache hit.
//!   `load_latest/fold/N`: `cache_bytes: 0`: reads the fold base (a snapshot, or the
//!   first delta) and the deltas after it, and folds them; throughput in bytes of the
//!   records read.
//! - `recovery`: opening a store of ~64 MiB of records (64 tasks of agent steps, default
//!   64 MiB segments), page cache warm. `recovery/store_open`: `Store::open_with` (log scan
//!   with checksums, index rebuild, the open's fsync of the tail segment);
//!   `recovery/log_replay`: `Log::open_with` with a visitor that does nothing (the scan
//!   alone). Throughput in record bytes scanned (`RecoveryReport::bytes`).
//! - `compaction`: `Store::compact()` over a copy of a ~32 MiB store (4 MiB segments) of
//!   64 tasks with `keep_checkpoints: Some(1)` whose steps overwrite a ~2 KB scratchpad
//!   variable, so almost every record is dead. Each iteration compacts a fresh copy of the
//!   prepared directory (copied and opened outside the timing). Throughput in log bytes
//!   before compaction.
//!
//! The stores live under Cargo's target tmp directory (on the project's disk), not in
//! `/tmp`, which may be a tmpfs; `AGENTWAL_BENCH_DIR` puts them elsewhere. They are built
//! once per group, outside the timing (also when a filter selects only some benchmarks).
//! `AGENTWAL_BENCH_QUICK=1` is a smoke run: short warm-up and measurement, 10 samples,
//! an 8 MiB recovery store and an 8 MiB compaction store (1 MiB segments).
//!
//! ```text
//! cargo bench --bench micro                          # ~4 minutes on 2 cores
//! AGENTWAL_BENCH_QUICK=1 cargo bench --bench micro   # smoke run, well under a minute
//! cargo bench --bench micro -- load_latest           # one group
//! ```

mod common;

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentwal::log::record::{self, RecordHeader, Salt};
use agentwal::log::{FLAG_BATCH_END, FLAG_BATCH_START};
use agentwal::log::{Log, LogOptions, SyncMode};
use agentwal::{AgentDelta, Message, Options, Store};
use common::{step, text};
use criterion::measurement::WallTime;
use criterion::{
    BatchSize, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group,
    criterion_main,
};
use tempfile::TempDir;

/// Records of format v2 carry their segment's salt in their checksums.
const SALT: Salt = Salt::Salted(0x5a17_0001);

const RECORD_PAYLOADS: [(usize, &str); 4] = [
    (64, "64B"),
    (1 << 10, "1KiB"),
    (16 << 10, "16KiB"),
    (256 << 10, "256KiB"),
];
const COMMIT_PAYLOADS: [(usize, &str); 4] = [
    (256, "256B"),
    (2 << 10, "2KiB"),
    (16 << 10, "16KiB"),
    (128 << 10, "128KiB"),
];
/// Commits per task in the `commit` group before it moves on to the next task.
const COMMITS_PER_TASK: u64 = 64;
/// Delta bytes committed to one store before the `commit` group starts a fresh one.
const COMMIT_STORE_BYTES: u64 = 32 << 20;
const HISTORY_STEPS: [u64; 3] = [10, 100, 1000];
const TASKS: u64 = 64;

/// Run-wide settings.
struct Config {
    /// Smoke run (`AGENTWAL_BENCH_QUICK`), or not a `--bench` run (`cargo test --benches`,
    /// `--list`): small stores.
    small: bool,
    warm_up: Duration,
    measurement: Duration,
    /// Where the stores go.
    base: PathBuf,
}

/// `AGENTWAL_BENCH_QUICK` set to something other than empty or `0`: a smoke run.
fn quick() -> bool {
    std::env::var("AGENTWAL_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
}

fn config() -> Config {
    let quick = quick();
    let benching = std::env::args().any(|a| a == "--bench");
    let base = std::env::var_os("AGENTWAL_BENCH_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from);
    std::fs::create_dir_all(&base).expect("create the benchmark directory");
    let (warm_up, measurement) = if quick {
        (Duration::from_millis(200), Duration::from_millis(500))
    } else {
        (Duration::from_secs(1), Duration::from_secs(3))
    };
    Config {
        small: quick || !benching,
        warm_up,
        measurement,
        base,
    }
}

impl Config {
    fn group<'a>(&self, c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
        let mut group = c.benchmark_group(name);
        group
            .warm_up_time(self.warm_up)
            .measurement_time(self.measurement);
        if self.small {
            group.sample_size(10);
        }
        group
    }

    fn tempdir(&self, prefix: &str) -> TempDir {
        tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(&self.base)
            .expect("create a temporary directory")
    }
}

fn encoded_len(delta: &AgentDelta) -> u64 {
    postcard::to_allocvec(delta)
        .expect("encode the delta")
        .len() as u64
}

/// Options for building and benchmarking stores: no fsync, no background compaction.
fn nosync() -> Options {
    Options {
        sync: SyncMode::Never,
        auto_compact: false,
        ..Options::default()
    }
}

fn mib(bytes: u64) -> String {
    format!("{}MiB", bytes >> 20)
}

// ---------------------------------------------------------------------------------------

fn record_codec(c: &mut Criterion) {
    let cfg = config();
    let mut group = cfg.group(c, "record");
    for (len, name) in RECORD_PAYLOADS {
        let payload = text(len as u64, len).into_bytes();
        let header = RecordHeader {
            payload_len: len as u32,
            lsn: 1 << 20,
            kind: 1,
            flags: FLAG_BATCH_START | FLAG_BATCH_END,
        };
        group.throughput(Throughput::Bytes(len as u64));
        let mut out = Vec::with_capacity(header.record_bytes() as usize);
        group.bench_function(BenchmarkId::new("encode", name), |b| {
            b.iter(|| {
                out.clear();
                let payload = black_box(payload.as_slice());
                let crc = record::payload_crc(payload);
                record::encode_into(&mut out, SALT, black_box(&header), crc, payload);
                black_box(out.len())
            });
        });
        // Encoded here too: a filter may have skipped the encode benchmark.
        let mut encoded = Vec::new();
        record::encode_into(
            &mut encoded,
            SALT,
            &header,
            record::payload_crc(&payload),
            &payload,
        );
        let (decoded, _) = record::decode(&encoded, SALT).expect("decode the encoded record");
        assert_eq!(decoded, header);
        group.bench_function(BenchmarkId::new("decode", name), |b| {
            b.iter(|| {
                let (h, p) = record::decode(black_box(&encoded), SALT).expect("decode");
                black_box((h.lsn, p.len()))
            });
        });
    }
    group.finish();
}

// ---------------------------------------------------------------------------------------

/// `iters` commits of `delta`, tasks of `COMMITS_PER_TASK` checkpoints; a fresh store every
/// `COMMIT_STORE_BYTES` of deltas (created, closed and deleted outside the timing).
fn timed_commits(
    cfg: &Config,
    options: Options,
    delta: &AgentDelta,
    delta_bytes: u64,
    iters: u64,
) -> Duration {
    let per_store = (COMMIT_STORE_BYTES / delta_bytes).max(1);
    let names: Vec<String> = (0..per_store.min(iters).div_ceil(COMMITS_PER_TASK))
        .map(|t| format!("task-{t}"))
        .collect();
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let n = (iters - done).min(per_store);
        let dir = cfg.tempdir("bench-micro-commit-");
        let store: Store = Store::open_with(dir.path(), options).expect("open the store");
        let started = Instant::now();
        for i in 0..n {
            let task = &names[(i / COMMITS_PER_TASK) as usize];
            black_box(store.commit(task, black_box(delta)).expect("commit"));
        }
        total += started.elapsed();
        done += n;
        drop(store);
        drop(dir);
    }
    total
}

fn commit(c: &mut Criterion) {
    let cfg = config();
    let mut group = cfg.group(c, "commit");
    for (len, name) in COMMIT_PAYLOADS {
        let delta = AgentDelta::default().message(Message::tool("call-0001", text(7, len)));
        let bytes = encoded_len(&delta);
        group.throughput(Throughput::Bytes(bytes));
        group.bench_function(BenchmarkId::new("nosync", name), |b| {
            b.iter_custom(|iters| timed_commits(&cfg, nosync(), &delta, bytes, iters));
        });
    }
    let (len, name) = COMMIT_PAYLOADS[1];
    let delta = AgentDelta::default().message(Message::tool("call-0001", text(7, len)));
    let bytes = encoded_len(&delta);
    let durable = Options {
        sync: SyncMode::Always,
        auto_compact: false,
        ..Options::default()
    };
    group
        .throughput(Throughput::Bytes(bytes))
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10);
    group.bench_function(BenchmarkId::new("durable", name), |b| {
        b.iter_custom(|iters| timed_commits(&cfg, durable, &delta, bytes, iters));
    });
    group.finish();
}

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

fn load_latest(c: &mut Criterion) {
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

fn recovery(c: &mut Criterion) {
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

fn compaction(c: &mut Criterion) {
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

fn criterion() -> Criterion {
    let c = Criterion::default();
    if quick() { c.without_plots() } else { c }
}

criterion_group! {
    name = benches;
    config = criterion();
    targets = record_codec, commit, load_latest, recovery, compaction
}
criterion_main!(benches);
