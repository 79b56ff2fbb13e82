//! States larger than a segment (format v2, docs/format.md §5): a record that does not fit a
//! fresh segment gets a segment of its own, sized to hold it, so a task's state may be
//! many segments large.
//!
//! - [`state_ten_segments_large`]: with 64 KiB segments, a state of more than 10 segments
//!   (660 KiB) is committed (its first checkpoint is a snapshot, in a segment of its
//!   own), loaded, grown by a delta larger than a segment, forked (the fork's seq 1 is a
//!   snapshot of it that loads equal), compacted and reopened; every retained checkpoint
//!   of every task equals the model at every step. Once the snapshot is written, a small
//!   commit costs O(delta): each appends a few dozen bytes (`Stats::bytes_written`), not
//!   a state's worth, on the live handle, on the fork and after a reopen (cold cache).
//!   Compaction retires the segment files it no longer needs: only files a rotation can
//!   take wait for reuse (none longer than a segment: a big state's segment, kept, would
//!   hold a place of the pool and its disk for nothing), and later rotations recycle them.
//! - [`crash_sweep_of_a_state_ten_segments_large`]: the same life (commit of a state of 10
//!   segments, small commits, fork, compaction, a delta larger than a segment, deletion,
//!   compaction, rotations onto recycled files) on `SimStorage` with 4 KiB segments,
//!   power loss before every operation: selected crash images of every point are
//!   recovered and judged by `common::sim_workload`'s oracle (every acknowledged
//!   checkpoint and deletion there, every state the fold of its commits), and writing
//!   after recovery works and is durable.
//!
//! Not here: the default 64 MiB segments. A state of 10 of them is 640 MiB to write,
//! fork (another 640 MiB), compact and reopen: minutes and gigabytes, not a CI test; the
//! placement rule does not depend on the segment size (`tests/log_basic.rs` checks an
//! oversized record with small segments, `tests/store_api.rs` a commit of one).
//! `tests/kill9/` SIGKILLs a writer of states of up to 11 segments.

mod common;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::time::Instant;

use agentwal::log::{
    RECORD_HEADER_BYTES, RECYCLE_FILES_MAX, SEGMENT_HEADER_BYTES, SegmentHeader,
    parse_free_file_name, parse_segment_file_name,
};
use agentwal::storage::sim::{SimImage, SimOp, SimStorage};
use agentwal::{Options, State, Store, SyncMode};
use common::panic_text;
use common::rng::Rng;
use common::sim_workload::{self as sim, Coverage, Step};
use serde::{Deserialize, Serialize};

/// Segment size of the real-disk test.
const SEGMENT_BYTES: u64 = 64 << 10;
/// The big state: more than 10 segments.
const STATE_BYTES: usize = 10 * SEGMENT_BYTES as usize + 4096;
/// What a small commit may append at most: its record (a few dozen bytes) and, when it
/// rotates, a seal. A commit that wrote the state would append 660 KiB.
const SMALL_COMMIT_BYTES_MAX: u64 = 256;

/// A state with a large blob and a list of small notes.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
struct Big {
    #[serde(with = "serde_bytes")]
    blob: Vec<u8>,
    notes: Vec<u64>,
}

impl std::fmt::Debug for Big {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hash = self.blob.iter().fold(0u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3)
        });
        write!(
            f,
            "Big {{ blob: {} bytes (hash {hash:#x}), notes: {:?} }}",
            self.blob.len(),
            self.notes
        )
    }
}

