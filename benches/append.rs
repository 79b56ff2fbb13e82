//! Durable append (`SyncMode::Always`, default segment size) with 1, 8 and 64 concurrent
//! appenders and 256 B / 4 KiB payloads.
//!
//! With N threads one iteration is N concurrent appends (each thread appends once per
//! iteration), and throughput is reported in elements (appends) per second, so the time
//! per iteration is the latency of a round of N concurrent appends.
//!
//! The logs live under Cargo's target tmp directory (on the project's disk), not in `/tmp`,
//! which may be a tmpfs where fsync costs nothing; `AGENTWAL_BENCH_DIR` puts them elsewhere.
//!
//! ```text
//! cargo bench --bench append                         # ~1 minute
//! AGENTWAL_BENCH_QUICK=1 cargo bench --bench append  # smoke run, ~15 s
//! ```

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use agentwal::log::{Log, LogOptions, SyncMode};
use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};

const THREADS: [usize; 3] = [1, 8, 64];
const PAYLOADS: [(usize, &str); 2] = [(256, "256B"), (4096, "4KiB")];

fn durable_append(c: &mut Criterion) {
    let base = std::env::var_os("AGENTWAL_BENCH_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from);
    std::fs::create_dir_all(&base).expect("create the benchmark directory");
    let quick = std::env::var("AGENTWAL_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let (warm_up, measurement) = if quick {
        (Duration::from_millis(300), Duration::from_secs(1))
    } else {
        (Duration::from_secs(1), Duration::from_secs(3))
    };
    let mut group = c.benchmark_group("durable_append");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(warm_up)
        .measurement_time(measurement);
    // Deleted at the end, not between benchmarks: the file system's discards of a deleted
    // log would otherwise compete with the next benchmark for the disk.
    let mut dirs = Vec::new();
    for (payload_bytes, payload_name) in PAYLOADS {
        for threads in THREADS {
            let dir = tempfile::Builder::new()
                .prefix("bench-append-")
                .tempdir_in(&base)
                .expect("create a temporary directory");
            let log = Log::open(
                dir.path(),
                LogOptions {
                    sync: SyncMode::Always,
                    ..LogOptions::default()
                },
            )
            .expect("open the log");
            let payload = vec![0x5Au8; payload_bytes];
            group.throughput(Throughput::Elements(threads as u64));
            group.bench_with_input(
                BenchmarkId::new(
                    payload_name,
                    format!("{threads}_thread{}", if threads == 1 { "" } else { "s" }),
                ),
                &threads,
                |b, &threads| {
                    b.iter_custom(|iters| concurrent_appends(&log, &payload, threads, iters));
                },
            );
            drop(log);
            dirs.push(dir);
        }
    }
    group.finish();
    drop(dirs);
}

/// `threads` threads each append `iters` records; returns the time from their common start
/// until the last one finished (thread start-up is not measured).
fn concurrent_appends(log: &Log, payload: &[u8], threads: usize, iters: u64) -> Duration {
    let start_line = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let start_line = &start_line;
                s.spawn(move || {
                    start_line.wait();
                    for _ in 0..iters {
                        black_box(log.append(1, payload).expect("append"));
                    }
                })
            })
            .collect();
        start_line.wait();
        let started = Instant::now();
        for w in workers {
            w.join().expect("appender panicked");
        }
        started.elapsed()
    })
}

criterion_group!(benches, durable_append);
criterion_main!(benches);
