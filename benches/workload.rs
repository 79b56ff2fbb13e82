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
//! - `agentwal`: `Store::commit` with default `Options` (`SyncMode::Always`).
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
//! - recovery: time to open the store after the run (for SQLite: open, set the pragmas
//!   and run the first query; for okaywal: `WriteAheadLog::recover` reading every entry
//!   still in the log; for the floors: read the file and check every crc).
//!
//! Also: recovery of a large agentwal store (~1 GiB, quick mode ~32 MiB) against reading
//! and checksumming its files, and (full mode) the index memory per task after opening a
//! store with 100,000 tasks (RSS from /proc/self/status, in a child process).
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
//! fdatasync probe takes at most this long: for shared machines), `AGENTWAL_BENCH_DIR`
//! (where stores go; default Cargo's target tmp directory, on the
//! project's disk: never a tmpfs, where fsync costs nothing), `AGENTWAL_BENCH_OUT`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agentwal::{AgentDelta, AgentState, Message, Options, State, Store, SyncMode, Value};
use parking_lot::{Condvar, Mutex};
use plotters::backend::SVGBackend;
use plotters::prelude::*;
use rusqlite::{Connection, ErrorCode, params};

/// Set in the environment of the child process that measures index memory.
const CHILD_ENV: &str = "AGENTWAL_BENCH_CHILD_INDEX_RSS";
/// Rounds of a full run. On the shared development disk one round's ratio of two backends
/// moves by about ±10%; two targets sit within 10% of parity, and their medians over 5
/// rounds still landed on either side of the line from run to run. 9 rounds take about
/// 4 minutes.
const FULL_ROUNDS_DEFAULT: usize = 9;

// ---------------------------------------------------------------------------------------
// Configuration

struct Config {
    quick: bool,
    steps: usize,
    threads: Vec<usize>,
    rounds: usize,
    backends: Vec<Backend>,
    warm_loads: usize,
    cold_loads: usize,
    large_store_bytes: u64,
    index_tasks: usize,
    /// Before each backend run, wait (up to 30 s) until the disk probe's fdatasync
    /// p50 is at most this many µs (0: do not wait).
    calm_us: f64,
    base: PathBuf,
    out_dir: PathBuf,
}

fn env_parse<T: std::str::FromStr>(name: &str) -> Option<T> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not valid")),
    )
}

impl Config {
    fn from_env() -> Config {
        let quick = std::env::var("AGENTWAL_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let threads = match std::env::var("AGENTWAL_BENCH_THREADS") {
            Ok(list) => list
                .split(',')
                .map(|t| t.trim().parse().expect("AGENTWAL_BENCH_THREADS: numbers"))
                .collect(),
            Err(_) if quick => vec![1, 8],
            Err(_) => vec![1, 8, 64],
        };
        let backends = match std::env::var("AGENTWAL_BENCH_BACKENDS") {
            Ok(list) => list
                .split(',')
                .map(|name| {
                    Backend::ALL
                        .into_iter()
                        .find(|b| b.name() == name.trim())
                        .unwrap_or_else(|| panic!("unknown backend {name:?}"))
                })
                .collect(),
            Err(_) => Backend::ALL.to_vec(),
        };
        Config {
            quick,
            steps: env_parse("AGENTWAL_BENCH_STEPS").unwrap_or(if quick { 20 } else { 200 }),
            threads,
            rounds: env_parse("AGENTWAL_BENCH_ROUNDS").unwrap_or(if quick {
                1
            } else {
                FULL_ROUNDS_DEFAULT
            }),
            backends,
            warm_loads: if quick { 20 } else { 200 },
            cold_loads: if quick { 2 } else { 5 },
            large_store_bytes: env_parse::<u64>("AGENTWAL_BENCH_LARGE_MIB").unwrap_or(if quick {
                32
            } else {
                1024
            }) << 20,
            calm_us: env_parse("AGENTWAL_BENCH_CALM_US").unwrap_or(0.0),
            index_tasks: env_parse("AGENTWAL_BENCH_INDEX_TASKS").unwrap_or(if quick {
                0
            } else {
                100_000
            }),
            base: std::env::var_os("AGENTWAL_BENCH_DIR")
                .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from),
            out_dir: std::env::var_os("AGENTWAL_BENCH_OUT").map_or_else(
                || {
                    if quick {
                        manifest.join("target").join("bench-results")
                    } else {
                        manifest.join("bench-results")
                    }
                },
                PathBuf::from,
            ),
        }
    }

    fn tmpdir(&self, prefix: &str) -> tempfile::TempDir {
        std::fs::create_dir_all(&self.base).expect("create the bench directory");
        tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(&self.base)
            .expect("create a temporary directory")
    }
}

// ---------------------------------------------------------------------------------------
// The workload

const WORDS: [&str; 64] = [
    "the", "agent", "tool", "result", "search", "query", "file", "page", "token", "model", "plan",
    "step", "retry", "cache", "index", "vector", "document", "summary", "context", "memory",
    "observe", "action", "error", "status", "value", "return", "request", "response", "latency",
    "budget", "window", "prompt", "answer", "source", "record", "check", "update", "branch",
    "commit", "merge", "review", "test", "build", "deploy", "metric", "trace", "span", "event",
    "queue", "worker", "thread", "lock", "batch", "flush", "sync", "disk", "write", "read",
    "table", "row", "column", "schema", "user", "report",
];
const TOOLS: [&str; 6] = [
    "web_search",
    "read_file",
    "run_sql",
    "http_get",
    "python",
    "write_file",
];
const PHASES: [&str; 3] = ["plan", "act", "observe"];

/// splitmix64: deterministic pseudo-random numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// About `bytes` bytes of word salad.
    fn text(&mut self, bytes: usize) -> String {
        let mut s = String::with_capacity(bytes + 16);
        while s.len() < bytes {
            if !s.is_empty() {
                s.push_str(if self.below(12) == 0 { ". " } else { " " });
            }
            s.push_str(WORDS[self.below(WORDS.len())]);
        }
        s.truncate(bytes);
        s
    }
}

/// A task id as agent frameworks make them (UUID-shaped, 36 bytes).
fn task_id(task: usize) -> String {
    let mut rng = Rng(0xA6E7_0000 ^ task as u64);
    let (a, b) = (rng.next(), rng.next());
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xFFFF,
        a & 0xFFF,
        b >> 52,
        b & 0xFFFF_FFFF_FFFF
    )
}

/// What step `step` of task `task` changes.
fn make_delta(task: usize, step: usize) -> AgentDelta {
    let mut rng = Rng((task as u64) << 32 | step as u64);
    let tool = TOOLS[rng.below(TOOLS.len())];
    let call_id = format!("call_{:016x}", rng.next());
    let args = Value::Map(BTreeMap::from([
        ("query".to_string(), Value::Str(rng.text(90))),
        ("limit".to_string(), Value::Int(10)),
    ]));
    let assistant = Message::assistant(rng.text(140)).with_tool_call(call_id.clone(), tool, args);
    let result = Message::tool(call_id, rng.text(1500));
    AgentDelta::default()
        .message(assistant)
        .message(result)
        .set("phase", PHASES[step % PHASES.len()])
        .set("step", step as i64)
        .set("last_tool", tool)
}

/// The state of task `task` after `steps` steps.
fn expected_state(task: usize, steps: usize) -> AgentState {
    let mut state = AgentState::default();
    for step in 0..steps {
        state.apply(&make_delta(task, step));
    }
    state
}

/// Bytes of the whole run's deltas: (postcard, JSON).
fn delta_payload(threads: usize, steps: usize) -> (u64, u64) {
    let (mut postcard_bytes, mut json_bytes) = (0, 0);
    for task in 0..threads {
        for step in 0..steps {
            let d = make_delta(task, step);
            postcard_bytes += postcard::to_allocvec(&d).expect("encode").len() as u64;
            json_bytes += serde_json::to_vec(&d).expect("encode").len() as u64;
        }
    }
    (postcard_bytes, json_bytes)
}

/// What `drive` measured.
struct RunTimes {
    wall: Duration,
    /// Commit latencies in nanoseconds, sorted.
    latencies: Vec<u64>,
    /// CPU time (user + system) the committing threads spent inside `step`, in nanoseconds.
    step_cpu_ns: u64,
}