#[derive(Clone, Serialize, Deserialize)]
enum Edit {
    /// Appends bytes to the blob.
    Grow(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Appends a note: a delta of a few bytes.
    Note(u64),
}

impl State for Big {
    type Delta = Edit;
    fn apply(&mut self, edit: &Edit) {
        match edit {
            Edit::Grow(bytes) => self.blob.extend_from_slice(bytes),
            Edit::Note(n) => self.notes.push(*n),
        }
    }
}

/// What the store must hold: per task, its first state (a fork's) and its edits.
#[derive(Default)]
struct Model {
    tasks: BTreeMap<String, (Option<Big>, Vec<Edit>)>,
}

impl Model {
    fn commit(&mut self, task: &str, edit: &Edit) {
        self.tasks
            .entry(task.into())
            .or_default()
            .1
            .push(edit.clone());
    }
    fn fork(&mut self, task: &str, seq: u64, new_task: &str) {
        let base = self.state(task, seq);
        self.tasks.insert(new_task.into(), (Some(base), Vec::new()));
    }
    fn latest(&self, task: &str) -> u64 {
        let (base, edits) = &self.tasks[task];
        edits.len() as u64 + u64::from(base.is_some())
    }
    fn state(&self, task: &str, seq: u64) -> Big {
        let (base, edits) = &self.tasks[task];
        let mut state = base.clone().unwrap_or_default();
        let own = seq as usize - usize::from(base.is_some());
        edits[..own].iter().for_each(|e| state.apply(e));
        state
    }
}

fn options() -> Options {
    Options {
        segment_bytes: SEGMENT_BYTES,
        auto_compact: false,
        // Stored as encoded: these states are runs of one byte, which zstd would shrink
        // to almost nothing, and the checks measure the state's size in bytes written.
        compression: agentwal::Compression::None,
        ..Options::default()
    }
}

/// A scratch directory: tmpfs when there is one, else the default temporary directory.
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::Builder::new()
            .prefix("agentwal-large")
            .tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().expect("temporary directory")
}

/// Every retained checkpoint of every task loads equal to the model.
fn check_all(store: &Store<Big>, model: &Model, what: &str) {
    assert_eq!(
        store.tasks().unwrap(),
        model.tasks.keys().cloned().collect::<Vec<_>>(),
        "{what}: tasks"
    );
    for task in model.tasks.keys() {
        let latest = store.load_latest(task).unwrap().expect("a checkpoint");
        assert_eq!(
            latest.seq,
            model.latest(task),
            "{what}: latest seq of {task}"
        );
        assert!(
            *latest.state == model.state(task, latest.seq),
            "{what}: latest state of {task}"
        );
        for info in store.list_checkpoints(task).unwrap() {
            let cp = store
                .load(task, info.seq)
                .unwrap()
                .expect("listed, so loads");
            assert!(
                *cp.state == model.state(task, info.seq),
                "{what}: state of {task} at seq {}",
                info.seq
            );
        }
    }
}

/// `n` small commits to `task`: each must append at most `SMALL_COMMIT_BYTES_MAX` to the
/// log, and write a delta, not a snapshot. Returns the most one appended.
fn small_commits(store: &Store<Big>, model: &mut Model, task: &str, n: u64, what: &str) -> u64 {
    let mut most = 0;
    for i in 0..n {
        let edit = Edit::Note(i);
        let before = store.stats().bytes_written;
        let seq = store.commit(task, &edit).unwrap();
        let bytes = store.stats().bytes_written - before;
        model.commit(task, &edit);
        assert!(
            bytes <= SMALL_COMMIT_BYTES_MAX,
            "{what}: small commit {seq} of {task} appended {bytes} bytes: O(state), not \
             O(delta)"
        );
        let info = store.list_checkpoints(task).unwrap().pop().unwrap();
        assert_eq!(info.seq, seq);
        assert!(
            !info.snapshot,
            "{what}: small commit {seq} of {task} wrote a snapshot"
        );
        most = most.max(bytes);
    }
    most
}

/// Names and lengths of the store's files (segments and retired files).
fn files(dir: &Path) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, e.metadata().unwrap().len())
        })
        .collect();
    out.sort();
    out
}

/// The retired files waiting for reuse are files a rotation can take (no longer than a
/// segment), so their disk is bounded by `RECYCLE_FILES_MAX` segments.
fn check_pool(dir: &Path, what: &str) {
    let free: Vec<(String, u64)> = files(dir)
        .into_iter()
        .filter(|(name, _)| parse_free_file_name(name).is_some())
        .collect();
    assert!(free.len() <= RECYCLE_FILES_MAX, "{what}: {free:?}");
    for (name, len) in &free {
        assert!(
            *len <= SEGMENT_BYTES,
            "{what}: retired file {name} is {len} bytes, longer than a segment: no rotation \
             can take it ({free:?})"
        );
    }
}

