//! Which codec for format v2's record compression: ratio and speed of
//! zstd, lz4_flex and snap on the bodies a real store writes. The store under test writes
//! its bodies uncompressed (`Compression::None`), so that every candidate compresses the
//! same encoded bodies; the store's own compression (zstd level 1, docs/format.md §8) is
//! measured by the workload benchmark (`agentwal` against `agentwal-uncompressed`).
//!
//! ```text
//! cargo bench --bench compression                       # 64 tasks × 200 steps, 5 reps
//! AGENTWAL_BENCH_QUICK=1 cargo bench --bench compression  # CI smoke run: 8 × 40, 1 rep
//! AGENTWAL_COMP_TASKS=8 AGENTWAL_COMP_STEPS=50 AGENTWAL_COMP_REPS=1 cargo bench --bench compression
//! ```
//!
//! Results (written by hand from a full run's output): `bench-results/compression.md`.
//!
//! For each payload source, the agent steps are committed into a real `Store` (default
//! `Options` except `SyncMode::Never`: the sync mode changes no record, only the time it
//! takes; and `Compression::None`), the store is closed, and its log is replayed with `Log::open_with`. Every kind-1
//! record (a checkpoint) is decoded with a mirror of `CheckpointRec` (docs/format.md §8) to take
//! its body: postcard(`AgentState`) for a snapshot, postcard(`AgentDelta`) for a delta.
//! Each body is then compressed on its own (one record, one frame: what a per-record codec
//! id allows) with every candidate, timed single-threaded with reused contexts and buffers.
//!
//! Payload sources:
//! - `workload`: `benches/workload/generator.rs` (`make_delta`): the deltas the workload
//!   benchmark commits: word salad from 64 English words, UUID task ids, JSON-ish args.
//! - `common`: `benches/common::step`: the `store`/`micro` benches' step: xorshift
//!   lowercase letters, about log2(26) = 4.7 bits of entropy per byte, so a floor.
//! - `real-text` (ratio only): the repository's own `.md` and `.rs` files cut into chunks of
//!   2 KiB and 100 KiB, a check on how far the synthetic text is from prose and code.

#[allow(dead_code)]
#[path = "../common/mod.rs"]
mod common;
#[allow(dead_code)]
#[path = "../workload/generator.rs"]
mod generator;

use std::path::Path;
use std::time::Instant;

use agentwal::AgentDelta;

mod codecs;
mod measure;
mod records;

use codecs::codecs;
use measure::{ratio, real_text, run_source};
use records::store_records;

// ---------------------------------------------------------------------------------------
// Payloads

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    // Quick mode (CI: it only must run): 8 tasks × 40 steps, one rep.
    let quick = std::env::var_os("AGENTWAL_BENCH_QUICK").is_some();
    let tasks = env_usize("AGENTWAL_COMP_TASKS", if quick { 8 } else { 64 });
    let steps = env_usize("AGENTWAL_COMP_STEPS", if quick { 40 } else { 200 });
    let reps = env_usize("AGENTWAL_COMP_REPS", if quick { 1 } else { 5 });
    println!(
        "# compression probe: {tasks} tasks × {steps} steps, {reps} reps, zstd 0.14 (C library {}), lz4_flex 0.14, snap 1.1",
        zstd::zstd_safe::version_string()
    );
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tmp");
    std::fs::create_dir_all(&base).unwrap();

    // A zstd dictionary for deltas, trained on steps of other tasks than the measured ones.
    let train = |f: &dyn Fn(usize, usize) -> AgentDelta| -> Vec<u8> {
        let samples: Vec<Vec<u8>> = (0..8)
            .flat_map(|t| (0..100).map(move |s| (t, s)))
            .map(|(t, s)| postcard::to_allocvec(&f(10_000 + t, s)).unwrap())
            .collect();
        let t = Instant::now();
        let d = zstd::dict::from_samples(&samples, 16 * 1024).unwrap();
        eprintln!(
            "trained a {}-byte dictionary on {} deltas in {:.2} s",
            d.len(),
            samples.len(),
            t.elapsed().as_secs_f64()
        );
        d
    };

    type Src = (
        &'static str,
        fn(usize) -> String,
        fn(usize, usize) -> AgentDelta,
    );
    let sources: [Src; 2] = [
        ("workload", generator::task_id, generator::make_delta),
        (
            "common",
            |t| format!("task-{t}"),
            |t, s| common::step(t as u64, s as u64),
        ),
    ];
    for (name, id, step) in sources {
        let dir = tempfile::tempdir_in(&base).unwrap();
        let (recs, log_bytes, commit_s) = store_records(dir.path(), tasks, steps, id, step);
        eprintln!(
            "{name}: committed {} steps in {commit_s:.2} s; {} checkpoint records",
            tasks * steps,
            recs.len()
        );
        let dict = train(&step);
        run_source(name, &recs, log_bytes, Some(&dict), reps);
    }

    // Real text: ratio only.
    println!("\n## reference: real text (the repository's .md and .rs files), ratio only\n");
    println!("| codec | 2 KiB chunks | 100 KiB chunks |");
    println!("|---|---:|---:|");
    let small = real_text(2048);
    let large = real_text(100 * 1024);
    for mut c in codecs(None) {
        let mut r = Vec::new();
        for set in [&small, &large] {
            let (mut i, mut o) = (0u64, 0u64);
            let mut out = Vec::new();
            for b in set.iter() {
                c.compress(b, &mut out);
                i += b.len() as u64;
                o += out.len() as u64;
            }
            r.push(ratio(o, i));
        }
        println!("| {} | {} | {} |", c.name(), r[0], r[1]);
    }
}