/// CPU time this thread has used so far, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs the workload: `threads` threads, one task each, `steps` steps; `init` makes a
/// thread's private state (a connection, say) before the common start, `step` makes one
/// step durable. Only `step` is timed.
fn drive<W>(
    threads: usize,
    steps: usize,
    init: impl Fn(usize) -> W + Sync,
    step: impl Fn(&mut W, &str, u64, &AgentDelta) + Sync,
) -> RunTimes {
    let start_line = Barrier::new(threads + 1);
    let (started, finished, mut latencies, step_cpu_ns) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|task| {
                let (start_line, init, step) = (&start_line, &init, &step);
                s.spawn(move || {
                    let id = task_id(task);
                    let mut worker = init(task);
                    let mut latencies = Vec::with_capacity(steps);
                    let mut cpu_ns = 0;
                    start_line.wait();
                    // Each worker notes its own start: the main thread may be scheduled
                    // only after a fast backend's workers have finished.
                    let started = Instant::now();
                    for n in 0..steps {
                        let delta = make_delta(task, n);
                        let (t0, c0) = (Instant::now(), thread_cpu_ns());
                        step(&mut worker, &id, n as u64 + 1, &delta);
                        latencies.push(t0.elapsed().as_nanos() as u64);
                        cpu_ns += thread_cpu_ns() - c0;
                    }
                    let finished = Instant::now();
                    drop(worker);
                    (started, finished, latencies, cpu_ns)
                })
            })
            .collect();
        start_line.wait();
        let mut started: Option<Instant> = None;
        let mut finished: Option<Instant> = None;
        let mut all = Vec::with_capacity(threads * steps);
        let mut cpu_ns = 0;
        for w in workers {
            let (s, f, l, c) = w.join().expect("worker panicked");
            started = Some(started.map_or(s, |t| t.min(s)));
            finished = Some(finished.map_or(f, |t| t.max(f)));
            all.extend(l);
            cpu_ns += c;
        }
        let started = started.expect("at least one worker");
        let finished = finished.expect("at least one worker");
        (started, finished, all, cpu_ns)
    });
    latencies.sort_unstable();
    RunTimes {
        wall: finished - started,
        latencies,
        step_cpu_ns,
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 * p / 100.0) as usize).min(sorted.len() - 1);
    sorted[i]
}

fn median(v: &mut [f64]) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn median_duration(v: &mut [Duration]) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

// ---------------------------------------------------------------------------------------
// Measurements

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Backend {
    Agentwal,
    /// agentwal with `SyncMode::Periodic`: not durable per commit, so outside the targets.
    AgentwalPeriodic,
    SqliteSeed,
    SqliteDelta,
    Okaywal,
    FsyncFloor,
    FsyncFloorGroup,
}

impl Backend {
    const ALL: [Backend; 7] = [
        Backend::Agentwal,
        Backend::AgentwalPeriodic,
        Backend::SqliteSeed,
        Backend::SqliteDelta,
        Backend::Okaywal,
        Backend::FsyncFloor,
        Backend::FsyncFloorGroup,
    ];

    fn name(self) -> &'static str {
        match self {
            Backend::Agentwal => "agentwal",
            Backend::AgentwalPeriodic => "agentwal-periodic",
            Backend::SqliteSeed => "sqlite-seed",
            Backend::SqliteDelta => "sqlite-delta",
            Backend::Okaywal => "okaywal",
            Backend::FsyncFloor => "fsync-floor",
            Backend::FsyncFloorGroup => "fsync-floor-group",
        }
    }

    fn color(self) -> RGBColor {
        match self {
            Backend::Agentwal => RGBColor(0xD6, 0x27, 0x28),
            Backend::AgentwalPeriodic => RGBColor(0xF4, 0xA5, 0x82),
            Backend::SqliteSeed => RGBColor(0x1F, 0x77, 0xB4),
            Backend::SqliteDelta => RGBColor(0x6B, 0xAE, 0xD6),
            Backend::Okaywal => RGBColor(0x2C, 0xA0, 0x2C),
            Backend::FsyncFloor => RGBColor(0x99, 0x99, 0x99),
            Backend::FsyncFloorGroup => RGBColor(0x55, 0x55, 0x55),
        }
    }

    fn run(self, cfg: &Config, dir: &Path, threads: usize) -> Measurement {
        match self {
            Backend::Agentwal => run_agentwal(cfg, dir, threads, SyncMode::Always),
            Backend::AgentwalPeriodic => run_agentwal(cfg, dir, threads, PERIODIC),
            Backend::SqliteSeed => run_sqlite(cfg, dir, threads, SqliteDesign::Seed),
            Backend::SqliteDelta => run_sqlite(cfg, dir, threads, SqliteDesign::Delta),
            Backend::Okaywal => run_okaywal(cfg, dir, threads),
            Backend::FsyncFloor => run_floor(cfg, dir, threads, false),
            Backend::FsyncFloorGroup => run_floor(cfg, dir, threads, true),
        }
    }
}

/// One backend's figures at one T (or the median over rounds).
#[derive(Debug, Clone, Default)]
struct Measurement {
    commits: f64,
    commits_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    disk_bytes: f64,
    disk_allocated: f64,
    /// Bytes handed to write syscalls during the run (and the close).
    wchar: f64,
    /// Bytes sent to the block layer during the run (and the close).
    device_bytes: f64,
    delta_postcard: f64,
    delta_json: f64,
    load_warm_us: Option<f64>,
    load_cold_us: Option<f64>,
    recovery_ms: Option<f64>,
    /// agentwal only: bytes its log appended (records, snapshots, seals).
    log_bytes: Option<f64>,
    /// agentwal only: fdatasync calls and records per group-commit batch.
    fsyncs: Option<f64>,
    mean_batch: Option<f64>,
    /// SQLite only: SQLITE_BUSY errors that escaped the busy handler (retried).
    busy_retries: Option<f64>,
    /// fdatasync p50 (µs) of the disk probe just before this run: other load on the disk.
    probe_us: f64,
    /// CPU time the committing threads spent inside a commit, per commit (µs).
    step_cpu_us: f64,
}

impl Measurement {
    fn from_run(times: &RunTimes, io: (u64, u64), dir: &Path, payload: (u64, u64)) -> Self {
        let commits = times.latencies.len() as f64;
        let (disk_bytes, disk_allocated) = dir_usage(dir);
        Measurement {
            commits,
            // At least a microsecond: a rate must stay finite however fast a run was.
            commits_per_s: commits / times.wall.as_secs_f64().max(1e-6),
            p50_ms: percentile(&times.latencies, 50.0) as f64 / 1e6,
            p99_ms: percentile(&times.latencies, 99.0) as f64 / 1e6,
            max_ms: times.latencies.last().copied().unwrap_or(0) as f64 / 1e6,
            disk_bytes: disk_bytes as f64,
            disk_allocated: disk_allocated as f64,
            wchar: io.0 as f64,
            device_bytes: io.1 as f64,
            delta_postcard: payload.0 as f64,
            delta_json: payload.1 as f64,
            step_cpu_us: times.step_cpu_ns as f64 / 1e3 / commits.max(1.0),
            ..Measurement::default()
        }
    }

    fn written_per_delta(&self) -> f64 {
        self.wchar / self.delta_postcard
    }

    fn device_per_delta(&self) -> f64 {
        self.device_bytes / self.delta_postcard
    }

    /// The median of each figure over rounds.
    fn median_of(rounds: &[Measurement]) -> Measurement {
        let med = |f: &dyn Fn(&Measurement) -> f64| {
            let mut v: Vec<f64> = rounds.iter().map(f).collect();
            median(&mut v)
        };
        let med_opt = |f: &dyn Fn(&Measurement) -> Option<f64>| {
            let mut v: Vec<f64> = rounds.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| median(&mut v))
        };
        Measurement {
            commits: med(&|m| m.commits),
            commits_per_s: med(&|m| m.commits_per_s),
            p50_ms: med(&|m| m.p50_ms),
            p99_ms: med(&|m| m.p99_ms),
            max_ms: med(&|m| m.max_ms),
            disk_bytes: med(&|m| m.disk_bytes),
            disk_allocated: med(&|m| m.disk_allocated),
            wchar: med(&|m| m.wchar),
            device_bytes: med(&|m| m.device_bytes),
            delta_postcard: med(&|m| m.delta_postcard),
            delta_json: med(&|m| m.delta_json),
            load_warm_us: med_opt(&|m| m.load_warm_us),
            load_cold_us: med_opt(&|m| m.load_cold_us),
            recovery_ms: med_opt(&|m| m.recovery_ms),
            log_bytes: med_opt(&|m| m.log_bytes),
            fsyncs: med_opt(&|m| m.fsyncs),
            mean_batch: med_opt(&|m| m.mean_batch),
            busy_retries: med_opt(&|m| m.busy_retries),
            probe_us: med(&|m| m.probe_us),
            step_cpu_us: med(&|m| m.step_cpu_us),
        }
    }
}

