//! Store-level figures, measured side by side in one run:
//! - `load_latest` of a 200-step task next to decoding the same state from one blob;
//! - write amplification (log bytes / delta bytes) and read amplification of a load
//!   (record bytes read / snapshot size of the state);
//! - commit latency p50/p99 with and without a concurrent compaction;
//! - the CPU of a small commit (and of the next load) to a task of a ~3.3 MB state, with
//!   the caller holding the checkpoint it loaded or not (`SyncMode::Never`: no disk wait).
//!
//! `cargo bench --bench store` (AGENTWAL_BENCH_QUICK=1 for a short run;
//! `cargo bench --bench store -- holding` for the commit-while-holding section alone).

use std::time::{Duration, Instant};

mod common;

use agentwal::{AgentDelta, AgentState, Message, Options, Store, SyncMode};
use common::step;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort_unstable();
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
}

fn bench_dir(name: &str) -> tempfile::TempDir {
    // Under target/ so the figures come from the real disk, not a tmpfs.
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-stores");
    std::fs::create_dir_all(&base).expect("bench dir");
    tempfile::Builder::new()
        .prefix(name)
        .tempdir_in(base)
        .expect("tempdir")
}

fn load_vs_blob(rounds: usize) {
    let dir = bench_dir("load");
    let store: Store = Store::open(dir.path()).expect("open");
    let mut delta_bytes = 0u64;
    for i in 1..=200 {
        let d = step(1, i);
        delta_bytes += postcard::to_allocvec(&d).expect("encode").len() as u64;
        store.commit("task", &d).expect("commit");
    }
    let state = store
        .load_latest("task")
        .expect("load")
        .expect("exists")
        .state;
    let blob = postcard::to_allocvec(&*state).expect("encode");
    let (mut load, mut decode) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        let cp = store.load_latest("task").expect("load").expect("exists");
        load.push(t.elapsed());
        assert_eq!(cp.seq, 200);
        let t = Instant::now();
        let s: AgentState = postcard::from_bytes(&blob).expect("decode");
        decode.push(t.elapsed());
        assert_eq!(s.messages.len(), 400);
    }
    let infos = store.list_checkpoints("task").expect("list");
    let base = infos.iter().rposition(|c| c.snapshot).unwrap_or(0);
    let read_bytes: u64 = infos[base..].iter().map(|c| c.bytes).sum();
    let written = store.stats().bytes_written;
    let (l, d) = (median(load), median(decode));
    println!("## load_latest of a 200-step task ({rounds} rounds, medians, interleaved)\n");
    println!("| figure | value |\n|---|---:|");
    println!("| load_latest p50 | {l:?} |");
    println!("| decode the same state from one postcard blob, p50 | {d:?} |");
    println!(
        "| ratio load / blob decode | {:.2}× |",
        l.as_secs_f64() / d.as_secs_f64()
    );
    println!("| state size (postcard) | {} B |", blob.len());
    println!(
        "| records a load reads (snapshot at seq {} + {} deltas) | {} B |",
        infos[base].seq,
        infos.len() - base - 1,
        read_bytes
    );
    println!(
        "| read amplification (record bytes read / state size) | {:.2}× |",
        read_bytes as f64 / blob.len() as f64
    );
    println!(
        "| write amplification (log bytes written / delta bytes) | {:.2}× ({written} / {delta_bytes}) |",
        written as f64 / delta_bytes as f64
    );
    println!(
        "| snapshot records among 200 checkpoints | {} |\n",
        infos.iter().filter(|c| c.snapshot).count()
    );
}

