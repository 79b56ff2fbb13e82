//! The agent-workload benchmark: agentwal against SQLite (two designs), okaywal and the
//! fsync floor of the disk, all in one run, on the same disk.
//!
//! ```text
//! cargo bench --bench workload                          # full run (several minutes)
//! AGENTWAL_BENCH_QUICK=1 cargo bench --bench workload   # CI smoke run (well under a minute)
//! ```
//!
//! # The workload
//! T concurrent tasks, one thread each (T = 1, 8, 64), S steps per task (200). A step adds
//! two messages to the task's state, an assistant message with a tool call (~300 B) and
//! the tool's result (~1.5 KB of deterministic pseudo-random text), and sets three
//! variables (`phase`, `step`, `last_tool`). A step is durable before the task's next
//! step starts. After the run: the latest state of task 0 is loaded (the median of many
//! loads on a warm handle, and the first load on freshly opened handles), the store is
//! reopened (recovery time) and its files are measured.
//!
//! # Backends
//! - `agentwal`: `Store::commit` with default `Options` (`SyncMode::Always`; bodies
//!   written as encoded, compressed with zstd level 1 by compaction, which a run this
//!   short, within one segment, never starts); beside it, outside the targets,
//!   `agentwal-uncompressed` (`Compression::None`) and `agentwal-periodic`
//!   (`SyncMode::Periodic`, not durable per commit). `agentwal-zstd-commit` (snapshots
//!   compressed as they are committed), `agentwal-zstd-deltas` (deltas too) and
//!   `agentwal-compacting` (4 MiB segments, which the background compactor compresses
//!   during the run, and `Store::compact` after it) run only when
//!   `AGENTWAL_BENCH_BACKENDS` names them.
//!   `agentwal-recycled` (by name only): `agentwal`
//!   on a store prepared before the run (not counted) so that its active segment is a
//!   recycled file, as in a long-lived store (`backends/agentwal_recycled.rs`);
//!   `agentwal-recycled-cold` (by name only): the same with that file dropped from the
//!   page cache first; `agentwal-recycled-uncompressed` (by name only): the recycled
//!   store with `Compression::None`.
//! - `sqlite-seed`: what most agent code does today: `checkpoints(task_id, checkpoint_seq,
//!   state, created_at)`, one `INSERT OR REPLACE` of the full state as JSON per step,
//!   `journal_mode=WAL`, `synchronous=FULL`, one connection per thread, busy_timeout 10 s
//!   (an `SQLITE_BUSY` that still escapes is retried and counted).
//! - `sqlite-delta`: one row per step's delta (JSON), same pragmas; a load folds the rows.
//! - `okaywal`: one entry per step (the delta, postcard-encoded); no state index, so no
//!   load figure.
//! - `fsync-floor`: a plain file, `write` + `sync_data` of each step (length, crc32,
//!   postcard delta) behind a mutex; `fsync-floor-group`: the same file format with
//!   leader/follower group commit: the physical limit of this disk for this workload.
//!   `fsync-floor-group-prealloc` (only when `AGENTWAL_BENCH_BACKENDS` names it): the
//!   group floor writing with `pwrite` into a file zero-filled in 4 MiB chunks and synced
//!   before the run (not counted), so no fdatasync persists a size or an extent;
//!   `fsync-floor-group-fallocated` (by name only): the same file reserved with
//!   `fallocate` instead (unwritten extents, as agentwal's segments when it does not zero
//!   ahead).
//!
//! # Figures
//! - commits/s: T × S over the wall time from a common start to the last commit.
//! - commit latency: p50/p99 of the time each step's durable write took.
//! - on disk: sum of file sizes after the run (and allocated blocks, as `du` counts them).
//! - written / delta: bytes the process handed to `write`-family syscalls during the run
//!   (`wchar` in /proc/self/io: records, snapshots, preallocation zeros, SQLite's WAL
//!   frames and checkpoints) over the delta payload, the postcard encoding of every step's
//!   delta; "device" uses `write_bytes` instead: the bytes sent to the block layer (whole
//!   pages, counted each time a page is dirtied again after a sync).
//! - load_latest: warm is the median over many loads on one handle; cold is the median of
//!   the first load on a freshly opened handle (page cache warm; the open is not counted).
//! - CPU (from every worker's `init` done to every worker's last commit): the share of
//!   all cores the whole machine was busy (/proc/stat: everything but idle and iowait)
//!   and that busy time per commit, this process's CPU per commit (`getrusage`, every
//!   thread) and the committing threads' own CPU inside their commits: whether a run was
//!   bound by CPU or by the disk's fdatasync.
//! - recovery: time to open the store after the run (for SQLite: open, set the pragmas
//!   and run the first query; for okaywal: `WriteAheadLog::recover` reading every entry
//!   still in the log; for the floors: read the file and check every crc).
//!
//! Also: recovery of a large agentwal store (~1 GiB, quick mode ~32 MiB) against reading
//! and checksumming its files, and (full mode) the index memory per task after opening a
//! store with 100,000 tasks (RSS from /proc/self/status, in a child process).
//!
//! # The PostgreSQL suite
//! `AGENTWAL_BENCH_SUITE=postgres cargo bench --features tokio,postgres --bench workload`:
//! `agentwal-postgres` (agentwal on `PgStore`) and `postgres-seed` (the full state as JSON,
//! one row per checkpoint) on one throwaway cluster the run starts and stops itself
//! (`scripts/pg-cluster.sh`, defaults: durable per commit), the local `agentwal` beside
//! them; the same workload and figures plus bytes in the database, WAL bytes and what a
//! load reads; no large-store or index-memory experiments. Report:
//! `bench-results/workload-postgres.md` (`backends/pg_cluster.rs`, `report/postgres.rs`).
//! Without `--features postgres` the PG peers do not exist and the run says so.
//!
//! # The compaction suite
//! `AGENTWAL_BENCH_SUITE=compaction cargo bench --bench workload`: agentwal alone, with
//! its background compactor: write amplification of compaction on a large tool-call
//! journal (64 KiB and 256 KiB segments) and on this workload at the default segment size
//! (enough steps for about six rotations), segments recycled against new ones and zeros written
//! ahead (whole run and steady state), and commit latency (p50 to max) under CPU
//! contention from two spinning threads with the compactor on and off, alternating
//! (`compaction`, `report/compaction.rs`). Default 3 rounds. Report:
//! `bench-results/workload-compaction.md`.
//!
//! Results: the table is printed and written to `bench-results/workload.md` with an SVG
//! chart `bench-results/workload.svg` (quick mode writes to `target/bench-results/`).
//!
//! Environment: `AGENTWAL_BENCH_QUICK=1` (S = 20, T = 1 and 8, one round, fewer loads, no
//! 100k-task store), `AGENTWAL_BENCH_STEPS`, `AGENTWAL_BENCH_THREADS` (e.g. `1,8,64`),
//! `AGENTWAL_BENCH_ROUNDS` (full default 9; each figure is the median over rounds),
//! `AGENTWAL_BENCH_BACKENDS` (comma-separated names, e.g. `agentwal,okaywal`, for
//! profiling), `AGENTWAL_BENCH_LARGE_MIB`, `AGENTWAL_BENCH_INDEX_TASKS` (0 skips),
//! `AGENTWAL_BENCH_CALM_US` (before each backend run, wait up to 30 s until a 4 KiB
//! fdatasync probe takes at most this long: for shared machines), `AGENTWAL_BENCH_DIR`,
//! `AGENTWAL_BENCH_OUT` (where the report goes), `AGENTWAL_BENCH_LARGE_MIB=0` (no large
//! store), `AGENTWAL_BENCH_LARGE_COMPRESSION=none` (the large store uncompressed),
//! `AGENTWAL_BENCH_PROCESS` and `AGENTWAL_BENCH_BASELINE` (below).
//!
//! # Fresh processes
//! `AGENTWAL_BENCH_PROCESS=fresh cargo bench --bench workload`: every (backend, T, round)
//! runs in a fresh child process of this binary (`fresh`), in the same rotating order, and
//! the parent reports the medians and ratios as an in-process run does, to
//! `workload-fresh.md` / `.svg` / `.json`, without the large-store and index-memory
//! experiments. With `AGENTWAL_BENCH_QUICK=1` it is the CI smoke run's size.
//!
//! # Machine-readable results and a baseline
//! Every run also writes `workload.json` (or `workload-fresh.json`): every round of every
//! backend. `AGENTWAL_BENCH_BASELINE=<such a file>` makes the p99 no-regression target
//! (a v2 target) compare agentwal's p99 at the largest T against that run's
//! (`bench-results/workload-v1-baseline.md` says how the v1 baseline was made).
//!
//! # Layout
//! `config` (environment), `generator` (the deltas), `harness` (runs and times a backend's
//! commits and loads), `backends` (one file per store, behind the `Backend` trait),
//! `measurement` (figures and medians), `metering` (/proc, block-device counters, disk
//! probe), `large_store` and `index_memory` (the agentwal-only experiments), `targets`,
//! `provenance` and `report` (Markdown, SVG and JSON), `fresh` (the fresh-process mode).