/// The `stat` file of the block device holding the stores (set once by `main`).
static DEVICE_STAT: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();

/// `/sys/class/block/<name>/stat` for a device path such as `/dev/vda`, if it exists.
fn device_stat_path(dev: &str) -> Option<PathBuf> {
    let name = Path::new(dev).file_name()?;
    let path = Path::new("/sys/class/block").join(name).join("stat");
    path.exists().then_some(path)
}

/// Bytes written to the stores' block device so far (sectors written × 512), or `None`
/// when the device's counters cannot be read.
fn device_written() -> Option<u64> {
    let path = DEVICE_STAT.get()?.as_ref()?;
    let text = std::fs::read_to_string(path).ok()?;
    let sectors: u64 = text.split_whitespace().nth(6)?.parse().ok()?;
    Some(sectors * 512)
}

/// (bytes handed to write syscalls by this process, bytes written to the stores' block
/// device) so far. The device figure is the block layer's own count, so it includes
/// metadata and any other I/O on that device while a run lasts; where the device's
/// counters cannot be read it falls back to `write_bytes`, which counts every page (or
/// large folio) each time it is dirtied and so overstates what reaches the disk.
fn io_counters() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let device = device_written().unwrap_or_else(|| field("write_bytes:"));
    (field("wchar:"), device)
}

fn io_since(before: (u64, u64)) -> (u64, u64) {
    let now = io_counters();
    (now.0 - before.0, now.1 - before.1)
}

/// Sum of file sizes and of allocated bytes under `dir`.
fn dir_usage(dir: &Path) -> (u64, u64) {
    let mut total = (0, 0);
    for entry in std::fs::read_dir(dir).expect("read the store directory") {
        let entry = entry.expect("read the store directory");
        let meta = entry.metadata().expect("stat a store file");
        if meta.is_dir() {
            let (len, alloc) = dir_usage(&entry.path());
            total.0 += len;
            total.1 += alloc;
        } else {
            total.0 += meta.len();
            total.1 += meta.blocks() * 512;
        }
    }
    total
}

/// p50 of 16 `pwrite` (4 KiB) + `sync_data` into an already written file under `base`:
/// what one fdatasync costs on this disk right now (other processes' I/O shows here).
fn disk_probe(cfg: &Config) -> f64 {
    use std::os::unix::fs::FileExt;
    let dir = cfg.tmpdir("bench-workload-probe-");
    let file = File::create(dir.path().join("probe")).expect("create the probe file");
    file.write_all_at(&[0u8; 64 << 10], 0)
        .expect("write the probe file");
    file.sync_all().expect("sync the probe file");
    let block = [0x5Au8; 4096];
    let mut times: Vec<Duration> = (0..16u64)
        .map(|i| {
            let t0 = Instant::now();
            file.write_all_at(&block, i * 4096).expect("write");
            file.sync_data().expect("sync_data");
            t0.elapsed()
        })
        .collect();
    median_duration(&mut times).as_secs_f64() * 1e6
}