fn commit_latency(with_compaction: bool, threads: u64, steps: u64) -> (Duration, Duration, u64) {
    let dir = bench_dir("p99");
    let opts = Options {
        segment_bytes: 1 << 20,
        keep_checkpoints: Some(8),
        auto_compact: false,
        ..Options::default()
    };
    let store: Store = Store::open_with(dir.path(), opts).expect("open");
    let done = std::sync::atomic::AtomicBool::new(false);
    let mut lat = std::thread::scope(|s| {
        let compactor = s.spawn(|| {
            let mut passes = 0;
            while with_compaction && !done.load(std::sync::atomic::Ordering::Relaxed) {
                store.compact().expect("compact");
                passes += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            passes
        });
        let writers: Vec<_> = (0..threads)
            .map(|t| {
                let store = store.clone();
                s.spawn(move || {
                    let mut lat = Vec::new();
                    for i in 1..=steps {
                        let d = step(t, i);
                        let start = Instant::now();
                        store.commit(&format!("task-{t}"), &d).expect("commit");
                        lat.push(start.elapsed());
                    }
                    lat
                })
            })
            .collect();
        let lat: Vec<Duration> = writers
            .into_iter()
            .flat_map(|w| w.join().expect("writer"))
            .collect();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let passes = compactor.join().expect("compactor");
        (lat, passes)
    });
    let p50 = percentile(&mut lat.0, 0.5);
    let p99 = percentile(&mut lat.0, 0.99);
    (p50, p99, lat.1)
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// How a caller of the load → commit loop holds its checkpoint.
#[derive(Clone, Copy)]
enum Holding {
    /// Drops it before it commits.
    DroppedBeforeCommit,
    /// Holds it across the commit, drops it before the next load.
    AcrossCommit,
    /// Holds it until the next load has returned (`cp = store.load_latest(..)`).
    AcrossNextLoad,
}

/// Median CPU of one commit of a ~256-byte delta and of the load after it, on a task whose
/// state is about `state_bytes`, `commits` times, holding the checkpoint as `holding` says.
fn commit_cpu(state_bytes: usize, commits: u64, holding: Holding) -> (Duration, Duration) {
    let dir = bench_dir("hold");
    let opts = Options {
        sync: SyncMode::Never,
        auto_compact: false,
        ..Options::default()
    };
    let store: Store = Store::open_with(dir.path(), opts).expect("open");
    let chunk = "x".repeat(1000);
    for i in 0..state_bytes / 1000 / 64 {
        let mut d = AgentDelta::default();
        for j in 0..64 {
            d = d.message(Message::tool(format!("c{i}-{j}"), chunk.clone()));
        }
        store.commit("task", &d).expect("commit");
    }
    let small = AgentDelta::default().message(Message::assistant("y".repeat(240)));
    let (mut commit, mut load) = (Vec::new(), Vec::new());
    let mut held = store.load_latest("task").expect("load");
    for _ in 0..commits {
        if matches!(holding, Holding::DroppedBeforeCommit) {
            drop(held.take());
        }
        let t = thread_cpu();
        store.commit("task", &small).expect("commit");
        commit.push(thread_cpu() - t);
        if matches!(holding, Holding::AcrossCommit) {
            drop(held.take());
        }
        let t = thread_cpu();
        let next = store.load_latest("task").expect("load");
        load.push(thread_cpu() - t);
        held = std::hint::black_box(next);
    }
    drop(held);
    (median(commit), median(load))
}

fn commit_while_holding(commits: u64) {
    let state_bytes = 3_300_000;
    println!(
        "## CPU of a 256-byte commit and the next load, ~3.3 MB state ({commits} commits each, medians)\n"
    );
    println!("| the caller's checkpoint | commit CPU | next load CPU |\n|---|---:|---:|");
    for (name, holding) in [
        ("dropped before the commit", Holding::DroppedBeforeCommit),
        ("held across the commit", Holding::AcrossCommit),
        ("held until the next load returns", Holding::AcrossNextLoad),
    ] {
        let (c, l) = commit_cpu(state_bytes, commits, holding);
        println!("| {name} | {c:?} | {l:?} |");
    }
    println!();
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` probes with --list
    }
    let quick = std::env::var_os("AGENTWAL_BENCH_QUICK").is_some();
    commit_while_holding(if quick { 50 } else { 300 });
    if std::env::args().any(|a| a == "holding") {
        return; // `cargo bench --bench store -- holding`: that section alone
    }
    load_vs_blob(if quick { 20 } else { 300 });
    let (threads, steps, rounds) = if quick { (4, 30, 1) } else { (8, 200, 3) };
    println!(
        "## commit latency, {threads} threads × {steps} steps, with and without a concurrent compaction ({rounds} alternating rounds)\n"
    );
    println!("| run | round | p50 | p99 | compaction passes |\n|---|---:|---:|---:|---:|");
    for round in 1..=rounds {
        for with in [false, true] {
            let (p50, p99, passes) = commit_latency(with, threads, steps);
            let name = if with { "with compaction" } else { "without" };
            println!("| {name} | {round} | {p50:?} | {p99:?} | {passes} |");
        }
    }
}