/// Segment files whose header says they are recycled.
fn recycled_segments(dir: &Path) -> usize {
    files(dir)
        .into_iter()
        .filter(|(name, _)| parse_segment_file_name(name).is_some())
        .filter(|(name, _)| {
            let path = dir.join(name);
            let bytes = std::fs::read(&path).unwrap();
            SegmentHeader::decode(&bytes, &path).is_ok_and(|h| h.is_recycled())
        })
        .count()
}

#[test]
fn state_ten_segments_large() {
    let started = Instant::now();
    let scratch = scratch();
    let dir = scratch.path().join("store");
    let mut model = Model::default();
    let mut rng = Rng(0x1A46E);
    let store: Store<Big> = Store::open_with(&dir, options()).unwrap();

    // The commit of a state of more than 10 segments: a snapshot, in a segment of its own.
    let grow = Edit::Grow(rng.bytes(STATE_BYTES));
    let before = store.stats().bytes_written;
    assert_eq!(store.commit("big", &grow).unwrap(), 1);
    let state_commit_bytes = store.stats().bytes_written - before;
    model.commit("big", &grow);
    let first = &store.list_checkpoints("big").unwrap()[0];
    assert!(
        first.snapshot,
        "the first checkpoint of a state is a snapshot"
    );
    assert!(
        first.bytes > 10 * SEGMENT_BYTES,
        "the snapshot is {} bytes",
        first.bytes
    );
    assert!(state_commit_bytes >= STATE_BYTES as u64);
    let info = &store.task_infos().unwrap()[0];
    assert_eq!((info.task.as_str(), info.snapshots), ("big", 1));
    // Header, the record, and a seal (a record header and the next segment's id).
    let seal_bytes = RECORD_HEADER_BYTES as u64 + 8;
    let own_segment = SEGMENT_HEADER_BYTES as u64 + first.bytes + seal_bytes;
    assert!(
        files(&dir).iter().any(|(_, len)| *len == own_segment),
        "no segment sized for the snapshot alone ({own_segment} bytes): {:?}",
        files(&dir)
    );
    check_all(&store, &model, "after the big commit");

    // Small commits after the snapshot: O(delta).
    let most = small_commits(&store, &mut model, "big", 64, "after the snapshot");
    println!(
        "state of {} bytes: its commit appended {state_commit_bytes} bytes, a small commit \
         after it at most {most}",
        STATE_BYTES
    );
    check_all(&store, &model, "after small commits");

    // A delta larger than a segment: a record in a segment of its own, and no snapshot.
    let grow = Edit::Grow(rng.bytes(2 * SEGMENT_BYTES as usize));
    let seq = store.commit("big", &grow).unwrap();
    model.commit("big", &grow);
    let last = store.list_checkpoints("big").unwrap().pop().unwrap();
    assert_eq!(last.seq, seq);
    assert!(!last.snapshot && last.bytes > 2 * SEGMENT_BYTES, "{last:?}");
    small_commits(
        &store,
        &mut model,
        "big",
        8,
        "after a delta larger than a segment",
    );

    // The fork: its seq 1 is a snapshot of the big state that loads equal.
    let at = model.latest("big");
    let before = store.stats().bytes_written;
    assert_eq!(store.fork("big", at, "fork").unwrap(), 1);
    model.fork("big", at, "fork");
    assert!(store.stats().bytes_written - before > 10 * SEGMENT_BYTES);
    let first = &store.list_checkpoints("fork").unwrap()[0];
    assert!(
        first.snapshot && first.bytes > 10 * SEGMENT_BYTES,
        "{first:?}"
    );
    assert_eq!(first.forked_from, Some(("big".to_string(), at)));
    let cp = store.load("fork", 1).unwrap().expect("the fork's seq 1");
    assert!(
        *cp.state == model.state("big", at),
        "the fork loads equal to its source"
    );
    small_commits(&store, &mut model, "fork", 32, "on the fork");
    small_commits(&store, &mut model, "big", 8, "on the source after the fork");
    check_all(&store, &model, "after the fork");

    // Compaction moves the big records into a compacted segment; loads stay equal.
    let report = store.compact().unwrap();
    assert!(report.records_rewritten > 0, "{report:?}");
    check_all(&store, &model, "after compaction");
    check_pool(&dir, "after compaction");
    small_commits(&store, &mut model, "fork", 8, "after compaction");

    // Reopened (a cold cache): the same, and still O(delta).
    drop(store);
    let store: Store<Big> = Store::open_with(&dir, options()).unwrap();
    check_all(&store, &model, "after reopening");
    small_commits(&store, &mut model, "big", 8, "after reopening");
    small_commits(&store, &mut model, "fork", 8, "after reopening");

    // The source goes; its records (the big segments among them) are retired or deleted,
    // and rotations recycle the retired files.
    store.delete_task("big").unwrap();
    model.tasks.remove("big");
    store.compact().unwrap();
    check_pool(&dir, "after deleting the source and compacting");
    let pooled = files(&dir)
        .iter()
        .filter(|(name, _)| parse_free_file_name(name).is_some())
        .count();
    assert!(pooled > 0, "compaction retired no file: {:?}", files(&dir));
    for _ in 0..24 {
        let grow = Edit::Grow(rng.bytes(8 << 10));
        store.commit("filler", &grow).unwrap();
        model.commit("filler", &grow);
    }
    assert!(
        recycled_segments(&dir) > 0,
        "rotations recycled no retired file: {:?}",
        files(&dir)
    );
    small_commits(&store, &mut model, "fork", 8, "in a recycled segment");
    check_all(&store, &model, "after recycling");
    drop(store);
    let store: Store<Big> = Store::open_with(&dir, options()).unwrap();
    check_all(&store, &model, "reopened at the end");
    println!(
        "large states: {:.1} s, files at the end: {:?}",
        started.elapsed().as_secs_f64(),
        files(&dir)
    );
}