/// Probes the disk; with `calm_us` set, waits up to 30 s for the probe to come down.
fn wait_for_calm_disk(cfg: &Config) -> f64 {
    let started = Instant::now();
    loop {
        let probe = disk_probe(cfg);
        if cfg.calm_us <= 0.0 || probe <= cfg.calm_us || started.elapsed() > Duration::from_secs(30)
        {
            return probe;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Times `load` on fresh handles (`cold` times: `open`, then one timed load) and on one
/// warm handle (`warm` timed loads); checks the state each load returns.
fn time_loads<H, L: std::borrow::Borrow<AgentState>>(
    cfg: &Config,
    open: impl Fn() -> H,
    load: impl Fn(&H) -> L,
    expected: &AgentState,
) -> (f64, f64, f64) {
    let mut recovery = Vec::new();
    let mut cold = Vec::new();
    for _ in 0..cfg.cold_loads {
        let t0 = Instant::now();
        let handle = open();
        recovery.push(t0.elapsed());
        let t1 = Instant::now();
        let state = load(&handle);
        cold.push(t1.elapsed());
        assert!(
            state.borrow() == expected,
            "a cold load returned the wrong state"
        );
        drop(handle);
    }
    let handle = open();
    assert!(
        load(&handle).borrow() == expected,
        "a load returned the wrong state"
    );
    let mut warm = Vec::with_capacity(cfg.warm_loads);
    for _ in 0..cfg.warm_loads {
        let t0 = Instant::now();
        black_box(load(&handle));
        warm.push(t0.elapsed());
    }
    (
        median_duration(&mut warm).as_secs_f64() * 1e6,
        median_duration(&mut cold).as_secs_f64() * 1e6,
        median_duration(&mut recovery).as_secs_f64() * 1e3,
    )
}

// ---------------------------------------------------------------------------------------
// Backends

/// The period of the `agentwal-periodic` backend: a commit returns once written, and an
/// fdatasync every 10 ms makes it durable.
const PERIODIC: SyncMode = SyncMode::Periodic(Duration::from_millis(10));

fn run_agentwal(cfg: &Config, dir: &Path, threads: usize, sync: SyncMode) -> Measurement {
    let payload = delta_payload(threads, cfg.steps);
    let io = io_counters();
    let options = Options {
        sync,
        ..Options::default()
    };
    let store: Store = Store::open_with(dir, options).expect("open agentwal");
    let times = drive(
        threads,
        cfg.steps,
        |_| (),
        |_, task, seq, delta| {
            let committed = store.commit(task, delta).expect("agentwal commit");
            debug_assert_eq!(committed, seq);
        },
    );
    let stats = store.stats();
    drop(store);
    let mut m = Measurement::from_run(&times, io_since(io), dir, payload);
    m.log_bytes = Some(stats.bytes_written as f64);
    m.fsyncs = Some(stats.fsyncs as f64);
    m.mean_batch = Some(stats.mean_batch_records);
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum SqliteDesign {
    /// One row per step holding the full state as JSON.
    Seed,
    /// One row per step holding the step's delta as JSON.
    Delta,
}

fn sqlite_open(path: &Path) -> Connection {
    let conn = Connection::open(path).expect("open sqlite");
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .expect("journal_mode");
    assert_eq!(mode, "wal");
    conn.execute_batch("PRAGMA synchronous=FULL")
        .expect("synchronous");
    conn.busy_timeout(Duration::from_secs(10))
        .expect("busy_timeout");
    conn
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if matches!(f.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked))
}

/// Runs `stmt` until it does not fail with SQLITE_BUSY; counts the retries.
fn execute_retrying(mut run: impl FnMut() -> rusqlite::Result<usize>, busy_retries: &AtomicU64) {
    loop {
        match run() {
            Ok(_) => return,
            Err(e) if is_busy(&e) => {
                busy_retries.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => panic!("sqlite insert: {e}"),
        }
    }
}

fn run_sqlite(cfg: &Config, dir: &Path, threads: usize, design: SqliteDesign) -> Measurement {
    let payload = delta_payload(threads, cfg.steps);
    let db = dir.join("agents.db");
    let io = io_counters();
    let setup = sqlite_open(&db);
    setup
        .execute_batch(match design {
            SqliteDesign::Seed => {
                "CREATE TABLE checkpoints (task_id TEXT, checkpoint_seq INTEGER, state TEXT, \
                 created_at TEXT, PRIMARY KEY (task_id, checkpoint_seq))"
            }
            SqliteDesign::Delta => {
                "CREATE TABLE deltas (task_id TEXT, seq INTEGER, delta TEXT, \
                 created_at TEXT, PRIMARY KEY (task_id, seq))"
            }
        })
        .expect("create table");
    drop(setup);
    let busy_retries = AtomicU64::new(0);
    let times = drive(
        threads,
        cfg.steps,
        |_| (sqlite_open(&db), AgentState::default()),
        |(conn, state), task, seq, delta| match design {
            SqliteDesign::Seed => {
                state.apply(delta);
                let json = serde_json::to_string(&*state).expect("encode state");
                let mut stmt = conn
                    .prepare_cached(
                        "INSERT OR REPLACE INTO checkpoints VALUES \
                         (?1, ?2, ?3, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
                    )
                    .expect("prepare");
                execute_retrying(
                    || stmt.execute(params![task, seq as i64, json]),
                    &busy_retries,
                );
            }
            SqliteDesign::Delta => {
                let json = serde_json::to_string(delta).expect("encode delta");
                let mut stmt = conn
                    .prepare_cached(
                        "INSERT INTO deltas VALUES \
                         (?1, ?2, ?3, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
                    )
                    .expect("prepare");
                execute_retrying(
                    || stmt.execute(params![task, seq as i64, json]),
                    &busy_retries,
                );
            }
        },
    );
    // Every connection is closed: the last one checkpointed the WAL into the database.
    let mut m = Measurement::from_run(&times, io_since(io), dir, payload);
    m.busy_retries = Some(busy_retries.load(Ordering::Relaxed) as f64);
    let probe = task_id(0);
    let (warm, cold, recovery) = time_loads(
        cfg,
        || {
            let conn = sqlite_open(&db);
            let table = match design {
                SqliteDesign::Seed => "checkpoints",
                SqliteDesign::Delta => "deltas",
            };
            let _: Option<i64> = conn
                .query_row(&format!("SELECT 1 FROM {table} LIMIT 1"), [], |r| r.get(0))
                .expect("first query");
            conn
        },
        |conn| match design {
            SqliteDesign::Seed => {
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT state FROM checkpoints WHERE task_id = ?1 \
                         ORDER BY checkpoint_seq DESC LIMIT 1",
                    )
                    .expect("prepare");
                let json: String = stmt
                    .query_row(params![probe], |r| r.get(0))
                    .expect("select");
                serde_json::from_str(&json).expect("decode state")
            }
            SqliteDesign::Delta => {
                let mut stmt = conn
                    .prepare_cached("SELECT delta FROM deltas WHERE task_id = ?1 ORDER BY seq")
                    .expect("prepare");
                let mut rows = stmt.query(params![probe]).expect("select");
                let mut state = AgentState::default();
                while let Some(row) = rows.next().expect("row") {
                    let json = row.get_ref(0).expect("column").as_str().expect("text");
                    let delta: AgentDelta = serde_json::from_str(json).expect("decode delta");
                    state.apply(&delta);
                }
                state
            }
        },
        &expected_state(0, cfg.steps),
    );
    m.load_warm_us = Some(warm);
    m.load_cold_us = Some(cold);
    m.recovery_ms = Some(recovery);
    m
}

/// okaywal's hook: recovery reads every entry; checkpointing has nothing to persist.
#[derive(Debug, Default)]
struct OkayManager {
    entries: u64,
}

impl okaywal::LogManager for OkayManager {
    fn recover(&mut self, entry: &mut okaywal::Entry<'_>) -> std::io::Result<()> {
        if entry.read_all_chunks()?.is_some() {
            self.entries += 1;
        }
        Ok(())
    }

    fn checkpoint_to(
        &mut self,
        _last_checkpointed_id: okaywal::EntryId,
        _checkpointed_entries: &mut okaywal::SegmentReader,
        _wal: &okaywal::WriteAheadLog,
    ) -> std::io::Result<()> {
        Ok(())
    }
}

fn run_okaywal(cfg: &Config, dir: &Path, threads: usize) -> Measurement {
    let payload = delta_payload(threads, cfg.steps);
    let io = io_counters();
    let wal = okaywal::WriteAheadLog::recover(dir, OkayManager::default()).expect("open okaywal");
    let times = drive(
        threads,
        cfg.steps,
        |_| (),
        |_, _, _, delta| {
            let bytes = postcard::to_allocvec(delta).expect("encode delta");
            let mut entry = wal.begin_entry().expect("begin_entry");
            entry.write_chunk(&bytes).expect("write_chunk");
            entry.commit().expect("commit");
        },
    );
    wal.shutdown().expect("shut okaywal down");
    let mut m = Measurement::from_run(&times, io_since(io), dir, payload);
    let mut recovery = Vec::new();
    for _ in 0..cfg.cold_loads {
        let t0 = Instant::now();
        let wal =
            okaywal::WriteAheadLog::recover(dir, OkayManager::default()).expect("reopen okaywal");
        recovery.push(t0.elapsed());
        wal.shutdown().expect("shut okaywal down");
    }
    m.recovery_ms = Some(median_duration(&mut recovery).as_secs_f64() * 1e3);
    m
}

/// Frames of the floor files: payload length (u32 LE), crc32 of the payload, payload.
fn floor_frame(delta: &AgentDelta) -> Vec<u8> {
    let payload = postcard::to_allocvec(delta).expect("encode delta");
    let mut frame = Vec::with_capacity(8 + payload.len());
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    frame.extend_from_slice(&payload);
    frame
}

/// Reads a floor file and checks every frame; returns the frame count.
fn floor_recover(path: &Path) -> u64 {
    let bytes = std::fs::read(path).expect("read the floor file");
    let (mut at, mut frames) = (0, 0);
    while at + 8 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
        let Some(payload) = bytes.get(at + 8..at + 8 + len) else {
            break;
        };
        assert_eq!(crc32fast::hash(payload), crc, "floor file corrupt");
        frames += 1;
        at += 8 + len;
    }
    frames
}

/// Leader/follower group commit over a plain file.
struct GroupFile {
    file: File,
    state: Mutex<GroupState>,
    durable: Condvar,
}

#[derive(Default)]
struct GroupState {
    buf: Vec<u8>,
    /// Number of the next frame queued.
    next: u64,
    /// Frames below this number are durable.
    durable: u64,
    leader: bool,
}

impl GroupFile {
    fn commit(&self, frame: &[u8]) {
        let mut state = self.state.lock();
        state.buf.extend_from_slice(frame);
        let mine = state.next;
        state.next += 1;
        while state.durable <= mine {
            if state.leader {
                self.durable.wait(&mut state);
                continue;
            }
            state.leader = true;
            let batch = std::mem::take(&mut state.buf);
            let end = state.next;
            drop(state);
            (&self.file).write_all(&batch).expect("write");
            self.file.sync_data().expect("sync_data");
            state = self.state.lock();
            state.durable = end;
            state.leader = false;
            if state.buf.capacity() == 0 {
                state.buf = batch;
                state.buf.clear();
            }
            self.durable.notify_all();
        }
    }
}

fn run_floor(cfg: &Config, dir: &Path, threads: usize, group: bool) -> Measurement {
    let payload = delta_payload(threads, cfg.steps);
    let path = dir.join("floor.log");
    let io = io_counters();
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .expect("create the floor file");
    let times = if group {
        let g = GroupFile {
            file,
            state: Mutex::new(GroupState::default()),
            durable: Condvar::new(),
        };
        drive(
            threads,
            cfg.steps,
            |_| (),
            |_, _, _, delta| g.commit(&floor_frame(delta)),
        )
    } else {
        let file = Mutex::new(file);
        drive(
            threads,
            cfg.steps,
            |_| (),
            |_, _, _, delta| {
                let frame = floor_frame(delta);
                let mut f = file.lock();
                f.write_all(&frame).expect("write");
                f.sync_data().expect("sync_data");
            },
        )
    };
    let mut m = Measurement::from_run(&times, io_since(io), dir, payload);
    let mut recovery = Vec::new();
    for _ in 0..cfg.cold_loads {
        let t0 = Instant::now();
        let frames = floor_recover(&path);
        recovery.push(t0.elapsed());
        assert_eq!(frames as f64, m.commits, "floor file lost frames");
    }
    m.recovery_ms = Some(median_duration(&mut recovery).as_secs_f64() * 1e3);
    m
}

// ---------------------------------------------------------------------------------------
// Large-store recovery and index memory

struct LargeStore {
    file_bytes: u64,
    record_bytes: u64,
    records: u64,
    segments: u64,
    tasks: usize,
    read_crc: Duration,
    reopen: Duration,
}

/// Builds an agentwal store of about `target` bytes from the workload's steps (many tasks,
/// round-robin), then times a warm-cache reopen against reading and checksumming its files.
fn large_store(cfg: &Config) -> LargeStore {
    let dir = cfg.tmpdir("bench-workload-large-");
    let tasks = if cfg.quick { 64 } else { 1024 };
    let builder = 2;
    {
        let options = Options {
            sync: SyncMode::Never,
            ..Options::default()
        };
        let store: Store = Store::open_with(dir.path(), options).expect("open the large store");
        let written = AtomicU64::new(0);
        std::thread::scope(|s| {
            for b in 0..builder {
                let (store, written) = (&store, &written);
                s.spawn(move || {
                    for step in 0.. {
                        for task in (b..tasks).step_by(builder) {
                            store
                                .commit(&task_id(task), &make_delta(task, step))
                                .expect("commit");
                        }
                        let bytes = store.stats().bytes_written;
                        written.fetch_max(bytes, Ordering::Relaxed);
                        if written.load(Ordering::Relaxed) >= cfg.large_store_bytes {
                            break;
                        }
                    }
                });
            }
        });
        store.flush().expect("flush");
    }
    let files: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .expect("list the store")
        .map(|e| e.expect("list the store").path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    let read_crc = || {
        let t0 = Instant::now();
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        for path in &files {
            let mut f = File::open(path).expect("open a segment");
            let mut hasher = crc32fast::Hasher::new();
            loop {
                let n = f.read(&mut buf).expect("read a segment");
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                total += n as u64;
            }
            black_box(hasher.finalize());
        }
        (t0.elapsed(), total)
    };
    let (_, file_bytes) = read_crc(); // warms the page cache
    let (mut reads, mut reopens) = (Vec::new(), Vec::new());
    let mut report = None;
    for _ in 0..3 {
        reads.push(read_crc().0);
        let t0 = Instant::now();
        let store: Store = Store::open_with(dir.path(), Options::default()).expect("reopen");
        reopens.push(t0.elapsed());
        report = Some(store.recovery_report());
    }
    let report = report.expect("reopened");
    LargeStore {
        file_bytes,
        record_bytes: report.bytes,
        records: report.records,
        segments: report.segments,
        tasks: report.tasks as usize,
        read_crc: median_duration(&mut reads),
        reopen: median_duration(&mut reopens),
    }
}

struct IndexMemory {
    tasks: usize,
    checkpoints_per_task: usize,
    anon_bytes: i64,
    /// RssAnon growth after `malloc_trim`: the allocator's retained free memory removed.
    anon_trimmed_bytes: i64,
    file_bytes: i64,
    open: Duration,
}

/// Builds a store with `tasks` tasks of `per_task` small checkpoints, then opens it in a
/// child process and reads the child's RSS before and after the open.
fn index_memory(cfg: &Config, tasks: usize, per_task: usize) -> IndexMemory {
    let dir = cfg.tmpdir("bench-workload-index-");
    {
        let options = Options {
            sync: SyncMode::Never,
            ..Options::default()
        };
        let store: Store = Store::open_with(dir.path(), options).expect("open");
        std::thread::scope(|s| {
            for b in 0..2 {
                let store = &store;
                s.spawn(move || {
                    for step in 0..per_task {
                        for task in (b..tasks).step_by(2) {
                            let delta = AgentDelta::default()
                                .message(Message::user(format!("task {task}, step {step}")))
                                .set("step", step as i64);
                            store.commit(&task_id(task), &delta).expect("commit");
                        }
                    }
                });
            }
        });
        store.flush().expect("flush");
    }
    let exe = std::env::current_exe().expect("the bench executable");
    let out = Command::new(exe)
        .env(CHILD_ENV, dir.path())
        .output()
        .expect("run the index-memory child");
    assert!(
        out.status.success(),
        "index-memory child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let field = |name: &str| -> i64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("child printed no {name}: {text}"))
    };
    assert_eq!(field("tasks=") as usize, tasks);
    IndexMemory {
        tasks,
        checkpoints_per_task: per_task,
        anon_bytes: field("anon_after=") - field("anon_before="),
        anon_trimmed_bytes: field("anon_trimmed=") - field("anon_before="),
        file_bytes: field("file_after=") - field("file_before="),
        open: Duration::from_micros(field("open_us=") as u64),
    }
}

/// (RssAnon, RssFile) of this process, in bytes.
fn rss() -> (i64, i64) {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let field = |name: &str| -> i64 {
        status
            .lines()
            .find_map(|l| {
                let kb = l.strip_prefix(name)?.trim().strip_suffix("kB")?;
                kb.trim().parse::<i64>().ok()
            })
            .unwrap_or(0)
            * 1024
    };
    (field("RssAnon:"), field("RssFile:"))
}

/// The child: opens the store, prints RSS before and after.
fn index_memory_child(dir: &Path) {
    let before = rss();
    let t0 = Instant::now();
    let store: Store = Store::open_with(dir, Options::default()).expect("open");
    let open = t0.elapsed();
    let after = rss();
    // What the allocator kept from recovery's temporary buffers is not index: hand free
    // memory back to the OS and read RSS again.
    // SAFETY: malloc_trim only releases free memory; no pointer is invalidated.
    unsafe { libc::malloc_trim(0) };
    let trimmed = rss();
    let tasks = store.recovery_report().tasks;
    println!("anon_before={}", before.0);
    println!("file_before={}", before.1);
    println!("anon_after={}", after.0);
    println!("file_after={}", after.1);
    println!("anon_trimmed={}", trimmed.0);
    println!("open_us={}", open.as_micros());
    println!("tasks={tasks}");
    drop(store);
}

// ---------------------------------------------------------------------------------------
// Report

struct Run {
    /// Per T, per backend: one measurement per round.
    rounds: BTreeMap<(usize, Backend), Vec<Measurement>>,
    large: LargeStore,
    index: Vec<IndexMemory>,
    elapsed: Duration,
}

impl Run {
    fn median(&self, threads: usize, b: Backend) -> Option<Measurement> {
        self.rounds
            .get(&(threads, b))
            .map(|r| Measurement::median_of(r))
    }
}

fn fmt_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut u = 0;
    while v.abs() >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn fmt_ms(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else if ms >= 1.0 {
        format!("{ms:.2} ms")
    } else if ms >= 0.01 {
        format!("{:.0} µs", ms * 1000.0)
    } else {
        format!("{:.2} µs", ms * 1000.0)
    }
}

fn fmt_rate(r: f64) -> String {
    if r >= 10_000.0 {
        format!("{:.1}k", r / 1000.0)
    } else {
        format!("{r:.0}")
    }
}

fn fmt_ratio(r: f64) -> String {
    if r >= 10.0 {
        format!("{r:.0}×")
    } else {
        format!("{r:.2}×")
    }
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "–".to_string(), f)
}

/// Date (UTC), commit and machine, for the report and the chart.
struct Provenance {
    date: String,
    commit: String,
    machine: String,
}

fn provenance(cfg: &Config) -> Provenance {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let date = format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        secs % 86_400 / 3600,
        secs % 3600 / 60
    );
    let manifest = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(manifest)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let mut commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    if let Some(dirty) = git(&["status", "--porcelain", "--untracked-files=no", "--", "src"])
        && !dirty.is_empty()
    {
        let files: Vec<&str> = dirty
            .lines()
            .filter_map(|l| l.split_whitespace().last())
            .collect();
        commit.push_str(&format!(" + uncommitted changes to {}", files.join(", ")));
    }
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find_map(|l| {
                Some(
                    l.strip_prefix("model name")?
                        .split(':')
                        .nth(1)?
                        .trim()
                        .to_string(),
                )
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| "unknown".into(), |k| k.trim().to_string());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines().find_map(|l| {
                let kb = l.strip_prefix("MemTotal:")?.trim().strip_suffix("kB")?;
                kb.trim().parse::<f64>().ok()
            })
        })
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    let (fs, dev) = mount_of(&cfg.base);
    Provenance {
        date,
        commit,
        machine: format!(
            "nproc {nproc} ({cpu}), {mem_gib:.0} GiB RAM, Linux {kernel}, stores on {fs} ({dev})"
        ),
    }
}

