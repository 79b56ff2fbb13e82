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
//! - `decode_state`: one postcard-encoded `AgentState` of 2,200 variables shaped like the
//!   LangGraph saver's, decoded by agentwal and by a copy of its types whose maps decode
//!   entry by entry (serde's derived code); throughput in encoded bytes.
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

#[path = "../common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::time::Duration;

use agentwal::log::SyncMode;
use agentwal::log::record::Salt;
use agentwal::{AgentDelta, Options};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main};
use tempfile::TempDir;

mod codec_commit;
mod decode;
mod history;

use codec_commit::{commit, record_codec};
use decode::decode_state;
use history::{compaction, load_latest, recovery};

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

fn criterion() -> Criterion {
    let c = Criterion::default();
    if quick() { c.without_plots() } else { c }
}

criterion_group! {
    name = benches;
    config = criterion();
    targets = record_codec, commit, load_latest, recovery, compaction, decode_state
}

criterion_main!(benches);
