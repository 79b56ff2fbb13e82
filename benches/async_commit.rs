//! Async commits on a 2-worker tokio runtime against the blocking
//! API on one OS thread per writer, in one process, side by side.
//!
//! - A: 64 tokio tasks on a multi-thread runtime with exactly 2 workers, each committing
//!   200 agent steps (~1.9 KB delta, `common::step`) to its own task on `AsyncStore`,
//!   default options (`SyncMode::Always`), a fresh store per rep;
//! - B: 64 OS threads doing the same on the blocking `Store`;
//! - C: 1,000 tokio tasks × 20 steps on the same runtime.
//!
//! A and B alternate (A B B A A B ...), 15 reps each; the table gives the medians of the
//! reps, the ratio of the medians and the median of the reps' ratios (a rep's A and B run
//! back to back, so that figure sees the least of the disk's drift). A sampler thread
//! (counted) reads `/proc/self/task` every 2 ms during every run and keeps the peak; B's
//! threads are joined, and its store (with its compactor thread) dropped, before the next
//! run starts. The main table also gives records per batch (appends / batches from
//! `stats()`). The per-rep figures go to stderr. A secondary table repeats A against B
//! with fewer writers: `AGENTWAL_BENCH_WRITERS` (default `8,1`; empty for none);
//! `AGENTWAL_BENCH_MAIN=0` skips the main table, `AGENTWAL_BENCH_REPS=N` sets the reps,
//! `AGENTWAL_BENCH_SYNC=never` measures without fdatasync (the CPU and hand-off costs).
//!
//! ```text
//! cargo bench --features tokio --bench async_commit                          # 15-30 s
//! AGENTWAL_BENCH_QUICK=1 cargo bench --features tokio --bench async_commit   # smoke run
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod common;

use agentwal::{AsyncStore, Options, Store, SyncMode};
use common::step;

fn bench_dir(name: &str) -> tempfile::TempDir {
    // Under target/ so the figures come from the real disk, not a tmpfs.
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-stores");
    std::fs::create_dir_all(&base).expect("bench dir");
    tempfile::Builder::new()
        .prefix(name)
        .tempdir_in(base)
        .expect("tempdir")
}

/// Default options; `AGENTWAL_BENCH_SYNC=never` (`SyncMode::Never`: no fdatasync) leaves
/// only the CPU and hand-off costs of a commit, to tell them apart from the disk's.
fn open_store(dir: &std::path::Path) -> Store {
    let sync = match std::env::var("AGENTWAL_BENCH_SYNC").as_deref() {
        Ok("never") => SyncMode::Never,
        Ok("always") | Err(_) => SyncMode::Always,
        Ok(other) => panic!("AGENTWAL_BENCH_SYNC: always or never, not {other:?}"),
    };
    let options = Options {
        sync,
        ..Options::default()
    };
    Store::open_with(dir, options).expect("open")
}

fn threads_now() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

/// Samples the process's thread count until `finish`; the peak includes the sampler.
struct Sampler {
    peak: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Sampler {
    fn start() -> Self {
        let (peak, stop) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let thread = {
            let (peak, stop) = (peak.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(threads_now(), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(2));
                }
            })
        };
        // Wait for its first sample, so that a short run is sampled at least once.
        while peak.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        Sampler { peak, stop, thread }
    }

    fn finish(self) -> usize {
        // One last sample, taken while everything of the run still exists.
        self.peak.fetch_max(threads_now(), Ordering::Relaxed);
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("sampler");
        self.peak.load(Ordering::Relaxed)
    }
}

/// One measured run: commits/s, the peak thread count while it ran, and how many
/// records the group commit put in a batch on average.
#[derive(Clone, Copy)]
struct Run {
    commits_per_s: f64,
    peak_threads: usize,
    records_per_batch: f64,
}