/// Filesystem type and device of the mount holding `path`.
fn mount_of(path: &Path) -> (String, String) {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mut best: Option<(usize, String, String)> = None;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 || !path.starts_with(f[1]) {
            continue;
        }
        if best.as_ref().is_none_or(|(len, _, _)| f[1].len() >= *len) {
            best = Some((f[1].len(), f[2].to_string(), f[0].to_string()));
        }
    }
    best.map_or(("unknown".into(), "unknown".into()), |(_, fs, dev)| {
        (fs, dev)
    })
}

/// Days since 1970-01-01 to (year, month, day) (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// A target line: what, the measured figure, met or not.
struct Target {
    what: String,
    measured: String,
    met: bool,
}

/// The commits/s ratio of agentwal to `peer` in each round (the two ran minutes apart at
/// most), as text: shows how much of a ratio of medians is the disk's mood.
fn paired_ratios(run: &Run, t: usize, peer: Backend) -> String {
    let (Some(a), Some(p)) = (
        run.rounds.get(&(t, Backend::Agentwal)),
        run.rounds.get(&(t, peer)),
    ) else {
        return String::new();
    };
    if a.len() < 2 {
        return String::new();
    }
    let mut ratios: Vec<f64> = a
        .iter()
        .zip(p)
        .map(|(a, p)| a.commits_per_s / p.commits_per_s)
        .collect();
    let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    let mid = median(&mut ratios);
    format!("; per round {}, their median {mid:.2}×", each.join(", "))
}