// ---------------------------------------------------------------------------------------
// The crash sweep, on the simulated disk with `common::sim_workload`'s 4 KiB segments.

/// Systematic images (cuts, directory subsets) per crash point, at most, besides the
/// durable and volatile ones; and random ones.
const CUTS: usize = 16;
const SAMPLES: usize = 6;

/// The life of a state of 10 segments, as workload steps (one thread).
fn life() -> Vec<Step> {
    let mut rng = Rng(0xB16);
    let mut text_rng = Rng(0x7E47);
    let mut bytes = |n: usize| rng.bytes(n);
    // Bytes compaction compresses (the big state stays incompressible: ten segments on
    // disk, compacted or not).
    let mut text = |n: usize| sim::compressible_bytes(&mut text_rng, n);
    let commit = |task: &str, delta: Vec<u8>| Step::Commit(task.into(), delta);
    let mut steps = vec![commit("big", bytes(sim::BULK_BYTES_MAX + 4096))];
    steps.push(commit("big", bytes(40)));
    steps.push(commit("big", bytes(60)));
    steps.push(Step::Fork("big".into(), "fork".into()));
    steps.push(commit("fork", bytes(30)));
    steps.push(Step::Compact);
    steps.push(commit("fork", text(5000))); // a delta larger than a segment
    steps.push(commit("big", bytes(20)));
    steps.push(Step::Delete("big".into()));
    steps.push(Step::Compact);
    for i in 0..6 {
        steps.push(commit("fork", text(900 + 10 * i)));
    }
    // A record of a segment of its own seals the segment before it: compacted next.
    steps.push(commit("other", bytes(5000)));
    steps.push(Step::Compact);
    steps.push(Step::Load("fork".into()));
    steps
}

/// Indices (into `crash_images`) of the images checked when there are `len`: durable,
/// volatile, at most `CUTS` systematic ones spread over the rest, and the random ones.
fn selected(len: usize) -> Vec<usize> {
    if len <= 2 + CUTS + SAMPLES {
        return (0..len).collect();
    }
    let systematic = 2..len - SAMPLES;
    let step = systematic.len().div_ceil(CUTS);
    let mut picked: Vec<usize> = (0..2).chain(len - SAMPLES..len).collect();
    picked.extend(systematic.clone().step_by(step.max(1)));
    picked.push(systematic.end - 1);
    picked.sort_unstable();
    picked.dedup();
    picked
}

