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

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentwal::{Error, Options, State, Store, SyncMode};
use common::env::env_u64;
use serde::{Deserialize, Serialize};

const CHILD_ENV: &str = "AGENTWAL_KILL_CHILD";
const KEEP_ENV: &str = "AGENTWAL_KILL_KEEP";
const ROUNDS_ENV: &str = "AGENTWAL_KILL_ROUNDS";
const SEED_ENV: &str = "AGENTWAL_KILL_SEED";
/// Set for a child that writes through the async API.
const ASYNC_ENV: &str = "AGENTWAL_KILL_ASYNC";
const ROUNDS_DEFAULT: u64 = 25;
/// Marks the child's acknowledgement lines.
const ACK: &str = "#ack ";

const THREADS: usize = 3;
const TASKS_PER_THREAD: usize = 2;
const SHARED_TASK: &str = "shared";
/// The big writer's task, and the prefix of its forks' names.
const BIG_TASK: &str = "big";
const FORK_PREFIX: &str = "bigfork-";
/// `big` is forked at every seq that is a multiple of this.
const FORK_EVERY: u64 = 8;
/// Forks kept: making one deletes the one made this many forks before.
const FORKS_KEPT: u64 = 2;
const SEGMENT_BYTES: u64 = 64 << 10;
/// What a big state keeps of its deltas' bytes: 11 segments.
const BULK_BYTES_MAX: usize = 11 * SEGMENT_BYTES as usize;
const KEEP: u32 = 8;
const CALL_EVERY: u64 = 8;
const TOOL: &str = "tool";
/// A child that was not killed by then exits by itself (the parent failed).
const CHILD_DEADLINE: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------
// The deterministic workload, shared by child and parent