fn targets(cfg: &Config, run: &Run) -> Vec<Target> {
    let mut out = Vec::new();
    let tmax = *cfg.threads.iter().max().expect("some T");
    let get = |t, b| run.median(t, b);
    for &t in &cfg.threads {
        if let (Some(a), Some(o)) = (get(t, Backend::Agentwal), get(t, Backend::Okaywal)) {
            let r = a.commits_per_s / o.commits_per_s;
            out.push(Target {
                what: format!("commits/s ≥ okaywal at T={t}"),
                measured: format!(
                    "{} vs {} ({}{})",
                    fmt_rate(a.commits_per_s),
                    fmt_rate(o.commits_per_s),
                    fmt_ratio(r),
                    paired_ratios(run, t, Backend::Okaywal)
                ),
                met: r >= 1.0,
            });
        }
    }
    let Some(a) = get(tmax, Backend::Agentwal) else {
        return out;
    };
    let mut commits_vs = |b: Backend, factor: f64| {
        if let Some(p) = get(tmax, b) {
            let r = a.commits_per_s / p.commits_per_s;
            out.push(Target {
                what: format!("commits/s ≥ {factor}× {} at T={tmax}", b.name()),
                measured: format!(
                    "{} vs {} ({}{})",
                    fmt_rate(a.commits_per_s),
                    fmt_rate(p.commits_per_s),
                    fmt_ratio(r),
                    paired_ratios(run, tmax, b)
                ),
                met: r >= factor,
            });
        }
    };
    commits_vs(Backend::FsyncFloorGroup, 0.9);
    commits_vs(Backend::SqliteDelta, 8.0);
    commits_vs(Backend::SqliteSeed, 40.0);
    if let Some(seed) = get(tmax, Backend::SqliteSeed) {
        let r = seed.disk_bytes / a.disk_bytes;
        out.push(Target {
            what: format!("bytes on disk ≤ 1/50 of sqlite-seed (T={tmax})"),
            measured: format!(
                "{} vs {} (1/{r:.0})",
                fmt_bytes(a.disk_bytes),
                fmt_bytes(seed.disk_bytes)
            ),
            met: r >= 50.0,
        });
    }
    // Judged twice: on the log's records (what the engine writes, snapshots included),
    // and on every byte handed to `write`, which adds the zeros written ahead into
    // preallocated space (DESIGN.md §2.6).
    let written = a.written_per_delta();
    let log = a.log_bytes.unwrap_or(f64::INFINITY) / a.delta_postcard;
    out.push(Target {
        what: format!("bytes written ≤ 3× the delta payload (T={tmax}, log records)"),
        measured: format!("{log:.2}× (snapshots included)"),
        met: log <= 3.0,
    });
    out.push(Target {
        what: format!("bytes written ≤ 3× the delta payload (T={tmax}, syscall bytes)"),
        measured: format!(
            "{written:.2}× (records {log:.2}× + zero-fill of preallocated space; device: {:.2}×)",
            a.device_per_delta()
        ),
        met: written <= 3.0,
    });
    if let (Some(seed), Some(aw)) = (get(tmax, Backend::SqliteSeed), a.load_warm_us)
        && let Some(sw) = seed.load_warm_us
    {
        let r = sw / aw;
        out.push(Target {
            what: format!(
                "load_latest p50 ≤ 1/5 of sqlite-seed ({}-step task)",
                cfg.steps
            ),
            measured: format!(
                "{} vs {} (1/{r:.1}; agentwal's warm load is a latest-state cache hit; \
                 first load on a new handle: {} vs {})",
                fmt_ms(aw / 1e3),
                fmt_ms(sw / 1e3),
                fmt_ms(a.load_cold_us.unwrap_or(f64::NAN) / 1e3),
                fmt_ms(seed.load_cold_us.unwrap_or(f64::NAN) / 1e3),
            ),
            met: r >= 5.0,
        });
    }
    let l = &run.large;
    let gibps = l.file_bytes as f64 / (1u64 << 30) as f64 / l.reopen.as_secs_f64();
    let vs_read = l.reopen.as_secs_f64() / l.read_crc.as_secs_f64();
    out.push(Target {
        what: format!(
            "recovery of a {} store ≥ 1 GiB/s and ≤ 2× read+crc32",
            fmt_bytes(l.file_bytes as f64)
        ),
        measured: format!(
            "{gibps:.2} GiB/s; {} vs {} read+crc32 ({vs_read:.2}×)",
            fmt_ms(l.reopen.as_secs_f64() * 1e3),
            fmt_ms(l.read_crc.as_secs_f64() * 1e3)
        ),
        met: gibps >= 1.0 && vs_read <= 2.0,
    });
    for i in &run.index {
        let per_task = i.anon_bytes as f64 / i.tasks as f64;
        out.push(Target {
            what: format!(
                "index memory ≤ 512 B/task ({} tasks × {} checkpoints)",
                i.tasks, i.checkpoints_per_task
            ),
            measured: format!(
                "{per_task:.0} B/task (RssAnon; {:.0} B after malloc_trim)",
                i.anon_trimmed_bytes as f64 / i.tasks as f64
            ),
            met: per_task <= 512.0,
        });
    }
    out
}