mod backends;
#[path = "../common/mod.rs"]
#[allow(dead_code)] // the workload bench uses only its median
mod common;
mod compaction;
mod config;
mod fresh;
mod generator;
mod harness;
mod index_memory;
mod large_store;
mod measurement;
mod metering;
mod provenance;
mod report;
mod targets;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use backends::Backend;
use config::{Config, Process};
use index_memory::{CHILD_ENV, IndexMemory, index_memory, index_memory_child};
use large_store::{LargeStore, large_store};
use measurement::Measurement;
use report::{fmt_bytes, fmt_ms, fmt_rate};

/// Everything a run measured.
pub struct Run {
    /// Per T, per backend name: one measurement per round.
    pub rounds: BTreeMap<(usize, &'static str), Vec<Measurement>>,
    /// `None` in the fresh-process mode: the experiments outside the workload are the
    /// in-process run's.
    pub large: Option<LargeStore>,
    pub index: Vec<IndexMemory>,
    pub elapsed: Duration,
    /// The rounds of the run named by `AGENTWAL_BENCH_BASELINE`, if any.
    pub baseline: Option<report::json::Baseline>,
}

impl Run {
    pub fn median(&self, threads: usize, b: &dyn Backend) -> Option<Measurement> {
        self.rounds
            .get(&(threads, b.name()))
            .map(|r| Measurement::median_of(r))
    }
}

fn main() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        index_memory_child(Path::new(&dir));
        return;
    }
    if let Ok(spec) = std::env::var(fresh::CHILD_ENV) {
        fresh::child(&spec);
        return;
    }
    // `cargo bench` passes `--bench`; with `cargo test --benches` (`--test`) do nothing.
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    let cfg = Config::from_env();
    metering::count_device_of(&cfg.base);
    let started = Instant::now();
    if cfg.suite == config::Suite::Compaction {
        eprintln!(
            "compaction suite: {} mode, {} round(s), stores under {}",
            if cfg.quick { "quick" } else { "full" },
            cfg.rounds,
            cfg.base.display()
        );
        let suite = compaction::run_suite(&cfg);
        report::compaction::write(&cfg, &suite, &provenance::provenance(&cfg));
        return;
    }
    eprintln!(
        "workload bench: {} mode, {}, S = {}, T = {:?}, {} round(s), stores under {}",
        if cfg.quick { "quick" } else { "full" },
        cfg.process.name(),
        cfg.steps,
        cfg.threads,
        cfg.rounds,
        cfg.base.display()
    );
    let _cluster = postgres_cluster(&cfg);
    let rounds = match cfg.process {
        Process::InProcess => run_rounds(&cfg, &|b, t, round| run_one(&cfg, b, t, round)),
        Process::Fresh => run_rounds(&cfg, &fresh::run_in_child),
    };
    #[cfg(feature = "postgres")]
    if cfg.suite == config::Suite::Postgres {
        let cluster = _cluster.as_ref().expect("the suite has PG peers");
        let prov = provenance::provenance(&cfg);
        report::postgres::write(&cfg, &rounds, cluster, started.elapsed(), &prov);
        return;
    }
    let baseline = cfg.baseline.as_deref().map(report::json::read_baseline);
    // Both experiments measure agentwal alone, the large store over ~1 GiB and index
    // memory already in a child process: a fresh-process run repeats neither.
    let fresh = cfg.process == Process::Fresh;
    let large = (!fresh && cfg.large_store_bytes > 0).then(|| {
        eprintln!(
            "large-store recovery: building {}",
            fmt_bytes(cfg.large_store_bytes as f64)
        );
        large_store(&cfg)
    });
    let mut index = Vec::new();
    if !fresh && cfg.index_tasks > 0 {
        for per_task in [1, 8] {
            eprintln!(
                "index memory: {} tasks × {per_task} checkpoints",
                cfg.index_tasks
            );
            index.push(index_memory(&cfg, cfg.index_tasks, per_task));
        }
    }
    let run = Run {
        rounds,
        large,
        index,
        elapsed: started.elapsed(),
        baseline,
    };
    let prov = provenance::provenance(&cfg);
    report::write(&cfg, &run, &prov);
}