/// A state that is right only if deltas 1..=len were applied in order. A big task's
/// state also keeps its deltas' bytes (the latest `BULK_BYTES_MAX` of them).
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
struct Chain {
    len: u64,
    hash: u64,
    last: Vec<u8>,
    #[serde(with = "serde_bytes")]
    bulk: Vec<u8>,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Chain {{ len: {}, hash: {:#x}, last: {} bytes, bulk: {} bytes }}",
            self.len,
            self.hash,
            self.last.len(),
            self.bulk.len()
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Step {
    seq: u64,
    #[serde(with = "serde_bytes")]
    payload: Vec<u8>,
    /// Whether the state keeps the payload (a big task's delta).
    keep: bool,
}

impl State for Chain {
    type Delta = Step;
    fn apply(&mut self, d: &Step) {
        self.len += 1;
        self.hash = chain_hash(self.hash, d);
        if d.keep {
            self.bulk.extend_from_slice(&d.payload);
            let over = self.bulk.len().saturating_sub(BULK_BYTES_MAX);
            self.bulk.drain(..over);
            self.last.clear();
        } else {
            self.last.clone_from(&d.payload);
        }
    }
}

fn chain_hash(prev: u64, d: &Step) -> u64 {
    let mut h = fnv(prev ^ 0x9e37_79b9_7f4a_7c15, &d.seq.to_le_bytes());
    h = fnv(h, &d.payload);
    h
}

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// xorshift64*, not the tests' shared SplitMix64 (`common::rng::Rng`): the deltas and the
/// kill schedule a printed `AGENTWAL_KILL_SEED` replays are this generator's streams.
struct XorShift64Star(u64);

impl XorShift64Star {
    fn new(seed: u64) -> Self {
        XorShift64Star(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn key(task: &str, seq: u64, salt: u64) -> u64 {
    fnv(
        fnv(0xcbf2_9ce4_8422_2325 ^ salt, task.as_bytes()),
        &seq.to_le_bytes(),
    )
}

/// Delta `seq` of `task`: mostly small, sometimes a few KiB, so records vary in size. A
/// big task's (`big` and its forks): mostly 8 to 64 KiB, a tenth of them larger than a
/// segment, a quarter small; its state keeps them.
fn delta(task: &str, seq: u64) -> Step {
    let mut rng = XorShift64Star::new(key(task, seq, 1));
    let keep = is_big(task);
    let len = match rng.below(20) {
        n if keep => match n {
            0..=1 => SEGMENT_BYTES + rng.below(2 * SEGMENT_BYTES),
            2..=6 => rng.below(400),
            _ => (8 << 10) + rng.below(SEGMENT_BYTES - (8 << 10)),
        },
        0 => 2000 + rng.below(3000),
        1..=4 => 0,
        _ => rng.below(400),
    };
    let payload = match keep {
        // Eight bytes per draw: big deltas are generated again at every check.
        true => (0..len.div_ceil(8))
            .flat_map(|_| rng.next().to_le_bytes())
            .take(len as usize)
            .collect(),
        false => (0..len).map(|_| rng.next() as u8).collect(),
    };
    Step { seq, payload, keep }
}

fn is_big(task: &str) -> bool {
    task == BIG_TASK || task.starts_with(FORK_PREFIX)
}

fn fork_name(at: u64) -> String {
    format!("{FORK_PREFIX}{at}")
}

/// The seq of `big` a fork was made from, by its name.
fn fork_source(task: &str) -> Option<u64> {
    task.strip_prefix(FORK_PREFIX)?.parse().ok()
}

fn call_id(seq: u64) -> String {
    format!("call-{seq}")
}

fn call_args(task: &str, seq: u64) -> Vec<u8> {
    format!("args of {task} {seq}").into_bytes()
}

fn call_result(task: &str, seq: u64) -> Vec<u8> {
    let mut rng = XorShift64Star::new(key(task, seq, 2));
    (0..rng.below(300)).map(|_| rng.next() as u8).collect()
}

fn owned_tasks(thread: usize) -> Vec<String> {
    (0..TASKS_PER_THREAD)
        .map(|k| format!("t{thread}-{k}"))
        .collect()
}

fn all_tasks() -> Vec<String> {
    let mut tasks: Vec<String> = (0..THREADS).flat_map(owned_tasks).collect();
    tasks.push(SHARED_TASK.to_string());
    tasks.push(BIG_TASK.to_string());
    tasks
}

fn options(keep: Option<u32>) -> Options {
    Options {
        sync: SyncMode::Always,
        segment_bytes: SEGMENT_BYTES,
        snapshot_every: 16,
        keep_checkpoints: keep,
        ..Options::default()
    }
}

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

/// Grows `big`; at every `FORK_EVERY`th seq forks it, commits the fork's seq 2, deletes
/// an older fork and compacts. A resumed child first finishes the fork of the seq it
/// stopped at.
fn big_writer(store: &Store<Chain>, started: Instant) {
    let mut seq = latest(store, BIG_TASK);
    if seq > 0 && seq.is_multiple_of(FORK_EVERY) {
        fork_big(store, seq);
    }
    loop {
        if started.elapsed() > CHILD_DEADLINE {
            fail_child("deadline passed without being killed");
        }
        seq += 1;
        match store.commit(BIG_TASK, &delta(BIG_TASK, seq)) {
            Ok(got) if got == seq => ack(&format!("C {BIG_TASK} {seq}")),
            Ok(got) => fail_child(&format!("commit to {BIG_TASK} returned {got}, not {seq}")),
            Err(e) => fail_child(&format!("commit {BIG_TASK} {seq}: {e}")),
        }
        if seq.is_multiple_of(FORK_EVERY) {
            fork_big(store, seq);
        }
    }
}

/// Forks `big` at `at` (unless that fork exists), commits the fork's seq 2 (unless
/// done), deletes the fork `FORKS_KEPT` forks older (if still there), compacts.
fn fork_big(store: &Store<Chain>, at: u64) {
    let name = fork_name(at);
    if latest(store, &name) == 0 {
        match store.fork(BIG_TASK, at, &name) {
            Ok(1) => ack(&format!("K {name} {at}")),
            Ok(got) => fail_child(&format!("fork {name} returned {got}")),
            Err(e) => fail_child(&format!("fork {name}: {e}")),
        }
    }
    if latest(store, &name) == 1 {
        match store.commit(&name, &delta(&name, 2)) {
            Ok(2) => ack(&format!("C {name} 2")),
            Ok(got) => fail_child(&format!("commit to {name} returned {got}, not 2")),
            Err(e) => fail_child(&format!("commit {name} 2: {e}")),
        }
    }
    if let Some(old) = at.checked_sub(FORKS_KEPT * FORK_EVERY).filter(|&o| o > 0) {
        let old = fork_name(old);
        match store.delete_task(&old) {
            Ok(()) => ack(&format!("D {old} 0")),
            Err(Error::UnknownTask { .. }) => {} // deleted before a kill
            Err(e) => fail_child(&format!("delete {old}: {e}")),
        }
    }
    match store.compact() {
        // "Retry later": a pass that met a record being indexed.
        Ok(_) | Err(Error::InvalidArgument(_)) => {}
        Err(e) => fail_child(&format!("compact: {e}")),
    }
}

fn child_thread(store: &Store<Chain>, thread: usize, shared: &AtomicU64, started: Instant) {
    let tasks = owned_tasks(thread);
    let mut next: Vec<u64> = tasks.iter().map(|t| latest(store, t) + 1).collect();
    loop {
        if started.elapsed() > CHILD_DEADLINE {
            fail_child("deadline passed without being killed");
        }
        for (task, seq) in tasks.iter().zip(next.iter_mut()) {
            if (*seq).is_multiple_of(CALL_EVERY) {
                journal_call(store, task, *seq);
            }
            match store.commit(task, &delta(task, *seq)) {
                Ok(got) if got == *seq => ack(&format!("C {task} {seq}")),
                Ok(got) => fail_child(&format!("commit to {task} returned {got}, not {seq}")),
                Err(e) => fail_child(&format!("commit {task} {seq}: {e}")),
            }
            *seq += 1;
        }
        let expected = shared.load(Ordering::SeqCst);
        let seq = expected + 1;
        match store.commit_if(SHARED_TASK, expected, &delta(SHARED_TASK, seq)) {
            Ok(got) if got == seq => {
                ack(&format!("C {SHARED_TASK} {seq}"));
                shared.fetch_max(seq, Ordering::SeqCst);
            }
            Ok(got) => fail_child(&format!("commit_if returned {got}, not {seq}")),
            Err(Error::Conflict { actual, .. }) => {
                shared.fetch_max(actual, Ordering::SeqCst);
            }
            Err(e) => fail_child(&format!("commit_if {SHARED_TASK} {seq}: {e}")),
        }
    }
}

/// Journals the tool call of `seq` (resuming a begun one, skipping a finished one).
fn journal_call(store: &Store<Chain>, task: &str, seq: u64) {
    let id = call_id(seq);
    match store.call_result(task, &id) {
        Ok(Some(_)) => return,
        Ok(None) => {}
        Err(e) => fail_child(&format!("call_result {task} {seq}: {e}")),
    }
    if let Err(e) = store.begin_call(task, &id, TOOL, &call_args(task, seq)) {
        fail_child(&format!("begin_call {task} {seq}: {e}"));
    }
    ack(&format!("B {task} {seq}"));
    if seq.is_multiple_of(2 * CALL_EVERY) {
        if let Err(e) = store.finish_call(task, &id, &call_result(task, seq)) {
            fail_child(&format!("finish_call {task} {seq}: {e}"));
        }
        ack(&format!("F {task} {seq}"));
    }
}

fn latest(store: &Store<Chain>, task: &str) -> u64 {
    match store.load_latest(task) {
        Ok(cp) => cp.map_or(0, |c| c.seq),
        Err(e) => fail_child(&format!("load_latest {task}: {e}")),
    }
}

/// Prints one acknowledgement line with a single write, and flushes it.
fn ack(line: &str) {
    static OUT: Mutex<()> = Mutex::new(());
    let _one_at_a_time = OUT.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = std::io::stdout().lock();
    let ok = out.write_all(format!("{ACK}{line}\n").as_bytes()).is_ok() && out.flush().is_ok();
    if !ok {
        std::process::exit(5); // the parent is gone
    }
}

fn fail_child(why: &str) -> ! {
    eprintln!("child error: {why}");
    std::process::exit(3);
}

/// The child's writers as tasks on a tokio runtime, through the async API: the same
/// steps, acks and failures as `child_thread` and `journal_call`.
#[cfg(feature = "tokio")]
mod async_child {
    use super::*;
    use agentwal::AsyncStore;
    use std::sync::Arc;

    pub fn run(store: Store<Chain>, started: Instant) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| fail_child(&format!("runtime: {e}")));
        let shared = Arc::new(AtomicU64::new(latest(&store, SHARED_TASK)));
        let store = AsyncStore::from(store);
        rt.block_on(async {
            let writers: Vec<_> = (0..THREADS)
                .map(|t| tokio::spawn(writer(store.clone(), t, shared.clone(), started)))
                .collect();
            for w in writers {
                if w.await.is_err() {
                    fail_child("a writer task panicked");
                }
            }
        });
    }

    async fn writer(
        store: AsyncStore<Chain>,
        thread: usize,
        shared: Arc<AtomicU64>,
        started: Instant,
    ) {
        let tasks = owned_tasks(thread);
        let mut next: Vec<u64> = tasks
            .iter()
            .map(|t| latest(store.blocking(), t) + 1)
            .collect();
        loop {
            if started.elapsed() > CHILD_DEADLINE {
                fail_child("deadline passed without being killed");
            }
            for (task, seq) in tasks.iter().zip(next.iter_mut()) {
                if (*seq).is_multiple_of(CALL_EVERY) {
                    journal_call(&store, task, *seq).await;
                }
                match store.commit(task, &delta(task, *seq)).await {
                    Ok(got) if got == *seq => ack(&format!("C {task} {seq}")),
                    Ok(got) => fail_child(&format!("commit to {task} returned {got}, not {seq}")),
                    Err(e) => fail_child(&format!("commit {task} {seq}: {e}")),
                }
                *seq += 1;
            }
            let expected = shared.load(Ordering::SeqCst);
            let seq = expected + 1;
            match store
                .commit_if(SHARED_TASK, expected, &delta(SHARED_TASK, seq))
                .await
            {
                Ok(got) if got == seq => {
                    ack(&format!("C {SHARED_TASK} {seq}"));
                    shared.fetch_max(seq, Ordering::SeqCst);
                }
                Ok(got) => fail_child(&format!("commit_if returned {got}, not {seq}")),
                Err(Error::Conflict { actual, .. }) => {
                    shared.fetch_max(actual, Ordering::SeqCst);
                }
                Err(e) => fail_child(&format!("commit_if {SHARED_TASK} {seq}: {e}")),
            }
        }
    }

    async fn journal_call(store: &AsyncStore<Chain>, task: &str, seq: u64) {
        let id = call_id(seq);
        match store.call_result(task, &id).await {
            Ok(Some(_)) => return,
            Ok(None) => {}
            Err(e) => fail_child(&format!("call_result {task} {seq}: {e}")),
        }
        if let Err(e) = store
            .begin_call(task, &id, TOOL, &call_args(task, seq))
            .await
        {
            fail_child(&format!("begin_call {task} {seq}: {e}"));
        }
        ack(&format!("B {task} {seq}"));
        if seq.is_multiple_of(2 * CALL_EVERY) {
            if let Err(e) = store.finish_call(task, &id, &call_result(task, seq)).await {
                fail_child(&format!("finish_call {task} {seq}: {e}"));
            }
            ack(&format!("F {task} {seq}"));
        }
    }
}

#[cfg(not(feature = "tokio"))]
mod async_child {
    use super::*;

    pub fn run(_: Store<Chain>, _: Instant) {
        fail_child("asked for the async API, built without the tokio feature");
    }
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

#[derive(Debug, Clone, Copy)]
enum Kill {
    AfterSpawn(Duration),
    AfterReady(Duration),
}

/// What one child acknowledged.
#[derive(Debug, Default)]
struct Acks {
    commits: Vec<(String, u64)>,
    begins: Vec<(String, u64)>,
    finishes: Vec<(String, u64)>,
    /// Forks made (name, source seq) and deleted (name).
    forks: Vec<(String, u64)>,
    deletions: Vec<String>,
}

#[derive(Debug, Default)]
struct Totals {
    commits: usize,
    begins: usize,
    finishes: usize,
    forks: usize,
    deletions: usize,
    recycled_seen: u64,
    oversized_seen: u64,
    big_state_bytes: usize,
}

impl Totals {
    fn add(&mut self, acks: &Acks) {
        self.commits += acks.commits.len();
        self.begins += acks.begins.len();
        self.finishes += acks.finishes.len();
        self.forks += acks.forks.len();
        self.deletions += acks.deletions.len();
    }
}

/// Kills the child if the parent panics before it does.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run_child(dir: &Path, keep: Option<u32>, plan: Kill, asynchronous: bool, ctx: &str) -> Acks {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", "child_writer", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match keep {
        Some(k) => cmd.env(KEEP_ENV, k.to_string()),
        None => cmd.env_remove(KEEP_ENV),
    };
    match asynchronous {
        true => cmd.env(ASYNC_ENV, "1"),
        false => cmd.env_remove(ASYNC_ENV),
    };
    let spawned = Instant::now();
    let mut child = KillOnDrop(cmd.spawn().unwrap());
    let stdout = child.0.stdout.take().unwrap();
    let mut stderr = child.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut out = BufReader::new(stdout);
        let mut line = String::new();
        let mut ready = Some(tx);
        loop {
            line.clear();
            match out.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                // A line cut by the kill was never acknowledged.
                Ok(_) if !line.ends_with('\n') => break,
                Ok(_) => {}
            }
            // The test harness may print "test child_writer ... " before an ack.
            let Some(at) = line.find(ACK) else { continue };
            let ack = line[at + ACK.len()..].trim_end();
            if ack.starts_with("R ") {
                ready.take().map(|tx| tx.send(()));
            }
            lines.push(ack.to_string());
        }
        lines
    });
    match plan {
        Kill::AfterSpawn(d) => std::thread::sleep(d.saturating_sub(spawned.elapsed())),
        Kill::AfterReady(d) => {
            // A child that fails exits, which also ends the wait (checked below).
            let ready = rx.recv_timeout(Duration::from_secs(30)).is_ok();
            let exited = child.0.try_wait().unwrap().is_some();
            assert!(
                ready || exited,
                "{ctx}: the child is not ready after 30 s (a hang?)"
            );
            std::thread::sleep(d);
        }
    }
    if let Some(status) = child.0.try_wait().unwrap() {
        let mut err = String::new();
        let _ = stderr.read_to_string(&mut err);
        panic!("{ctx}: the child exited by itself ({status}) before the kill:\n{err}");
    }
    child.0.kill().unwrap(); // SIGKILL
    child.0.wait().unwrap();
    let mut err = String::new();
    let _ = stderr.read_to_string(&mut err);
    assert!(
        !err.contains("child error") && !err.contains("panicked"),
        "{ctx}: the child reported an error:\n{err}"
    );
    let mut acks = Acks::default();
    for line in reader.join().unwrap() {
        let mut parts = line.split(' ');
        let (Some(kind), Some(task), Some(seq), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let Ok(seq) = seq.parse::<u64>() else {
            continue;
        };
        let entry = (task.to_string(), seq);
        match kind {
            "C" => acks.commits.push(entry),
            "B" => acks.begins.push(entry),
            "F" => acks.finishes.push(entry),
            "K" => acks.forks.push(entry),
            "D" => acks.deletions.push(entry.0),
            _ => {}
        }
    }
    acks
}

/// What the parent knows must be in the store.
#[derive(Default)]
struct Oracle {
    /// Per task: the largest acked seq so far.
    acked_max: HashMap<String, u64>,
    /// Per task: the latest seq the last check found (acked or not).
    seen_latest: HashMap<String, u64>,
    /// Per task: seqs below this may have been dropped by retention.
    retention_floor: HashMap<String, u64>,
    /// Per task: hash of the state after seq i at index i (index 0: empty state).
    hashes: HashMap<String, Vec<u64>>,
    /// Every acked call: (task, seq) -> finished.
    calls: BTreeMap<(String, u64), bool>,
    /// Forks of `big` acked made, and acked deleted.
    forks_acked: BTreeSet<String>,
    forks_deleted: BTreeSet<String>,
}

/// The bytes a big task's state keeps after deltas 1..=seq: the latest `BULK_BYTES_MAX`
/// of their payloads.
fn bulk(task: &str, seq: u64) -> Vec<u8> {
    let mut payloads = Vec::new();
    let mut bytes = 0;
    for s in (1..=seq).rev() {
        let payload = delta(task, s).payload;
        bytes += payload.len();
        payloads.push(payload);
        if bytes >= BULK_BYTES_MAX {
            break;
        }
    }
    let mut out: Vec<u8> = payloads.into_iter().rev().flatten().collect();
    out.drain(..out.len().saturating_sub(BULK_BYTES_MAX));
    out
}

impl Oracle {
    fn expected(&mut self, task: &str, seq: u64) -> Chain {
        if let Some(at) = fork_source(task).filter(|_| seq > 0) {
            // Seq 1 is `big` at `at`; its own deltas follow.
            let mut state = self.expected(BIG_TASK, at);
            (2..=seq).for_each(|s| state.apply(&delta(task, s)));
            return state;
        }
        let hashes = self
            .hashes
            .entry(task.to_string())
            .or_insert_with(|| vec![0]);
        while hashes.len() as u64 <= seq {
            let i = hashes.len() as u64;
            let prev = *hashes.last().unwrap_or(&0);
            hashes.push(chain_hash(prev, &delta(task, i)));
        }
        let (last, bulk) = match (seq, is_big(task)) {
            (0, _) => (Vec::new(), Vec::new()),
            (_, true) => (Vec::new(), bulk(task, seq)),
            (_, false) => (delta(task, seq).payload, Vec::new()),
        };
        Chain {
            len: seq,
            hash: hashes[seq as usize],
            last,
            bulk,
        }
    }

    /// Checks every fork `store` holds (each retained seq loads as expected, and seq 1
    /// says where it came from), that every acked fork not acked deleted is there (unless
    /// the fork that deletes it may have begun), and that no acked deletion came back.
    fn check_forks(&mut self, store: &Store<Chain>, ctx: &str) {
        let tasks = store
            .tasks()
            .unwrap_or_else(|e| panic!("{ctx}: tasks: {e}"));
        let present: Vec<&String> = tasks.iter().filter(|t| fork_source(t).is_some()).collect();
        let big_latest = self.seen_latest.get(BIG_TASK).copied().unwrap_or(0);
        for task in &present {
            let at = fork_source(task).expect("a fork");
            assert!(
                !self.forks_deleted.contains(*task),
                "{ctx}: fork {task} is back after its acked deletion"
            );
            assert!(
                at <= big_latest && at.is_multiple_of(FORK_EVERY),
                "{ctx}: fork {task} of a seq {BIG_TASK} never had (latest {big_latest})"
            );
            let infos = store
                .list_checkpoints(task)
                .unwrap_or_else(|e| panic!("{ctx}: list_checkpoints {task}: {e}"));
            assert!(
                infos.last().is_some_and(|i| i.seq <= 2),
                "{ctx}: fork {task} has checkpoints {infos:?}"
            );
            let acked = self.acked_max.get(*task).copied().unwrap_or(0);
            assert!(
                infos.last().is_some_and(|i| i.seq >= acked),
                "{ctx}: LOST COMMIT: fork {task} seq {acked} acked, checkpoints {infos:?}"
            );
            for info in &infos {
                if info.seq == 1 {
                    assert_eq!(
                        info.forked_from,
                        Some((BIG_TASK.to_string(), at)),
                        "{ctx}: origin of fork {task}"
                    );
                }
                let cp = store
                    .load(task, info.seq)
                    .unwrap_or_else(|e| panic!("{ctx}: load {task} {}: {e}", info.seq))
                    .unwrap_or_else(|| panic!("{ctx}: {task} {} listed, not loadable", info.seq));
                let want = self.expected(task, info.seq);
                assert!(
                    *cp.state == want,
                    "{ctx}: WRONG STATE of fork {task} at seq {}",
                    info.seq
                );
            }
        }
        for task in self.forks_acked.difference(&self.forks_deleted) {
            let at = fork_source(task).expect("a fork");
            // The fork made FORKS_KEPT forks later deletes it: it may be gone once that
            // one may have begun, acked or not.
            let deleter_began = big_latest >= at + FORKS_KEPT * FORK_EVERY;
            assert!(
                present.contains(&task) || deleter_began,
                "{ctx}: LOST FORK: {task} acked, not deleted, not there"
            );
        }
    }

    fn check_round(&mut self, dir: &Path, keep: Option<u32>, acks: &Acks, ctx: &str) {
        self.forks_acked
            .extend(acks.forks.iter().map(|f| f.0.clone()));
        self.forks_deleted.extend(acks.deletions.iter().cloned());
        for (task, seq) in &acks.commits {
            let m = self.acked_max.entry(task.clone()).or_default();
            *m = (*m).max(*seq);
        }
        for (task, seq) in &acks.begins {
            self.calls.entry((task.clone(), *seq)).or_insert(false);
        }
        for (task, seq) in &acks.finishes {
            self.calls.insert((task.clone(), *seq), true);
        }
        if !dir.exists() {
            assert!(acks.commits.is_empty(), "{ctx}: acked commits but no store");
            return;
        }
        match Store::<Chain>::open_read_only(dir) {
            Ok(read_only) => {
                // `keep` here only says what the child's compaction may have dropped.
                self.check_store(&read_only, keep, acks, &format!("{ctx}, read-only"));
            }
            // Killed while creating the store, before its first segment was in place: a
            // reader finds no store there, and nothing can have been acknowledged.
            Err(Error::NotAStore { .. }) if self.acked_max.is_empty() && self.calls.is_empty() => {}
            Err(e) => panic!("{ctx}: read-only open failed: {e}"),
        }
        let store = Store::<Chain>::open_with(dir, options(keep))
            .unwrap_or_else(|e| panic!("{ctx}: open failed: {e}"));
        self.check_store(&store, keep, acks, ctx);
        if keep.is_some() {
            // The child may have compacted away anything retention no longer served.
            for task in all_tasks() {
                let latest = self.seen_latest.get(&task).copied().unwrap_or(0);
                let floor = self.retention_floor.entry(task).or_default();
                *floor = (*floor).max(latest.saturating_sub(u64::from(KEEP) - 1));
            }
        }
    }

    fn check_store(&mut self, store: &Store<Chain>, keep: Option<u32>, acks: &Acks, ctx: &str) {
        for task in all_tasks() {
            let acked = self.acked_max.get(&task).copied().unwrap_or(0);
            let before = self.seen_latest.get(&task).copied().unwrap_or(0);
            let latest = store
                .load_latest(&task)
                .unwrap_or_else(|e| panic!("{ctx}: load_latest {task}: {e}"));
            let latest_seq = latest.as_ref().map_or(0, |c| c.seq);
            assert!(
                latest_seq >= acked,
                "{ctx}: LOST COMMITS: task {task} latest seq {latest_seq} < acked {acked}"
            );
            assert!(
                latest_seq >= before,
                "{ctx}: task {task} went back from seq {before} to {latest_seq}"
            );
            // Each writer has at most one commit in flight per task when killed.
            let in_flight = if task == SHARED_TASK { THREADS } else { 1 } as u64;
            assert!(
                latest_seq <= acked.max(before) + in_flight,
                "{ctx}: task {task} has seq {latest_seq}, beyond acked {acked} / seen {before} \
                 plus {in_flight} in flight"
            );
            if let Some(cp) = latest {
                let want = self.expected(&task, cp.seq);
                assert!(
                    *cp.state == want,
                    "{ctx}: WRONG STATE of {task} at latest seq {}",
                    cp.seq
                );
            }
            self.seen_latest.insert(task, latest_seq);
        }
        let mut checked = HashMap::new();
        // A state of `big` takes milliseconds to load and to recompute: of its acked
        // seqs, the newest is loaded and checked, the others must be listed.
        let big_listed: BTreeSet<u64> = store
            .list_checkpoints(BIG_TASK)
            .unwrap_or_else(|e| panic!("{ctx}: list_checkpoints {BIG_TASK}: {e}"))
            .iter()
            .map(|i| i.seq)
            .collect();
        let big_newest = acks
            .commits
            .iter()
            .filter(|c| c.0 == BIG_TASK)
            .map(|c| c.1)
            .max();
        // (Forks' commits: `check_forks`.)
        for (task, seq) in acks.commits.iter().filter(|c| fork_source(&c.0).is_none()) {
            match task == BIG_TASK && Some(*seq) != big_newest {
                true => self.check_listed(keep, task, *seq, &big_listed, ctx),
                false => self.check_seq(store, keep, task, *seq, ctx),
            }
            *checked.entry(task.clone()).or_insert(0u64) += 1;
        }
        // Also the newest retained checkpoints, acked in this round or before.
        for task in all_tasks() {
            let infos = store
                .list_checkpoints(&task)
                .unwrap_or_else(|e| panic!("{ctx}: list_checkpoints {task}: {e}"));
            let newest = if task == BIG_TASK { 4 } else { 32 };
            for info in infos.iter().rev().take(newest) {
                self.check_seq(store, keep, &task, info.seq, ctx);
            }
        }
        self.check_calls(store, keep, acks, ctx);
        self.check_forks(store, ctx);
    }

    fn check_seq(
        &mut self,
        store: &Store<Chain>,
        keep: Option<u32>,
        task: &str,
        seq: u64,
        ctx: &str,
    ) {
        let latest = self.seen_latest.get(task).copied().unwrap_or(0);
        let floor = self.floor(task, keep);
        match store.load(task, seq) {
            Ok(Some(cp)) => {
                let want = self.expected(task, seq);
                assert!(
                    cp.seq == seq && *cp.state == want,
                    "{ctx}: WRONG STATE of {task} at seq {seq}"
                );
            }
            Ok(None) if seq < floor => {} // dropped by retention
            Ok(None) => panic!(
                "{ctx}: LOST COMMIT: {task} seq {seq} acked but not loadable (latest {latest}, \
                 retention floor {floor})"
            ),
            Err(e) => panic!("{ctx}: load {task} {seq}: {e}"),
        }
    }

    /// Like [`check_seq`](Self::check_seq), for an acked `seq` of `task`, whose `listed`
    /// checkpoints are given: it is there, unless retention dropped it.
    fn check_listed(
        &self,
        keep: Option<u32>,
        task: &str,
        seq: u64,
        listed: &BTreeSet<u64>,
        ctx: &str,
    ) {
        let latest = self.seen_latest.get(task).copied().unwrap_or(0);
        let mut floor = self.retention_floor.get(task).copied().unwrap_or(0);
        if let Some(k) = keep {
            floor = floor.max(latest.saturating_sub(u64::from(k) - 1));
        }
        assert!(
            listed.contains(&seq) || seq < floor,
            "{ctx}: LOST COMMIT: {task} seq {seq} acked but not listed (latest {latest}, \
             retention floor {floor})"
        );
    }

    /// Seqs of `task` below this may have been dropped by retention: the child's, or
    /// `keep` (the handle being checked).
    fn floor(&self, task: &str, keep: Option<u32>) -> u64 {
        let latest = self.seen_latest.get(task).copied().unwrap_or(0);
        let floor = self.retention_floor.get(task).copied().unwrap_or(0);
        keep.map_or(floor, |k| {
            floor.max(latest.saturating_sub(u64::from(k) - 1))
        })
    }

    /// Every call acked in this round (all of them are checked at the end), on a store
    /// whose child ran with retention `keep`.
    fn check_calls(&self, store: &Store<Chain>, keep: Option<u32>, acks: &Acks, ctx: &str) {
        let mut pending: HashMap<String, HashMap<String, Vec<u8>>> = HashMap::new();
        let touched = acks.begins.iter().chain(&acks.finishes);
        for (task, seq) in touched {
            let finished = self.calls[&(task.clone(), *seq)];
            let floor = self.floor(task, keep);
            check_call(store, &mut pending, task, *seq, finished, floor, ctx);
        }
    }

    fn check_everything(&mut self, dir: &Path, ctx: &str) {
        if !dir.exists() {
            return;
        }
        let store = Store::<Chain>::open_with(dir, options(None))
            .unwrap_or_else(|e| panic!("{ctx}: open failed: {e}"));
        for task in all_tasks() {
            for info in store.list_checkpoints(&task).unwrap() {
                self.check_seq(&store, None, &task, info.seq, ctx);
            }
        }
        let mut pending = HashMap::new();
        for ((task, seq), finished) in &self.calls {
            let floor = self.floor(task, None);
            check_call(&store, &mut pending, task, *seq, *finished, floor, ctx);
        }
        self.check_forks(&store, ctx);
    }
}

/// What the store directory shows after a round: segment files recycled (their header's
/// RECYCLED flag) and segments larger than `segment_bytes` (a record too large for one).
fn segment_kinds(dir: &Path) -> (u64, u64) {
    let (mut recycled, mut oversized) = (0, 0);
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if agentwal::log::parse_segment_file_name(&name).is_none() {
            continue;
        }
        let Ok(bytes) = std::fs::read(entry.path()) else {
            continue;
        };
        let header = agentwal::log::SegmentHeader::decode(&bytes, &entry.path());
        recycled += u64::from(header.is_ok_and(|h| h.is_recycled()));
        oversized += u64::from(bytes.len() as u64 > SEGMENT_BYTES);
    }
    (recycled, oversized)
}

/// Checks the call of `seq`, begun (and `finished`, if so) with an ack. The call of seq
/// `s` finishes before checkpoint `s`, so once the child's retention dropped the
/// checkpoints below `floor`, the oldest retained is at least `floor` and compaction may
/// have pruned every finished call of a seq up to it (docs/store.md §4): such a call may
/// be gone whole, neither finished nor pending.
#[allow(clippy::too_many_arguments)]
fn check_call(
    store: &Store<Chain>,
    pending: &mut HashMap<String, HashMap<String, Vec<u8>>>,
    task: &str,
    seq: u64,
    finished: bool,
    floor: u64,
    ctx: &str,
) {
    let id = call_id(seq);
    let result = store
        .call_result(task, &id)
        .unwrap_or_else(|e| panic!("{ctx}: call_result {task} {id}: {e}"));
    if let Some(result) = result {
        assert!(
            result == call_result(task, seq),
            "{ctx}: WRONG RESULT of call {id} of {task}"
        );
        return;
    }
    let pending = pending.entry(task.to_string()).or_insert_with(|| {
        store
            .pending_calls(task)
            .unwrap_or_else(|e| panic!("{ctx}: pending_calls {task}: {e}"))
            .into_iter()
            .map(|p| {
                assert_eq!(p.tool, TOOL, "{ctx}: wrong tool of pending {}", p.call_id);
                (p.call_id, p.args)
            })
            .collect()
    });
    match pending.get(&id) {
        Some(args) => assert!(
            !finished && *args == call_args(task, seq),
            "{ctx}: LOST CALL RESULT or WRONG ARGS of pending call {id} of {task}"
        ),
        // Pruned whole (an unacked finish may have landed too).
        None if seq <= floor => {}
        None if finished => {
            panic!("{ctx}: LOST CALL RESULT: {task} {id} finished but has no result")
        }
        None => {
            panic!("{ctx}: LOST CALL: {task} {id} begun (acked) but neither pending nor finished")
        }
    }
}