fn markdown(cfg: &Config, run: &Run, prov: &Provenance) -> String {
    let mut md = String::new();
    let w = &mut md;
    let threads_list: Vec<String> = cfg.threads.iter().map(usize::to_string).collect();
    let _ = writeln!(w, "# agentwal workload benchmark\n");
    let _ = writeln!(
        w,
        "{} · commit {} · {}\n",
        prov.date, prov.commit, prov.machine
    );
    let _ = writeln!(
        w,
        "Mode: {} — S = {} steps per task, T = {} tasks (one thread each), {} round(s), \
         each figure the median over rounds; run took {:.0} s. Command: `{}cargo bench --bench workload`.\n",
        if cfg.quick { "quick" } else { "full" },
        cfg.steps,
        threads_list.join(", "),
        cfg.rounds,
        run.elapsed.as_secs_f64(),
        match (cfg.quick, cfg.calm_us > 0.0) {
            (true, _) => "AGENTWAL_BENCH_QUICK=1 ".to_string(),
            (false, calm) => format!(
                "{}{}",
                if calm {
                    format!("AGENTWAL_BENCH_CALM_US={} ", cfg.calm_us)
                } else {
                    String::new()
                },
                if cfg.rounds == FULL_ROUNDS_DEFAULT {
                    String::new()
                } else {
                    format!("AGENTWAL_BENCH_ROUNDS={} ", cfg.rounds)
                }
            ),
        }
    );
    let _ = writeln!(
        w,
        "A step appends an assistant message with a tool call (~300 B) and a tool result \
         (~1.5 KB) and sets 3 variables; it is durable before the task's next step. \
         Source and definitions: `benches/workload.rs`.\n"
    );
    let _ = writeln!(w, "## Results\n");
    let _ = writeln!(
        w,
        "| backend | T | commits/s | p50 commit | p99 commit | on disk | allocated | written / delta | device / delta | load_latest p50 (warm) | load_latest (cold handle) | recovery |"
    );
    let _ = writeln!(
        w,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for &t in &cfg.threads {
        for &b in &cfg.backends {
            let Some(m) = run.median(t, b) else { continue };
            let _ = writeln!(
                w,
                "| {} | {t} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {} | {} | {} |",
                b.name(),
                fmt_rate(m.commits_per_s),
                fmt_ms(m.p50_ms),
                fmt_ms(m.p99_ms),
                fmt_bytes(m.disk_bytes),
                fmt_bytes(m.disk_allocated),
                m.written_per_delta(),
                m.device_per_delta(),
                opt(m.load_warm_us, |u| fmt_ms(u / 1e3)),
                opt(m.load_cold_us, |u| fmt_ms(u / 1e3)),
                opt(m.recovery_ms, fmt_ms),
            );
        }
    }
    if let Some(m) = cfg
        .threads
        .iter()
        .find_map(|&t| run.median(t, cfg.backends[0]))
    {
        let per_step = m.delta_postcard / m.commits;
        let json_per_step = m.delta_json / m.commits;
        let _ = writeln!(
            w,
            "\nDelta payload: {per_step:.0} B per step postcard-encoded ({json_per_step:.0} B as JSON). \
             \"written / delta\": bytes handed to write syscalls during the run and the close \
             (/proc/self/io `wchar`) over the postcard-encoded deltas; \"device / delta\": bytes \
             written to the stores' block device during the run and the close (its sectors-written \
             counter in /sys/class/block: data, file-system metadata, a partial page again each \
             time a batch extends it, and any other I/O on that device meanwhile). \"on disk\": file sizes after the run; \"allocated\": blocks, as `du` counts. \
             Cold load: first load on a freshly opened handle (page cache warm, open not counted). \
             Recovery: agentwal `Store::open`; SQLite: open, pragmas and a first query (the last \
             connection to close checkpointed the WAL); okaywal: `WriteAheadLog::recover` reading \
             the entries still in its log; floors: read the file and check every crc. okaywal \
             is a WAL only: it recycles a segment once it is checkpointed (the manager here keeps \
             nothing), so its disk figure leaves out wherever an application would keep the state. \
             **agentwal-periodic is not durable per commit**: `SyncMode::Periodic(10 ms)`, a commit \
             returns once written to the page cache and a background fdatasync every 10 ms makes it \
             durable, so a crash can lose the last ~10 ms of acknowledged commits; it shows what the \
             per-commit fsync costs and takes no part in the targets.\n"
        );
    }
    let _ = writeln!(w, "## agentwal ÷ peer\n");
    let peers: Vec<Backend> = cfg
        .backends
        .iter()
        .copied()
        .filter(|&b| b != Backend::Agentwal)
        .collect();
    let header: Vec<&str> = peers.iter().map(|b| b.name()).collect();
    let _ = writeln!(w, "| figure | T | {} |", header.join(" | "));
    let _ = writeln!(w, "|---|---:|{}", "---:|".repeat(peers.len()));
    let ratio_row = |w: &mut String,
                     what: &str,
                     t: usize,
                     f: &dyn Fn(&Measurement, &Measurement) -> Option<f64>| {
        let Some(a) = run.median(t, Backend::Agentwal) else {
            return;
        };
        let cells: Vec<String> = peers
            .iter()
            .map(|&b| {
                run.median(t, b)
                    .and_then(|p| f(&a, &p))
                    .map_or_else(|| "–".into(), fmt_ratio)
            })
            .collect();
        let _ = writeln!(w, "| {what} | {t} | {} |", cells.join(" | "));
    };
    for &t in &cfg.threads {
        ratio_row(w, "commits/s (higher: agentwal faster)", t, &|a, p| {
            Some(a.commits_per_s / p.commits_per_s)
        });
    }
    for &t in &cfg.threads {
        ratio_row(
            w,
            "p99 commit latency (lower: agentwal faster)",
            t,
            &|a, p| Some(a.p99_ms / p.p99_ms),
        );
    }
    let tmax = *cfg.threads.iter().max().expect("some T");
    ratio_row(
        w,
        "bytes on disk (lower: agentwal smaller)",
        tmax,
        &|a, p| Some(a.disk_bytes / p.disk_bytes),
    );
    ratio_row(
        w,
        "bytes written (lower: agentwal writes less)",
        tmax,
        &|a, p| Some(a.wchar / p.wchar),
    );
    ratio_row(
        w,
        "load_latest p50 warm (lower: agentwal faster)",
        tmax,
        &|a, p| Some(a.load_warm_us? / p.load_warm_us?),
    );
    ratio_row(
        w,
        "recovery time (lower: agentwal faster)",
        tmax,
        &|a, p| Some(a.recovery_ms? / p.recovery_ms?),
    );
    let _ = writeln!(w, "\n## Targets\n");
    let _ = writeln!(
        w,
        "A commits/s target is judged on the ratio of the two medians over rounds; the \
         ratios within each round (the backends ran back to back) are shown beside it.\n"
    );
    let _ = writeln!(w, "| target | measured | met |");
    let _ = writeln!(w, "|---|---|---|");
    for t in targets(cfg, run) {
        let _ = writeln!(
            w,
            "| {} | {} | {} |",
            t.what,
            t.measured,
            if t.met { "met" } else { "**missed**" }
        );
    }
    let l = &run.large;
    let _ = writeln!(w, "\n## Recovery of a large store\n");
    let _ = writeln!(
        w,
        "{} in {} segment files ({} of records, {} records, {} tasks built from the workload's steps). \
         Page cache warm; medians of 3. Reading and crc32-ing every file: {} ({:.2} GiB/s). \
         `Store::open` (replay, index rebuild): {} ({:.2} GiB/s of files, {:.2}× the read+crc32 time).\n",
        fmt_bytes(l.file_bytes as f64),
        l.segments,
        fmt_bytes(l.record_bytes as f64),
        l.records,
        l.tasks,
        fmt_ms(l.read_crc.as_secs_f64() * 1e3),
        l.file_bytes as f64 / (1u64 << 30) as f64 / l.read_crc.as_secs_f64(),
        fmt_ms(l.reopen.as_secs_f64() * 1e3),
        l.file_bytes as f64 / (1u64 << 30) as f64 / l.reopen.as_secs_f64(),
        l.reopen.as_secs_f64() / l.read_crc.as_secs_f64(),
    );
    if !run.index.is_empty() {
        let _ = writeln!(w, "## Index memory\n");
        let _ = writeln!(
            w,
            "A child process opens a store and reads its own RSS (/proc/self/status) before and after \
             `Store::open`, and again after `malloc_trim(0)` (free memory the allocator kept from \
             recovery's temporary buffers is handed back; what remains is the index). The target is \
             judged on the plain figure.\n"
        );
        let _ = writeln!(
            w,
            "| tasks | checkpoints per task | RssAnon growth | per task | per task after malloc_trim | RssFile growth | open time |"
        );
        let _ = writeln!(w, "|---:|---:|---:|---:|---:|---:|---:|");
        for i in &run.index {
            let _ = writeln!(
                w,
                "| {} | {} | {} | {:.0} B | {:.0} B | {} | {} |",
                i.tasks,
                i.checkpoints_per_task,
                fmt_bytes(i.anon_bytes as f64),
                i.anon_bytes as f64 / i.tasks as f64,
                i.anon_trimmed_bytes as f64 / i.tasks as f64,
                fmt_bytes(i.file_bytes as f64),
                fmt_ms(i.open.as_secs_f64() * 1e3)
            );
        }
        let _ = writeln!(w);
    }
    let _ = writeln!(w, "## Details\n");
    let _ = writeln!(
        w,
        "Disk probe: p50 of 16 × (4 KiB `pwrite` + `fdatasync`) into a written file just before \
         each run; other processes' I/O on the shared disk shows up here as a higher figure{}. \
         CPU in commit: CPU time (user + system, `CLOCK_THREAD_CPUTIME_ID`) the committing \
         threads spent inside their commit calls, per commit: the store's own work plus the \
         write and fdatasync system calls of the commits that led a batch; background threads \
         (okaywal's, agentwal-periodic's flusher) are not counted.\n",
        if cfg.calm_us > 0.0 {
            format!(
                " (runs waited up to 30 s for it to fall to {} or less: AGENTWAL_BENCH_CALM_US={})",
                fmt_ms(cfg.calm_us / 1e3),
                cfg.calm_us
            )
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        w,
        "| backend | T | commits/s per round | disk probe per round | max commit | CPU in commit | other |"
    );
    let _ = writeln!(w, "|---|---:|---|---|---:|---:|---|");
    for &t in &cfg.threads {
        for &b in &cfg.backends {
            let Some(rounds) = run.rounds.get(&(t, b)) else {
                continue;
            };
            let m = Measurement::median_of(rounds);
            let per_round: Vec<String> = rounds.iter().map(|r| fmt_rate(r.commits_per_s)).collect();
            let probes: Vec<String> = rounds.iter().map(|r| fmt_ms(r.probe_us / 1e3)).collect();
            let mut other = Vec::new();
            if let (Some(log), Some(fsyncs), Some(batch)) = (m.log_bytes, m.fsyncs, m.mean_batch) {
                other.push(format!(
                    "log bytes {:.2}× delta, {fsyncs:.0} fdatasyncs, {batch:.1} records/batch",
                    log / m.delta_postcard
                ));
            }
            if let Some(busy) = m.busy_retries {
                other.push(format!("{busy:.0} SQLITE_BUSY retried"));
            }
            let _ = writeln!(
                w,
                "| {} | {t} | {} | {} | {} | {:.1} µs | {} |",
                b.name(),
                per_round.join(" / "),
                probes.join(" / "),
                fmt_ms(m.max_ms),
                m.step_cpu_us,
                other.join("; ")
            );
        }
    }
    md
}

struct Bar {
    group: usize,
    slot: usize,
    slots: usize,
    value: f64,
    color: RGBColor,
}

/// One panel of bars on a log scale; `legend` names the colors.
fn bar_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    groups: &[String],
    bars: &[Bar],
    label: &dyn Fn(f64) -> String,
    legend: &[(String, RGBColor)],
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    // A log axis needs finite, positive values (an infinite one once hung the drawing).
    let drawable: Vec<&Bar> = bars
        .iter()
        .filter(|b| b.value.is_finite() && b.value > 0.0)
        .collect();
    if drawable.is_empty() {
        return Ok(());
    }
    let bars = drawable;
    let lo = bars.iter().map(|b| b.value).fold(f64::INFINITY, f64::min) / 3.0;
    // Leave room above the bars for their labels (and the legend).
    let headroom = if legend.is_empty() { 4.0 } else { 40.0 };
    let hi = bars.iter().map(|b| b.value).fold(0.0, f64::max) * headroom;
    let n = groups.len();
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(64)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n + 1)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < n {
                groups[i as usize].clone()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| label(*y))
        .draw()?;
    for bar in bars {
        let width = 0.84 / bar.slots as f64;
        let x0 = bar.group as f64 - 0.42 + width * bar.slot as f64;
        let x1 = x0 + width * 0.9;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(x0, lo), (x1, bar.value)],
            bar.color.filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            label(bar.value),
            ((x0 + x1) / 2.0, bar.value * 1.12),
            ("sans-serif", 10)
                .into_font()
                .transform(FontTransform::Rotate270)
                .color(&BLACK),
        )))?;
    }
    for (name, color) in legend {
        let color = *color;
        chart
            .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
            .label(name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    if !legend.is_empty() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 11))
            .draw()?;
    }
    Ok(())
}

