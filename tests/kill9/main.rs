//! Kill -9: a child process writes to a store and acknowledges each commit on stdout the
//! moment `commit` returns; the parent kills it with SIGKILL at a random moment, reopens
//! the store and checks that everything acknowledged is there, with the right state.
//!
//! The child is this same test binary, re-run with `--exact child_writer` and the store
//! directory in `AGENTWAL_KILL_CHILD`; without that variable `child_writer` returns at
//! once, so an ordinary `cargo test` only runs the parent, `kill9_rounds`.
//!
//! The child opens the store (`SyncMode::Always`, 64 KiB segments so segments rotate and
//! the background compactor runs; `keep_checkpoints: Some(8)` in about two rounds of
//! three) and runs three writer threads. Each owns two tasks and also commits to a shared
//! task with `commit_if` (retrying on conflict). Deltas are a pure function of
//! (task, seq), so the parent recomputes every state; the state type folds them into a
//! hash chain, so a state is right only if exactly deltas 1..=seq were applied in order.
//! Every eighth seq of an owned task first journals a tool call: `begin_call` (acked
//! `B task seq`) and, on every sixteenth, `finish_call` (acked `F task seq`); a resumed
//! child repeats a begun call, which must be a no-op. Commits are acked `C task seq`.
//!
//! After each kill the parent opens the store read-only and then for writing, and checks:
//! every acked seq is loadable with the right state (unless retention dropped it), the
//! latest seq is at least the largest acked one and at most one unacknowledged commit per
//! writer beyond it, every acked begun call is pending or finished and every acked finish
//! has its result. Rounds reuse one directory: each child resumes from `load_latest`.
//!
//! With the `tokio` feature, every other round's child runs the same writers as tasks on a
//! 2-worker tokio runtime through the async API (`AsyncStore`), whose commits are queued
//! and answered by the thread that finishes their batch: a kill then lands among deferred
//! writes, and the same checks hold.
//!
//! States larger than a segment (format v2, docs/format.md §5): a fourth writer, a thread of
//! its own in either mode, grows task `big`, whose state keeps its deltas' bytes (up to
//! [`BULK_BYTES_MAX`], 11 segments): most deltas are 8 to 64 KiB, some larger than a
//! segment, so its snapshots (every 16th commit) and those deltas get segments of their
//! own. Every [`FORK_EVERY`]th seq `s` of it is forked into `bigfork-s` (acked `K`), whose
//! seq 2 is then committed; the fork made [`FORKS_KEPT`] forks before is deleted (acked
//! `D`) and the store compacted (`Store::compact`, beside the background compactor), so
//! segment files are retired and rotations recycle them. The parent checks every fork it
//! finds (seq 1 the state of `big` at `s`, seq 2 that plus its delta), every acked fork
//! not acked deleted is there, and no acked deletion came back. After each kill it counts
//! the recycled segment files, the segments larger than `segment_bytes` and the largest
//! state of `big`; a run of at least [`ROUNDS_DEFAULT`] rounds fails if recycling,
//! oversized segments, forks or a state of 10 segments never showed up.
//!
//! `AGENTWAL_KILL_ROUNDS` sets the number of rounds (default 25, a few seconds in
//! release); `AGENTWAL_KILL_SEED` replays the kill schedule of a printed seed (the
//! delays and options; thread interleavings differ from run to run).

#[path = "../common/mod.rs"]
mod common;

use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use agentwal::Store;
use common::env::env_u64;

mod child;
mod oracle;
mod parent;
mod workload;

use child::{ack, async_child, big_writer, child_thread, fail_child, latest};
use oracle::{Oracle, segment_kinds};
use parent::{Kill, Totals, run_child};
use workload::{
    ASYNC_ENV, BIG_TASK, CHILD_ENV, Chain, KEEP, KEEP_ENV, ROUNDS_DEFAULT, ROUNDS_ENV, SEED_ENV,
    SEGMENT_BYTES, SHARED_TASK, THREADS, XorShift64Star, options,
};

// ---------------------------------------------------------------------------------------
// The child

