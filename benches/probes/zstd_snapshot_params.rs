//! Probe: zstd settings for snapshot bodies, the CPU and ratio of each (for
//! bench-results/format-v2.md). Not a test of the store: it compresses encoded
//! snapshots of the workload bench's states and chunks of the repository's own text with
//! each candidate's context, reused as the store reuses its thread's context.
//!
//! ```text
//! cargo bench --bench zstd_snapshot_params [-- CANDIDATE]
//! ```
//!
//! With a CANDIDATE name only that one runs (for `valgrind --tool=callgrind`, whose
//! instruction counts do not drift with the machine's load). `REPS` (default 15) rounds,
//! every candidate once per round in a rotating order; the time is the median of the
//! rounds' per-body mean, the range beside it.

#[path = "../common/mod.rs"]
#[allow(dead_code)] // the probe uses only its text helper
mod common;
#[path = "../workload/generator.rs"]
#[allow(dead_code)]
mod generator;

use std::time::Instant;

use agentwal::{AgentState, State};
use zstd::bulk::Compressor;
use zstd::zstd_safe::CParameter;

type Setup = fn(&mut Compressor<'static>);

fn candidates() -> Vec<(&'static str, i32, Setup)> {
    vec![
        ("L1", 1, |_| {}),
        ("L-1", -1, |_| {}),
        ("L-3", -3, |_| {}),
        ("L1-mm6", 1, |c| {
            c.set_parameter(CParameter::MinMatch(6)).unwrap()
        }),
        ("L1-mm7", 1, |c| {
            c.set_parameter(CParameter::MinMatch(7)).unwrap()
        }),
        ("L1-hash16", 1, |c| {
            c.set_parameter(CParameter::HashLog(16)).unwrap()
        }),
        ("L1-hash12", 1, |c| {
            c.set_parameter(CParameter::HashLog(12)).unwrap()
        }),
        ("L1-win16", 1, |c| {
            c.set_parameter(CParameter::WindowLog(16)).unwrap()
        }),
        ("L2", 2, |_| {}),
    ]
}

fn compressor(level: i32, setup: Setup) -> Compressor<'static> {
    let mut c = Compressor::new(level).unwrap();
    c.set_parameter(CParameter::ContentSizeFlag(true)).unwrap();
    c.set_parameter(CParameter::ChecksumFlag(false)).unwrap();
    setup(&mut c);
    c
}

/// Encoded states of the workload's tasks after a range of step counts (the sizes its
/// snapshots have: 10 to 200 steps of ~1.9 KB).
fn workload_snapshots() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for task in 0..4 {
        let mut state = AgentState::default();
        for step in 0..200 {
            state.apply(&generator::make_delta(task, step));
            if [10, 30, 60, 100, 150, 200].contains(&(step + 1)) {
                out.push(postcard::to_allocvec(&state).unwrap());
            }
        }
    }
    out
}

/// The repository's .md and .rs files, concatenated, in 128 KiB chunks.
fn real_text() -> Vec<Vec<u8>> {
    common::repo_text(&["DESIGN.md", "docs/format.md", "docs/store.md", "README.md"])
        .chunks(128 << 10)
        .filter(|c| c.len() == 128 << 10)
        .take(16)
        .map(<[u8]>::to_vec)
        .collect()
}

fn main() {
    let only = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
    let reps: usize = std::env::var("REPS").map_or(15, |v| v.parse().unwrap());
    let sets = [
        ("workload", workload_snapshots()),
        ("real text", real_text()),
    ];
    let cands: Vec<_> = candidates()
        .into_iter()
        .filter(|c| only.as_deref().is_none_or(|o| o == c.0))
        .collect();
    let mut ctxs: Vec<Compressor<'static>> =
        cands.iter().map(|&(_, l, s)| compressor(l, s)).collect();
    let mut out = Vec::new();
    // times[set][cand] = per-round mean µs per body
    let mut times = vec![vec![Vec::new(); cands.len()]; sets.len()];
    let mut ratios = vec![vec![0.0; cands.len()]; sets.len()];
    for (si, (_, bodies)) in sets.iter().enumerate() {
        for (ci, c) in ctxs.iter_mut().enumerate() {
            let (mut i, mut o) = (0usize, 0usize);
            for b in bodies {
                out.clear();
                out.reserve(zstd::zstd_safe::compress_bound(b.len()));
                c.compress_to_buffer(b, &mut out).unwrap();
                assert_eq!(zstd::bulk::decompress(&out, b.len()).unwrap(), *b);
                i += b.len();
                o += out.len();
            }
            ratios[si][ci] = o as f64 / i as f64;
        }
    }
    for (c, ctx) in cands.iter().zip(ctxs.iter_mut()) {
        eprintln!(
            "{}: context {} KiB after use",
            c.0,
            ctx.context_mut().sizeof() >> 10
        );
    }
    for r in 0..reps {
        for k in 0..cands.len() {
            let ci = (k + r) % cands.len();
            for (si, (_, bodies)) in sets.iter().enumerate() {
                let t0 = Instant::now();
                for b in bodies {
                    out.clear();
                    out.reserve(zstd::zstd_safe::compress_bound(b.len()));
                    ctxs[ci].compress_to_buffer(b, &mut out).unwrap();
                }
                let bytes: usize = bodies.iter().map(Vec::len).sum();
                // µs per 141 KB (the workload's mean snapshot)
                times[si][ci].push(t0.elapsed().as_secs_f64() * 1e6 * 141_463.0 / bytes as f64);
            }
        }
    }
    for (si, (name, bodies)) in sets.iter().enumerate() {
        let bytes: usize = bodies.iter().map(Vec::len).sum();
        println!(
            "\n{name}: {} bodies, {} bytes; µs per 141,463 bytes (the workload's mean snapshot), median of {reps} rounds (range)\n",
            bodies.len(),
            bytes
        );
        println!("| setting | ratio | µs / 141 KB | range | time ÷ L1 | ratio ÷ L1 |");
        println!("|---|---:|---:|---|---:|---:|");
        let med = |v: &Vec<f64>| {
            let mut v = v.clone();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let base_t = med(&times[si][0]);
        let base_r = ratios[si][0];
        for (ci, c) in cands.iter().enumerate() {
            let v = &times[si][ci];
            let (lo, hi) = (
                v.iter().copied().fold(f64::MAX, f64::min),
                v.iter().copied().fold(0.0, f64::max),
            );
            println!(
                "| {} | {:.3} | {:.0} | {:.0}–{:.0} | {:.2}× | {:.3}× |",
                c.0,
                ratios[si][ci],
                med(v),
                lo,
                hi,
                med(v) / base_t,
                ratios[si][ci] / base_r
            );
        }
    }
}