fn write_svg(
    path: &Path,
    cfg: &Config,
    run: &Run,
    prov: &Provenance,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1280, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(64);
    title.draw(&Text::new(
        format!(
            "agentwal workload benchmark ({} mode, S = {} steps per task, median of {} round(s))",
            if cfg.quick { "quick" } else { "full" },
            cfg.steps,
            cfg.rounds
        ),
        (12, 8),
        ("sans-serif", 20).into_font(),
    ))?;
    title.draw(&Text::new(
        format!("{} · commit {}", prov.date, prov.commit),
        (12, 34),
        ("sans-serif", 12).into_font(),
    ))?;
    title.draw(&Text::new(
        prov.machine.clone(),
        (12, 49),
        ("sans-serif", 12).into_font(),
    ))?;
    let panels = body.split_evenly((2, 2));
    let tmax = *cfg.threads.iter().max().expect("some T");
    let legend: Vec<(String, RGBColor)> = cfg
        .backends
        .iter()
        .map(|&b| {
            let name = if b == Backend::AgentwalPeriodic {
                format!("{} (not durable per commit)", b.name())
            } else {
                b.name().to_string()
            };
            (name, b.color())
        })
        .collect();
    let per_t = |f: &dyn Fn(&Measurement) -> Option<f64>| -> Vec<Bar> {
        let mut bars = Vec::new();
        for (g, &t) in cfg.threads.iter().enumerate() {
            for (slot, &b) in cfg.backends.iter().enumerate() {
                if let Some(v) = run.median(t, b).as_ref().and_then(f) {
                    bars.push(Bar {
                        group: g,
                        slot,
                        slots: cfg.backends.len(),
                        value: v,
                        color: b.color(),
                    });
                }
            }
        }
        bars
    };
    let t_groups: Vec<String> = cfg.threads.iter().map(|t| format!("T = {t}")).collect();
    bar_panel(
        &panels[0],
        "commits/s (higher is better)",
        &t_groups,
        &per_t(&|m| Some(m.commits_per_s)),
        &|v| fmt_rate(v),
        &legend,
    )?;
    bar_panel(
        &panels[1],
        "p99 commit latency (lower is better)",
        &t_groups,
        &per_t(&|m| Some(m.p99_ms)),
        &|v| fmt_ms(v),
        &[],
    )?;
    let per_backend = |f: &dyn Fn(&Measurement) -> Option<f64>| -> (Vec<String>, Vec<Bar>) {
        let mut groups = Vec::new();
        let mut bars = Vec::new();
        for &b in &cfg.backends {
            if let Some(v) = run.median(tmax, b).as_ref().and_then(f) {
                bars.push(Bar {
                    group: groups.len(),
                    slot: 0,
                    slots: 1,
                    value: v,
                    color: b.color(),
                });
                groups.push(b.name().to_string());
            }
        }
        (groups, bars)
    };
    let (groups, bars) = per_backend(&|m| Some(m.disk_bytes));
    bar_panel(
        &panels[2],
        &format!("bytes on disk after T = {tmax} (lower is better)"),
        &groups,
        &bars,
        &|v| fmt_bytes(v),
        &[],
    )?;
    let (groups, bars) = per_backend(&|m| m.load_warm_us.map(|u| u / 1e3));
    bar_panel(
        &panels[3],
        &format!(
            "load_latest p50 of a {}-step task, warm (agentwal: cache hit; lower is better)",
            cfg.steps
        ),
        &groups,
        &bars,
        &|v| fmt_ms(v),
        &[],
    )?;
    root.present()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------

fn main() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        index_memory_child(Path::new(&dir));
        return;
    }
    // `cargo bench` passes `--bench`; with `cargo test --benches` (`--test`) do nothing.
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    let cfg = Config::from_env();
    let _ = DEVICE_STAT.set(device_stat_path(&mount_of(&cfg.base).1));
    let started = Instant::now();
    eprintln!(
        "workload bench: {} mode, S = {}, T = {:?}, {} round(s), stores under {}",
        if cfg.quick { "quick" } else { "full" },
        cfg.steps,
        cfg.threads,
        cfg.rounds,
        cfg.base.display()
    );
    let mut rounds: BTreeMap<(usize, Backend), Vec<Measurement>> = BTreeMap::new();
    for round in 0..cfg.rounds {
        for &t in &cfg.threads {
            // Rotate the order each round, so drift of the disk touches every backend.
            let n = cfg.backends.len();
            for k in 0..n {
                let b = cfg.backends[(k + round) % n];
                let dir = cfg.tmpdir(&format!("bench-workload-{}-", b.name()));
                let probe = wait_for_calm_disk(&cfg);
                let t0 = Instant::now();
                let mut m = b.run(&cfg, dir.path(), t);
                m.probe_us = probe;
                eprintln!(
                    "round {}/{} T={t:>2} {:<18} {:>9} commits/s  p50 {:>9}  p99 {:>9}  disk {:>10}  ({:.1} s, probe {probe:.0} µs)",
                    round + 1,
                    cfg.rounds,
                    b.name(),
                    fmt_rate(m.commits_per_s),
                    fmt_ms(m.p50_ms),
                    fmt_ms(m.p99_ms),
                    fmt_bytes(m.disk_bytes),
                    t0.elapsed().as_secs_f64()
                );
                rounds.entry((t, b)).or_default().push(m);
            }
        }
    }
    eprintln!(
        "large-store recovery: building {}",
        fmt_bytes(cfg.large_store_bytes as f64)
    );
    let large = large_store(&cfg);
    let mut index = Vec::new();
    if cfg.index_tasks > 0 {
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
    };
    let prov = provenance(&cfg);
    let md = markdown(&cfg, &run, &prov);
    println!("{md}");
    std::fs::create_dir_all(&cfg.out_dir).expect("create the output directory");
    let md_path = cfg.out_dir.join("workload.md");
    std::fs::write(&md_path, &md).expect("write the Markdown report");
    let svg_path = cfg.out_dir.join("workload.svg");
    write_svg(&svg_path, &cfg, &run, &prov).expect("write the SVG chart");
    eprintln!("wrote {} and {}", md_path.display(), svg_path.display());
}