/// The PostgreSQL cluster, started when a selected backend needs one (stopped when the
/// guard drops: at the end of `main`, also when it unwinds from a panic).
#[cfg(feature = "postgres")]
fn postgres_cluster(cfg: &Config) -> Option<backends::pg_cluster::Cluster> {
    let needed = cfg.backends.iter().any(|b| b.needs_postgres());
    if !needed {
        eprintln!(
            "PostgreSQL peers ({}): not selected (AGENTWAL_BENCH_SUITE=postgres runs them)",
            backends::POSTGRES_PEERS.join(", ")
        );
    }
    needed.then(backends::pg_cluster::Cluster::start)
}

/// Without `--features postgres` there are no PostgreSQL peers; the run says so.
#[cfg(not(feature = "postgres"))]
fn postgres_cluster(_: &Config) -> Option<()> {
    eprintln!(
        "PostgreSQL peers ({}): not in this build (they need `--features postgres`; \
         AGENTWAL_BENCH_SUITE=postgres runs them)",
        backends::POSTGRES_PEERS.join(", ")
    );
    None
}

/// Every backend at every T, `cfg.rounds` times, each run measured by `measure(backend,
/// T, round)`: in this process or in a fresh child.
fn run_rounds(
    cfg: &Config,
    measure: &dyn Fn(&'static dyn Backend, usize, usize) -> Measurement,
) -> BTreeMap<(usize, &'static str), Vec<Measurement>> {
    let mut rounds: BTreeMap<_, Vec<Measurement>> = BTreeMap::new();
    for round in 0..cfg.rounds {
        for &t in &cfg.threads {
            // Rotate the order each round, so drift of the disk touches every backend.
            let n = cfg.backends.len();
            for k in 0..n {
                let b = cfg.backends[(k + round) % n];
                let m = measure(b, t, round);
                rounds.entry((t, b.name())).or_default().push(m);
            }
        }
    }
    rounds
}

/// One backend at T = `t` in a fresh directory, after the disk probe (in the fresh-process
/// mode, all a child does).
fn run_one(cfg: &Config, b: &dyn Backend, t: usize, round: usize) -> Measurement {
    let dir = cfg.tmpdir(&format!("bench-workload-{}-", b.name()));
    // Before the probe, so that the run starts on a disk the preparation no longer loads.
    let prepared = b.prepare(cfg, dir.path(), t);
    let probe = metering::wait_for_calm_disk(cfg);
    let t0 = Instant::now();
    let mut m = b.run(cfg, dir.path(), t);
    m.probe_us = probe;
    let mut prep_note = String::new();
    if let Some(p) = prepared {
        m.prep_log_bytes = Some(p.log_bytes as f64);
        m.prep_device_bytes = Some(p.device_bytes as f64);
        m.prep_ms = Some(p.elapsed.as_secs_f64() * 1e3);
        prep_note = format!(
            ", prepared {} in {:.1} s",
            fmt_bytes(p.log_bytes as f64),
            p.elapsed.as_secs_f64()
        );
    }
    eprintln!(
        "round {}/{} T={t:>2} {:<18} {:>9} commits/s  p50 {:>9}  p99 {:>9}  disk {:>10}  busy {:>4}  ({:.1} s, probe {probe:.0} µs{prep_note})",
        round + 1,
        cfg.rounds,
        b.name(),
        fmt_rate(m.commits_per_s),
        fmt_ms(m.p50_ms),
        fmt_ms(m.p99_ms),
        fmt_bytes(m.disk_bytes),
        report::opt(m.machine_busy, |f| format!("{:.0}%", f * 100.0)),
        t0.elapsed().as_secs_f64()
    );
    m
}