/// Recovers `image` (a crash before operation `n`), judges it, writes and checks that
/// the write is durable.
fn check_image(image: &SimImage, n: u64, events: &[sim::Event]) -> Result<(), String> {
    let disk = SimStorage::from_image(image);
    let store = sim::open(&disk).map_err(|e| format!("open: {e}"))?;
    let report = store.recovery_report();
    if !report.skipped.is_empty() || !report.lost.is_empty() {
        return Err(format!("recovery skipped or lost records: {report:?}"));
    }
    let got = sim::contents(&store)?;
    sim::check(&got, events, n)?;
    let seq = store
        .commit("after", &b"after".to_vec())
        .map_err(|e| format!("commit after recovery: {e}"))?;
    let durable = SimStorage::from_image(&disk.durable_image());
    drop(store);
    let again = sim::open(&durable).map_err(|e| format!("open after writing: {e}"))?;
    let mut after = sim::contents(&again)?;
    match after
        .remove("after")
        .and_then(|(cps, _)| cps.last().cloned())
    {
        Some((s, _)) if s == seq => {}
        other => return Err(format!("the commit after recovery is lost: {other:?}")),
    }
    match after == got {
        true => Ok(()),
        false => Err("writing after recovery changed the recovered contents".into()),
    }
}

#[test]
fn crash_sweep_of_a_state_ten_segments_large() {
    let started = Instant::now();
    let disk = SimStorage::new();
    disk.record();
    let store = sim::open(&disk).unwrap();
    let plan = vec![life()];
    let events = sim::run(&store, &disk, &plan);
    assert!(
        events.iter().all(|e| e.outcome.is_ok()),
        "calls failed without faults: {events:?}"
    );
    sim::check_loads(&events).unwrap();
    let big_snapshots = sim::big_snapshots(&store);
    let compressed = sim::compressed_bodies(&store);
    let infos = store.list_checkpoints("fork").unwrap();
    assert!(
        infos
            .iter()
            .any(|i| i.snapshot && i.bytes > 10 * sim::options().segment_bytes),
        "the fork holds a snapshot of 10 segments: {infos:?}"
    );
    drop(store);
    let ops = disk.take_recording();
    let coverage = Coverage {
        big_snapshots,
        compressed,
        ..Coverage::of(&ops, &events)
    };
    println!("crash sweep of a big state: {coverage:?}");
    assert!(coverage.max_state_bytes >= 10 * sim::options().segment_bytes);
    coverage.assert_all("crash sweep of a big state");

    let (mut images, mut points, mut failures) = (0, 0, Vec::new());
    let replay = SimStorage::new();
    for n in 0..=ops.len() as u64 {
        let next = ops.get(n as usize);
        if next.is_none_or(SimOp::mutates) {
            points += 1;
            let mut all = replay.crash_images(0xB16 ^ n, SAMPLES);
            let mut at = 0;
            for i in selected(all.len()) {
                let image = all.nth(i - at).expect("an image");
                at = i + 1;
                images += 1;
                let outcome = catch_unwind(AssertUnwindSafe(|| check_image(&image, n, &events)));
                let why = match outcome {
                    Ok(Ok(())) => continue,
                    Ok(Err(why)) => why,
                    Err(panic) => format!("panic: {}", panic_text(&panic)),
                };
                let msg = format!("crash point {n}, image {i} ({}): {why}", image.label);
                eprintln!("FAILED {msg}");
                failures.push(msg);
            }
        }
        if let Some(op) = next {
            replay.apply(op);
        }
        if failures.len() >= 10 {
            break;
        }
    }
    println!(
        "crash sweep of a big state: {images} images at {points} crash points in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The O(delta) assertion fails for a commit that writes the state: a snapshot due every
/// commit (`snapshot_every: 1`) makes each small commit append the whole state.
#[test]
fn the_o_delta_check_fails_when_every_commit_writes_the_state() {
    let scratch = scratch();
    let options = Options {
        snapshot_every: 1,
        sync: SyncMode::Never,
        ..options()
    };
    let store: Store<Big> = Store::open_with(scratch.path(), options).unwrap();
    let mut model = Model::default();
    store
        .commit("big", &Edit::Grow(vec![7; STATE_BYTES]))
        .unwrap();
    model.commit("big", &Edit::Grow(vec![7; STATE_BYTES]));
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        small_commits(&store, &mut model, "big", 1, "snapshot every commit")
    }));
    let why = panic_text(&outcome.expect_err("the check must fail"));
    assert!(why.contains("O(state), not O(delta)"), "{why}");
}