impl Run {
    fn new(commits: u64, elapsed: Duration, peak_threads: usize, stats: &agentwal::Stats) -> Self {
        assert_eq!(stats.commits, commits);
        Run {
            commits_per_s: commits as f64 / elapsed.as_secs_f64(),
            peak_threads,
            records_per_batch: stats.appends as f64 / stats.batches.max(1) as f64,
        }
    }
}

fn run_async(rt: &tokio::runtime::Runtime, tasks: u64, steps: u64) -> Run {
    let dir = bench_dir("async");
    // Opened here, not with `AsyncStore::open`: that would start a blocking-pool thread,
    // which would then idle through the run and count in its threads.
    let store: AsyncStore = open_store(dir.path()).into();
    let sampler = Sampler::start();
    let start = Instant::now();
    rt.block_on(async {
        let joins: Vec<_> = (0..tasks)
            .map(|t| {
                let store = store.clone();
                tokio::spawn(async move {
                    let task = format!("task-{t}");
                    for i in 1..=steps {
                        store.commit(&task, &step(t, i)).await.expect("commit");
                    }
                })
            })
            .collect();
        for j in joins {
            j.await.expect("no panic");
        }
    });
    let elapsed = start.elapsed();
    let peak_threads = sampler.finish();
    Run::new(
        tasks * steps,
        elapsed,
        peak_threads,
        &store.blocking().stats(),
    )
}

fn run_blocking(threads: u64, steps: u64) -> Run {
    let dir = bench_dir("blocking");
    let store = open_store(dir.path());
    let sampler = Sampler::start();
    let start = Instant::now();
    // Scoped: every writer thread is joined before the timing ends.
    std::thread::scope(|s| {
        for t in 0..threads {
            let store = store.clone();
            s.spawn(move || {
                let task = format!("task-{t}");
                for i in 1..=steps {
                    store.commit(&task, &step(t, i)).expect("commit");
                }
            });
        }
    });
    let elapsed = start.elapsed();
    let peak_threads = sampler.finish();
    Run::new(threads * steps, elapsed, peak_threads, &store.stats())
}

/// A against B: the medians of each side, and the median of the per-rep ratios.
struct Comparison {
    a: Run,
    b: Run,
    pair_ratio: f64,
}