/// Child mode: runs only when the parent sets `AGENTWAL_KILL_CHILD`.
#[test]
fn child_writer() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let keep = env_u64(KEEP_ENV).map(|k| u32::try_from(k).expect("a checkpoint count"));
    let started = Instant::now();
    let store: Store<Chain> = Store::open_with(&dir, options(keep)).unwrap_or_else(|e| {
        fail_child(&format!("open failed: {e}"));
    });
    ack("R ready 0");
    // The big writer, a thread of its own in either mode.
    let big = store.clone();
    std::thread::spawn(move || big_writer(&big, started));
    if std::env::var_os(ASYNC_ENV).is_some() {
        return async_child::run(store, started);
    }
    let shared_expected = AtomicU64::new(latest(&store, SHARED_TASK));
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (store, shared_expected) = (&store, &shared_expected);
            s.spawn(move || child_thread(store, t, shared_expected, started));
        }
    });
}

// ---------------------------------------------------------------------------------------
// The parent

#[test]
fn kill9_rounds() {
    let rounds = env_u64(ROUNDS_ENV).unwrap_or(ROUNDS_DEFAULT);
    let seed = env_u64(SEED_ENV).unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        t.as_nanos() as u64 ^ u64::from(std::process::id())
    });
    println!("kill9: {rounds} rounds, seed {seed} (replay: {SEED_ENV}={seed})");
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    let mut oracle = Oracle::default();
    let mut rng = XorShift64Star::new(seed);
    let mut totals = Totals::default();
    for round in 0..rounds {
        let ctx = format!("seed {seed} ({SEED_ENV}={seed}), round {round}");
        let keep = (rng.below(3) != 0).then_some(KEEP);
        let plan = if rng.below(6) == 0 {
            // Kill while the child may still be starting or recovering.
            Kill::AfterSpawn(Duration::from_millis(rng.below(40)))
        } else {
            Kill::AfterReady(Duration::from_millis(5 + rng.below(250)))
        };
        // Every other round through the async API, where it is built.
        let asynchronous = cfg!(feature = "tokio") && round % 2 == 1;
        let ctx = format!(
            "{ctx} ({} API)",
            if asynchronous { "async" } else { "blocking" }
        );
        let acks = run_child(&store_dir, keep, plan, asynchronous, &ctx);
        totals.add(&acks);
        let (recycled, oversized) = segment_kinds(&store_dir);
        totals.recycled_seen += recycled;
        totals.oversized_seen += oversized;
        oracle.check_round(&store_dir, keep, &acks, &ctx);
        if let Some(big) = oracle.seen_latest.get(BIG_TASK).filter(|&&s| s > 0) {
            let state = oracle.expected(BIG_TASK, *big);
            totals.big_state_bytes = totals.big_state_bytes.max(state.bulk.len());
        }
    }
    oracle.check_everything(&store_dir, &format!("seed {seed}, final check"));
    println!(
        "kill9: {rounds} rounds in {:.1} s: {} commits, {} begun and {} finished calls acked; \
         0 lost (seed {seed})",
        started.elapsed().as_secs_f64(),
        totals.commits,
        totals.begins,
        totals.finishes,
    );
    println!(
        "kill9: {} forks and {} fork deletions acked; after the kills, {} recycled segment \
         files and {} segments larger than a segment found; largest state of {BIG_TASK}: {} \
         bytes ({:.1} segments)",
        totals.forks,
        totals.deletions,
        totals.recycled_seen,
        totals.oversized_seen,
        totals.big_state_bytes,
        totals.big_state_bytes as f64 / SEGMENT_BYTES as f64,
    );
    // A shorter run (a replay of a few rounds) may not get that far.
    if rounds >= ROUNDS_DEFAULT {
        let ten_segments = 10 * SEGMENT_BYTES as usize;
        assert!(
            totals.forks > 0
                && totals.recycled_seen > 0
                && totals.oversized_seen > 0
                && totals.big_state_bytes >= ten_segments,
            "kill9 no longer covers forks, recycled segments, oversized segments or a state of \
             10 segments (seed {seed})"
        );
    }
}
