//! Commit latency while the background compactor runs under CPU contention (docs/store.md
//! §7 and §10): the compactor's CPU-heavy work runs at nice 19, and a thread at that
//! priority gets about 1.5% of a core beside busy nice-0 threads. If it held a lock that
//! committers wait on (the positions lock for the barrier, the install and the remap;
//! group-commit leadership; a task's index lock) that long, single commits waited for
//! seconds (3.4 s and 4.3 s measured at 4,000 tasks on 2 busy cores): priority inversion.
//!
//! The test commits on a fixed schedule (one commit every `INTERVAL`, latency measured
//! from the scheduled start, so that a stall counts against every commit it delays, not
//! only the one that waited) round-robin over 4,000 tasks, beside two busy nice-0
//! threads, while passes run, and asks p99.9 <= 100 ms. A machine shared with other work
//! can delay any thread now and then, so an attempt whose p99.9 is over gets up to two
//! more; an attempt counts only if a pass ran during it. A filler thread commits large
//! deltas that retention makes dead at once, so that passes come every second or two.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agentwal::{AgentDelta, Compression, Options, Store, SyncMode};

const TASKS: usize = 4000;
/// Commits each task gets before the measured phase (a large index, many segments).
const PREFILL_PER_TASK: usize = 12;
/// Time between scheduled commits in the measured phase.
const INTERVAL: Duration = Duration::from_micros(500);
/// Length of one measured attempt.
const ATTEMPT: Duration = Duration::from_secs(8);
const ATTEMPTS_MAX: usize = 3;
const P999_MAX: Duration = Duration::from_millis(100);
/// Bytes of each filler delta, and the time between filler commits.
const FILLER_BYTES: usize = 8 << 10;
const FILLER_INTERVAL: Duration = Duration::from_millis(4);
/// Busy threads at nice 0, one per core of the 2-core CI machine.
const SPINNERS: usize = 2;

fn delta(i: usize) -> AgentDelta {
    AgentDelta::default()
        .set("step", i as i64)
        .set("note", "n".repeat(60))
}

/// Threads that keep a core busy each until dropped.
struct Spinners {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Spinners {
    fn start(n: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(6364136223846793005) + 1);
                    }
                })
            })
            .collect();
        Spinners { stop, threads }
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Commits `FILLER_BYTES` deltas to a few tasks, one every `FILLER_INTERVAL`, until
/// `stop`: with retention they turn dead at once, so that passes come every second or
/// two (the small commits alone make a pass due only every ~64,000 commits at 4,000 tasks).
fn fill(store: &Store, stop: &AtomicBool) {
    let blob = "f".repeat(FILLER_BYTES);
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let delta = AgentDelta::default().set("blob", blob.as_str()).set("i", i);
        store.commit(&format!("filler-{}", i % 4), &delta).unwrap();
        i += 1;
        std::thread::sleep(FILLER_INTERVAL);
    }
}

/// One measured attempt: the p99.9 of the commits' latencies from their scheduled
/// start, and how many passes ran meanwhile.
fn attempt(store: &Store, next_step: &mut usize) -> (Duration, u64) {
    let _busy = Spinners::start(SPINNERS);
    let passes_before = store.stats().compactions;
    let stop = AtomicBool::new(false);
    let mut latencies = Vec::new();
    std::thread::scope(|scope| {
        scope.spawn(|| fill(store, &stop));
        let start = Instant::now();
        let mut scheduled = start;
        while scheduled < start + ATTEMPT {
            if let Some(ahead) = scheduled.checked_duration_since(Instant::now()) {
                std::thread::sleep(ahead);
            }
            let i = *next_step;
            *next_step += 1;
            store
                .commit(&format!("task-{}", i % TASKS), &delta(i))
                .unwrap();
            latencies.push(scheduled.elapsed());
            scheduled += INTERVAL;
        }
        stop.store(true, Ordering::Relaxed);
    });
    latencies.sort_unstable();
    let p999 = latencies[(latencies.len() * 999).div_ceil(1000) - 1];
    (p999, store.stats().compactions - passes_before)
}

#[test]
fn commit_p999_under_cpu_contention_while_compacting_is_at_most_100ms() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        segment_bytes: 256 << 10,
        keep_checkpoints: Some(8),
        sync: SyncMode::Never,
        compression: Compression::None,
        ..Options::default()
    };
    let store: Store = Store::open_with(dir.path(), options).unwrap();
    let mut step = 0;
    for _ in 0..TASKS * PREFILL_PER_TASK {
        store
            .commit(&format!("task-{}", step % TASKS), &delta(step))
            .unwrap();
        step += 1;
    }
    let mut seen = Vec::new();
    for _ in 0..ATTEMPTS_MAX * 2 {
        let (p999, passes) = attempt(&store, &mut step);
        eprintln!("p99.9 {p999:?} with {passes} passes");
        if passes == 0 {
            continue;
        }
        seen.push(p999);
        if p999 <= P999_MAX || seen.len() == ATTEMPTS_MAX {
            break;
        }
    }
    assert!(!seen.is_empty(), "no compaction pass ran while measuring");
    assert!(
        seen.iter().any(|p| *p <= P999_MAX),
        "commit p99.9 over {P999_MAX:?} in every attempt: {seen:?}"
    );
}