/// A and B, `reps` each, alternating A B B A A B ...
fn compare(rt: &tokio::runtime::Runtime, tasks: u64, steps: u64, reps: usize) -> Comparison {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        let order = if rep % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for is_async in order {
            if is_async {
                a.push(run_async(rt, tasks, steps));
            } else {
                b.push(run_blocking(tasks, steps));
            }
        }
    }
    let per_rep = |v: &[Run]| {
        v.iter()
            .map(|r| format!("{:.1}k", r.commits_per_s / 1e3))
            .collect::<Vec<_>>()
            .join(", ")
    };
    eprintln!(
        "  {tasks} tasks × {steps} steps: A {} | B {}",
        per_rep(&a),
        per_rep(&b)
    );
    let summary = |v: &[Run]| Run {
        commits_per_s: median_of(v.iter().map(|r| r.commits_per_s).collect()),
        peak_threads: v.iter().map(|r| r.peak_threads).max().unwrap_or(0),
        records_per_batch: median_of(v.iter().map(|r| r.records_per_batch).collect()),
    };
    // The disk's speed drifts over seconds; a rep's A and B ran back to back.
    let ratios = a.iter().zip(&b);
    Comparison {
        pair_ratio: median_of(
            ratios
                .map(|(a, b)| a.commits_per_s / b.commits_per_s)
                .collect(),
        ),
        a: summary(&a),
        b: summary(&b),
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}: cannot parse {v:?}"))
        })
        .unwrap_or(default)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` probes with --list
    }
    let quick = std::env::var_os("AGENTWAL_BENCH_QUICK").is_some();
    let (steps, reps, c_tasks, c_steps) = if quick {
        (20, 2, 1_000, 2)
    } else {
        (200, 15, 1_000, 20)
    };
    let reps = env_or("AGENTWAL_BENCH_REPS", reps);
    // The secondary table's writer counts ("" for none); AGENTWAL_BENCH_MAIN=0 skips A/B/C.
    let writers: String = env_or("AGENTWAL_BENCH_WRITERS", "8,1".to_string());
    let main_table = env_or("AGENTWAL_BENCH_MAIN", 1) != 0;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    // Warm-up, untimed: the disk, the allocator, the runtime's workers.
    run_async(&rt, 64, steps / 4);
    run_blocking(64, steps / 4);

    if main_table {
        println!(
            "## async commits on 2 tokio workers (A) against one OS thread per writer (B)\n\n\
             Default options (`SyncMode::Always`), ~1.9 KB agent steps, a fresh store per \
             rep, {reps} reps each in alternating order. commits/s: the median of the reps; \
             A / B: the ratio of the medians, and in brackets the median of the reps' \
             ratios (each rep's A and B ran back to back). Peak threads: the most the \
             process had during any rep (the sampler thread included). Records per \
             batch: appends / batches from `stats()`, median of the reps.\n"
        );
        println!(
            "| run | commits/s | A / B | peak threads | records per batch |\n\
             |---|---:|---:|---:|---:|"
        );
        let cmp = compare(&rt, 64, steps, reps);
        let (a, b) = (cmp.a, cmp.b);
        let ratio = a.commits_per_s / b.commits_per_s;
        println!(
            "| A: 64 tasks × {steps} steps, AsyncStore, 2 workers | {:.0} | {ratio:.2}× ({:.2}×) | {} | {:.1} |",
            a.commits_per_s, cmp.pair_ratio, a.peak_threads, a.records_per_batch
        );
        println!(
            "| B: 64 threads × {steps} steps, Store | {:.0} | | {} | {:.1} |",
            b.commits_per_s, b.peak_threads, b.records_per_batch
        );
        let c: Vec<Run> = (0..reps.min(5))
            .map(|_| run_async(&rt, c_tasks, c_steps))
            .collect();
        let c_peak = c.iter().map(|r| r.peak_threads).max().unwrap_or(0);
        let c_rate = median_of(c.iter().map(|r| r.commits_per_s).collect());
        let c_batch = median_of(c.iter().map(|r| r.records_per_batch).collect());
        println!(
            "| C: {c_tasks} tasks × {c_steps} steps, AsyncStore, 2 workers ({} reps) | {c_rate:.0} | | {c_peak} | {c_batch:.1} |",
            c.len()
        );
        println!();
        println!(
            "Targets: A / B ≥ 0.9×: {}; fewer than 8 threads during A: {}; during C: {}.\n",
            ratio >= 0.9 && cmp.pair_ratio >= 0.9,
            a.peak_threads < 8,
            c_peak < 8
        );
    }

    let writers: Vec<u64> = writers
        .split(',')
        .filter(|w| !w.is_empty())
        .map(|w| w.trim().parse().expect("AGENTWAL_BENCH_WRITERS: numbers"))
        .collect();
    if writers.is_empty() {
        return;
    }
    println!("## fewer writers: A against B\n");
    println!(
        "| writers | A commits/s | B commits/s | A / B (median of the reps' ratios) | A peak threads |\n\
         |---:|---:|---:|---:|---:|"
    );
    for tasks in writers {
        let cmp = compare(&rt, tasks, steps, reps);
        println!(
            "| {tasks} | {:.0} | {:.0} | {:.2}× ({:.2}×) | {} |",
            cmp.a.commits_per_s,
            cmp.b.commits_per_s,
            cmp.a.commits_per_s / cmp.b.commits_per_s,
            cmp.pair_ratio,
            cmp.a.peak_threads
        );
    }
}

/// [`common::median`] of the values collected.
fn median_of(mut v: Vec<f64>) -> f64 {
    common::median(&mut v)
}
