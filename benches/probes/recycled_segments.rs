//! Does a rotation onto a recycled segment file (docs/format.md §6) make durable commits
//! faster? The same 64-thread `Store::commit` workload (`SyncMode::Always`, default
//! compression, `segment_bytes` 4 MiB so that it rotates a few times) on
//!
//! - `fresh`: a new store, whose every segment is a new file;
//! - `recycled`: a store that already has retired files: filled with other tasks (not
//!   timed; `SyncMode::Periodic`), those tasks deleted, compacted so their segments go to
//!   `.wal.free`, reopened with `SyncMode::Always`; its rotations then reuse those files
//!   (the run checks `Stats::free_segments` before and after: it must fall by the run's
//!   rotations).
//!
//! ```text
//! cargo bench --bench recycled_segments [-- DIR]
//! ```
//!
//! Every run gets its own directory under DIR (default: the crate's `target`; never a
//! tmpfs). Reps alternate the order (fresh, recycled, then recycled, fresh, ...), because
//! a shared disk's fsync latency drifts. Environment: `REPS` (default 8), `STEPS` per task
//! (default 200: about 3 rotations, within the 4 files a store keeps), `THREADS` (64).

use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use agentwal::{AgentDelta, Compression, Message, Options, Store, SyncMode};

#[path = "../common/mod.rs"]
#[allow(dead_code)] // the probe uses only its median
mod common;

const SEGMENT_BYTES: u64 = 4 << 20;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .map_or(default, |v| v.parse().expect(name))
}

/// splitmix64 word salad, so the deltas compress about as the workload bench's do.
fn delta(task: usize, step: usize) -> AgentDelta {
    const WORDS: [&str; 16] = [
        "the", "agent", "tool", "result", "search", "query", "file", "page", "token", "model",
        "plan", "step", "retry", "cache", "index", "vector",
    ];
    let mut x = (task as u64) << 32 | step as u64;
    let mut next = move || {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut text = |bytes: usize| {
        let mut s = String::with_capacity(bytes + 8);
        while s.len() < bytes {
            s.push_str(WORDS[(next() % 16) as usize]);
            s.push(' ');
        }
        s
    };
    AgentDelta::default()
        .message(Message::assistant(text(300)))
        .message(Message::tool(format!("call_{task}_{step}"), text(1500)))
        .set("step", step as i64)
}

fn options(sync: SyncMode) -> Options {
    Options {
        sync,
        segment_bytes: SEGMENT_BYTES,
        auto_compact: false,
        ..Options::default()
    }
}

/// Fills `dir` with 6 segments of other tasks, deletes them and compacts: the store then
/// holds retired files. Returns how many.
fn warm(dir: &Path) -> u64 {
    let store: Store = Store::open_with(
        dir,
        Options {
            compression: Compression::None,
            ..options(SyncMode::Periodic(Duration::from_millis(10)))
        },
    )
    .expect("open");
    let mut step = 0;
    while store.stats().segments < 7 {
        for t in 0..16 {
            store
                .commit(&format!("warm-{t}"), &delta(1000 + t, step))
                .expect("commit");
        }
        step += 1;
    }
    for t in 0..16 {
        store.delete_task(&format!("warm-{t}")).expect("delete");
    }
    store.compact().expect("compact");
    store.flush().expect("flush");
    store.stats().free_segments
}

struct Run {
    commits_per_s: f64,
    p99_us: f64,
    rotations: u64,
    free_before: u64,
    free_after: u64,
    zero_bytes: u64,
}

fn run(dir: &Path, threads: usize, steps: usize) -> Run {
    let store: Store = Store::open_with(dir, options(SyncMode::Always)).expect("open");
    let before = store.stats();
    let line = Barrier::new(threads + 1);
    let (elapsed, mut lat) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (store, line) = (&store, &line);
                s.spawn(move || {
                    let deltas: Vec<_> = (0..steps).map(|n| delta(t, n)).collect();
                    let id = format!("task-{t}");
                    let mut lat = Vec::with_capacity(steps);
                    line.wait();
                    for d in &deltas {
                        let t0 = Instant::now();
                        store.commit(&id, d).expect("commit");
                        lat.push(t0.elapsed().as_nanos() as u64);
                    }
                    lat
                })
            })
            .collect();
        line.wait();
        let t0 = Instant::now();
        let lat: Vec<u64> = workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect();
        (t0.elapsed(), lat)
    });
    let after = store.stats();
    lat.sort_unstable();
    Run {
        commits_per_s: lat.len() as f64 / elapsed.as_secs_f64(),
        p99_us: lat[lat.len() * 99 / 100] as f64 / 1e3,
        // Nothing is deleted during the run: every rotation adds one segment file.
        rotations: after.segments - before.segments,
        free_before: before.free_segments,
        free_after: after.free_segments,
        zero_bytes: after.zero_bytes_written,
    }
}

fn main() {
    // `cargo bench` appends `--bench` to the arguments.
    let base = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"),
            PathBuf::from,
        );
    let (reps, steps, threads) = (env("REPS", 8), env("STEPS", 200), env("THREADS", 64));
    let root = base.join(format!("recycled-segments-{}", std::process::id()));
    let mut fresh = (Vec::new(), Vec::new());
    let mut recycled = (Vec::new(), Vec::new());
    let mut ratios = Vec::new();
    println!(
        "T={threads}, {steps} steps per task, segment_bytes {} MiB, {reps} reps",
        SEGMENT_BYTES >> 20
    );
    for rep in 0..reps {
        let mut pair = [None, None];
        let order: [usize; 2] = if rep % 2 == 0 { [0, 1] } else { [1, 0] };
        for case in order {
            let dir = root.join(format!("{rep}-{case}"));
            std::fs::create_dir_all(&dir).expect("mkdir");
            let retired = if case == 1 { warm(&dir) } else { 0 };
            let r = run(&dir, threads, steps);
            let name = ["fresh", "recycled"][case];
            println!(
                "rep {rep} {name:8} {:7.0} commits/s  p99 {:7.0} µs  rotations {}  free {} -> {} (retired by warm-up: {retired})  zero-fill {:.1} MiB",
                r.commits_per_s,
                r.p99_us,
                r.rotations,
                r.free_before,
                r.free_after,
                r.zero_bytes as f64 / (1 << 20) as f64
            );
            if case == 1 {
                assert!(r.free_after < r.free_before, "no recycled file was used");
            }
            std::fs::remove_dir_all(&dir).expect("rm");
            pair[case] = Some(r);
        }
        let [Some(f), Some(w)] = pair else {
            unreachable!()
        };
        ratios.push(w.commits_per_s / f.commits_per_s);
        fresh.0.push(f.commits_per_s);
        fresh.1.push(f.p99_us);
        recycled.0.push(w.commits_per_s);
        recycled.1.push(w.p99_us);
    }
    let _ = std::fs::remove_dir_all(&root);
    let (fc, fp) = (common::median(&mut fresh.0), common::median(&mut fresh.1));
    let (wc, wp) = (
        common::median(&mut recycled.0),
        common::median(&mut recycled.1),
    );
    let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    println!();
    println!("| store | commits/s (median) | p99 commit (median) |");
    println!("|---|---:|---:|");
    println!("| fresh | {fc:.0} | {fp:.0} µs |");
    println!("| recycled | {wc:.0} | {wp:.0} µs |");
    println!(
        "| recycled ÷ fresh | {:.2}× (per rep {}, their median {:.2}×) | {:.2}× |",
        wc / fc,
        each.join(", "),
        common::median(&mut ratios),
        wp / fp
    );
}
