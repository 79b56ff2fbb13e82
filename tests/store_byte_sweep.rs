//! Byte sweeps at the store level: a small store (one record per operation, every record
//! kind, some snapshots) on the simulated storage, then
//!
//! - its segment cut at every byte offset, and zeroed from every byte offset on (the
//!   file keeps its length, as preallocated space does): a writable open recovers exactly
//!   the operations whose records are intact, writing after the repair works, and a
//!   reopen from the durable image sees that write;
//! - every single-bit flip over the data and the 64 bytes after it: a flip in an
//!   acknowledged record before the last one is `Error::Corruption` naming the segment
//!   and an offset between that record's start and the flipped byte; a flip in the header
//!   is `Corruption` or `UnsupportedFormat`; a flip in the last record drops that record
//!   (it looks exactly like a torn tail, docs/log.md §4.1) and a flip past the data is
//!   ignored (garbage in preallocated space).
//!
//! Twice: in a fresh segment, and in a recycled one (format v2, docs/format.md §6). For the
//! latter, a prelude retires segment files (a task's records, deleted and compacted
//! away) and commits a record larger than a segment (it gets a segment of its own), so
//! the operations land in the next segment, which reuses a retired file: past its data
//! lie the bytes of its earlier life, and since the store closed cleanly its data ends
//! with a close record. There the close record is what a flip may drop (the last user
//! record has a valid record claiming durable predecessors after it, so a flip in it is
//! corruption), the sweeps run through the close record, and the 64 bytes flipped past
//! it are old-life bytes.
//!
//! The expected answers (task ids, latest seq and state, checkpoints, pending calls, call
//! results) after each prefix of operations come from the same operations run live on a
//! second store with `SyncMode::Never`. Every open runs under `catch_unwind`; a panic is a
//! failure. The log-level sweeps are in `tests/log_faults/`.

mod common;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use agentwal::log::record::{self, Salt};
use agentwal::log::{KIND_CLOSE, Log, LogOptions, SegmentHeader};
use agentwal::log::{RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use agentwal::storage::Storage;
use agentwal::storage::sim::{SimImage, SimStorage};
use agentwal::{AgentDelta, AgentState, Error, Message, Options, PendingCall, Store, SyncMode};
use common::panic_text;

/// The store's directory on the simulated disk.
const DIR: &str = "/agents/db";
const HEADER: usize = SEGMENT_HEADER_BYTES;
/// Bytes past the end of the data that the flip sweep covers (preallocated zeros).
const FLIP_PAST_END: usize = 64;
/// A writer ends its batches in a recycled file on a block of this size, with zeros
/// (docs/format.md §6): the earlier life's bytes start at the next multiple of it.
const FILL_BLOCK_BYTES: usize = 4096;
/// A segment is preallocated up to `min(4 MiB, segment_bytes)` and recovery reads all of
/// it; 8 KiB keeps thousands of opens fast and still holds every record in one segment.
const SEGMENT_BYTES: u64 = 8 << 10;
/// Tasks the operations touch, and the one each recovered store is written to afterwards.
const TASKS: [&str; 3] = ["alpha", "beta", "gamma"];
const AFTER_TASK: &str = "after";
/// Call ids the operations use, by task.
const CALLS: [(&str, &str); 3] = [("alpha", "c1"), ("beta", "c2"), ("alpha", "c3")];
/// Failures reported in full.
const FAILURES_SHOWN: usize = 10;

/// Store record kinds (docs/format.md §8).
const KIND_CHECKPOINT: u8 = 1;
const KIND_CALL_BEGIN: u8 = 2;
const KIND_CALL_FINISH: u8 = 3;
const KIND_DELETE: u8 = 4;

#[derive(Debug, Clone)]
enum Op {
    Commit(&'static str, u32),
    Begin(&'static str, &'static str),
    Finish(&'static str, &'static str),
    Delete(&'static str),
}

impl Op {
    fn kind(&self) -> u8 {
        match self {
            Op::Commit(..) => KIND_CHECKPOINT,
            Op::Begin(..) => KIND_CALL_BEGIN,
            Op::Finish(..) => KIND_CALL_FINISH,
            Op::Delete(_) => KIND_DELETE,
        }
    }
}

/// One record each, in this order. With `snapshot_every: 3` every task's third checkpoint
/// is a snapshot; gamma is deleted and re-created (its seqs start again at 1).
fn ops() -> Vec<Op> {
    use Op::*;
    vec![
        Commit("alpha", 1),
        Commit("beta", 2),
        Commit("alpha", 3),
        Begin("alpha", "c1"),
        Commit("gamma", 4),
        Commit("alpha", 5),
        Commit("beta", 6),
        Begin("beta", "c2"),
        Finish("alpha", "c1"),
        Commit("beta", 7),
        Commit("gamma", 8),
        Delete("gamma"),
        Commit("alpha", 9),
        Commit("beta", 10),
        Commit("gamma", 11),
        Begin("alpha", "c3"),
        Commit("alpha", 12),
        Finish("beta", "c2"),
        Commit("gamma", 13),
        Commit("beta", 14),
    ]
}

/// A small delta: a message and a variable.
fn delta(i: u32) -> AgentDelta {
    AgentDelta::default()
        .message(Message::user(format!("step {i}")))
        .set("step", i64::from(i))
}

fn args(call: &str) -> Vec<u8> {
    format!("args of {call}").into_bytes()
}

fn result(call: &str) -> Vec<u8> {
    format!("result of {call}").into_bytes()
}

fn run(store: &Store, op: &Op) -> agentwal::Result<()> {
    match op {
        Op::Commit(task, i) => store.commit(task, &delta(*i)).map(drop),
        Op::Begin(task, call) => store.begin_call(task, call, "search", &args(call)),
        Op::Finish(task, call) => store.finish_call(task, call, &result(call)),
        Op::Delete(task) => store.delete_task(task),
    }
}

/// What a store answers about one task.
#[derive(Debug, Clone, PartialEq)]
struct TaskAnswer {
    /// Seq and state of the latest checkpoint.
    latest: Option<(u64, AgentState)>,
    /// (seq, snapshot) of every checkpoint.
    checkpoints: Vec<(u64, bool)>,
    pending: Vec<PendingCall>,
}

/// What a store answers: the observable state the sweeps compare.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    tasks: Vec<String>,
    by_task: BTreeMap<String, TaskAnswer>,
    results: BTreeMap<(String, String), Option<Vec<u8>>>,
}

fn answer(store: &Store) -> agentwal::Result<Answer> {
    let mut by_task = BTreeMap::new();
    for task in TASKS.iter().chain([&AFTER_TASK]) {
        let latest = store
            .load_latest(task)?
            .map(|cp| (cp.seq, AgentState::clone(&cp.state)));
        let checkpoints = store
            .list_checkpoints(task)?
            .iter()
            .map(|c| (c.seq, c.snapshot))
            .collect();
        let pending = store.pending_calls(task)?;
        let t = TaskAnswer {
            latest,
            checkpoints,
            pending,
        };
        by_task.insert(task.to_string(), t);
    }
    let mut results = BTreeMap::new();
    for (task, call) in CALLS {
        let r = store.call_result(task, call)?;
        results.insert((task.to_string(), call.to_string()), r);
    }
    Ok(Answer {
        tasks: store.tasks()?,
        by_task,
        results,
    })
}

fn options(sync: SyncMode) -> Options {
    Options {
        sync,
        segment_bytes: SEGMENT_BYTES,
        snapshot_every: 3,
        auto_compact: false,
        // Records of planned sizes: the prelude fills segments so that one is recycled.
        compression: agentwal::Compression::None,
        ..Options::default()
    }
}

fn open(sim: &SimStorage) -> agentwal::Result<Store> {
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    Store::open_on(storage, DIR, options(SyncMode::Always))
}

/// A record's byte range in the segment, and its kind.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
    kind: u8,
}

/// Where the swept segment comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Segment {
    /// The store's first segment: preallocated zeros past the data.
    Fresh,
    /// A retired file reused: the bytes of its earlier life past the data, and a close
    /// record at the end of the data.
    Recycled,
}

/// Before the operations of a [`Segment::Recycled`] build: commits that fill a few
/// segments with data (one each to tasks of their own, so every record is a delta of
/// about 1 KiB), the deletion of those tasks and a compaction (which retires those
/// segments), then a commit larger than a segment (which gets a segment of its own); the
/// next record goes to the segment after it, made from a retired file.
fn prelude(store: &Store) {
    let tasks: Vec<String> = (0..24).map(|i| format!("prelude-{i}")).collect();
    for (i, task) in tasks.iter().enumerate() {
        let text = "p".repeat(1000 + i);
        let d = AgentDelta::default().message(Message::user(text));
        store.commit(task, &d).expect("prelude commit");
    }
    for task in &tasks {
        store.delete_task(task).expect("prelude deletion");
    }
    let report = store.compact().expect("prelude compaction");
    assert!(
        report.segments_deleted > 0,
        "the prelude retired no segment"
    );
    let big = AgentDelta::default().message(Message::user("b".repeat(SEGMENT_BYTES as usize)));
    store
        .commit("big", &big)
        .expect("prelude commit larger than a segment");
}

/// The store after every operation, and what the sweeps need to judge a recovery.
struct Built {
    /// `expected[n]`: the answer after the first `n` operations.
    expected: Vec<Answer>,
    segment: PathBuf,
    image: SimImage,
    bytes: Vec<u8>,
    spans: Vec<Span>,
    /// The close record's span, in a recycled segment (a store that closes cleanly in one
    /// ends its data with it).
    close: Option<Span>,
}

impl Built {
    fn expected_after(&self, n: usize) -> &Answer {
        &self.expected[n]
    }

    fn data_end(&self) -> usize {
        self.spans.last().expect("records").end
    }

    /// End of the segment's records, the close record included.
    fn records_end(&self) -> usize {
        self.close.map_or(self.data_end(), |c| c.end)
    }

    /// The image with the segment's bytes replaced.
    fn with_segment(&self, bytes: Vec<u8>) -> SimImage {
        let mut image = self.image.clone();
        image.files.insert(self.segment.clone(), bytes);
        image
    }

    /// Records that are byte for byte intact in `bytes` (a prefix, for the damage here).
    fn intact(&self, bytes: &[u8]) -> usize {
        self.spans
            .iter()
            .take_while(|s| bytes.get(s.start..s.end) == Some(&self.bytes[s.start..s.end]))
            .count()
    }

    /// Index of the record holding byte `at`.
    fn record_at(&self, at: usize) -> Option<usize> {
        self.spans
            .iter()
            .position(|s| (s.start..s.end).contains(&at))
    }
}

fn build(kind: Segment) -> Built {
    let ops = ops();
    let reference: Store =
        Store::open_on(Arc::new(SimStorage::new()), DIR, options(SyncMode::Never))
            .expect("open reference store");
    let sim = SimStorage::new();
    let store = open(&sim).expect("open store");
    if kind == Segment::Recycled {
        prelude(&reference);
        prelude(&store);
    }
    let mut expected = vec![answer(&reference).expect("reference answer")];
    for (i, op) in ops.iter().enumerate() {
        run(&reference, op).unwrap_or_else(|e| panic!("reference op {i} {op:?}: {e}"));
        run(&store, op).unwrap_or_else(|e| panic!("op {i} {op:?}: {e}"));
        let want = answer(&reference).expect("reference answer");
        let live = answer(&store).expect("live answer");
        assert_eq!(live, want, "after op {i} {op:?}: the two stores disagree");
        expected.push(want);
    }
    // Every kind of checkpoint shows up: snapshots and deltas, a re-created task.
    let last = expected.last().expect("answers");
    let snapshots = last.by_task.values().flat_map(|t| &t.checkpoints);
    assert!(snapshots.clone().any(|c| c.1) && snapshots.clone().any(|c| !c.1));
    assert_eq!(last.by_task["gamma"].latest.as_ref().map(|l| l.0), Some(2));
    drop(store);

    let image = sim.volatile_image();
    assert_eq!(
        image.files,
        sim.durable_image().files,
        "with SyncMode::Always the disk holds what the page cache shows"
    );
    let segments: Vec<&PathBuf> = image
        .files
        .keys()
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    if kind == Segment::Fresh {
        assert_eq!(segments.len(), 1, "one segment: {:?}", image.files.keys());
    }
    let segment = segments.last().expect("a segment").to_path_buf();
    assert_eq!(segment.parent(), Some(Path::new(DIR)));
    let bytes = image.files[&segment].clone();
    let header = SegmentHeader::decode(&bytes, &segment).expect("the segment's header");
    assert_eq!(
        header.is_recycled(),
        kind == Segment::Recycled,
        "{kind:?} build: the segment's RECYCLED flag"
    );

    let mut spans = Vec::new();
    let log_options = LogOptions {
        segment_bytes: SEGMENT_BYTES,
        ..LogOptions::default()
    };
    let storage: Arc<dyn Storage> = Arc::new(SimStorage::from_image(&image));
    Log::open_read_only_on(storage, DIR, log_options, |r| {
        if r.segment != segment {
            return Ok(()); // the prelude's
        }
        let start = r.offset as usize;
        let end = start + RECORD_HEADER_BYTES + r.payload.len();
        spans.push(Span {
            start,
            end,
            kind: r.kind,
        });
        Ok(())
    })
    .expect("read the log");
    let kinds: Vec<u8> = spans.iter().map(|s| s.kind).collect();
    let want: Vec<u8> = ops.iter().map(Op::kind).collect();
    assert_eq!(kinds, want, "one record per operation, in operation order");
    assert_eq!(spans[0].start, HEADER);
    for w in spans.windows(2) {
        assert_eq!(w[0].end, w[1].start, "records are contiguous");
    }
    let data_end = spans.last().expect("records").end;
    // Recovery does not hand close records to visitors: decode it here.
    let close = record::decode(&bytes[data_end..], header.salt)
        .ok()
        .filter(|(h, _)| h.kind == KIND_CLOSE)
        .map(|(h, _)| Span {
            start: data_end,
            end: data_end + h.record_bytes() as usize,
            kind: KIND_CLOSE,
        });
    let end = close.map_or(data_end, |c| c.end);
    assert!(bytes.len() >= end + FLIP_PAST_END, "room past the data");
    match kind {
        Segment::Fresh => assert!(
            close.is_none() && bytes[data_end..].iter().all(|&b| b == 0),
            "the segment is preallocated with zeros past the data ({} bytes, data ends at \
             {data_end})",
            bytes.len()
        ),
        Segment::Recycled => {
            assert!(close.is_some(), "a clean close left no close record");
            let old_life = end.div_ceil(FILL_BLOCK_BYTES) * FILL_BLOCK_BYTES;
            assert!(
                bytes[data_end..old_life]
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == 0 || data_end + i < end),
                "the writer fills the rest of the last block with zeros"
            );
            assert!(
                matches!(header.salt, Salt::Salted(_))
                    && bytes.len() >= old_life + FLIP_PAST_END
                    && bytes[old_life..old_life + FLIP_PAST_END]
                        .iter()
                        .any(|&b| b != 0),
                "no bytes of an earlier life past the data's last block"
            );
        }
    }
    Built {
        expected,
        segment,
        image,
        bytes,
        spans,
        close,
    }
}

/// Opens a writable store on `image`, under `catch_unwind`.
fn open_image(image: &SimImage) -> Result<(SimStorage, agentwal::Result<Store>), String> {
    let sim = SimStorage::from_image(image);
    catch_unwind(AssertUnwindSafe(|| open(&sim)))
        .map(|opened| (sim, opened))
        .map_err(|p| format!("open panicked: {}", panic_text(&p)))
}

/// Checks an opened store answers `want`, then commits once more and checks a reopen from
/// the durable image sees that commit (writing after the recovery's repair works).
fn check_recovered(store: Store, sim: &SimStorage, want: &Answer) -> Result<(), String> {
    let checks = || -> Result<(), String> {
        let got = answer(&store).map_err(|e| format!("answer after open: {e}"))?;
        if &got != want {
            return Err(format!(
                "wrong state after open:\n got {got:?}\nwant {want:?}"
            ));
        }
        let seq = store
            .commit(AFTER_TASK, &delta(99))
            .map_err(|e| format!("commit after recovery: {e}"))?;
        if seq != 1 {
            return Err(format!("commit after recovery got seq {seq}"));
        }
        let before = answer(&store).map_err(|e| format!("answer after commit: {e}"))?;
        drop(store);
        let again = SimStorage::from_image(&sim.durable_image());
        let reopened = open(&again).map_err(|e| format!("reopen after commit: {e}"))?;
        let after = answer(&reopened).map_err(|e| format!("answer after reopen: {e}"))?;
        let mut with_commit = want.clone();
        with_commit.tasks.push(AFTER_TASK.to_string());
        with_commit.tasks.sort();
        let mut state = AgentState::default();
        agentwal::State::apply(&mut state, &delta(99));
        let t = with_commit.by_task.get_mut(AFTER_TASK).expect("after task");
        t.latest = Some((1, state));
        t.checkpoints = vec![(1, false)];
        if before != with_commit || after != with_commit {
            return Err(format!(
                "the commit after recovery is not there:\nbefore reopen {before:?}\n\
                 after reopen {after:?}\nwant {with_commit:?}"
            ));
        }
        Ok(())
    };
    catch_unwind(AssertUnwindSafe(checks))
        .unwrap_or_else(|p| Err(format!("panicked: {}", panic_text(&p))))
}

/// Damage that keeps a prefix of the segment: cut at `k`, or zeros from `k` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Damage {
    Truncate,
    Zero,
}

/// Recovery from `damage` at every offset `0..=records_end`; returns the failures.
fn prefix_sweep(built: &Built, damage: Damage) -> Vec<String> {
    let mut failures = Vec::new();
    for k in 0..=built.records_end() {
        let mut bytes = built.bytes.clone();
        match damage {
            Damage::Truncate => bytes.truncate(k),
            Damage::Zero => bytes[k..].fill(0),
        }
        let n = built.intact(&bytes);
        // Zeroing from 36 on leaves the header whole: its last 4 bytes are a zero pad.
        let header_damaged = bytes.get(..HEADER) != Some(&built.bytes[..HEADER]);
        let fail = |why: String| format!("{damage:?} at {k} ({n} records intact): {why}");
        let (sim, opened) = match open_image(&built.with_segment(bytes)) {
            Ok(o) => o,
            Err(why) => {
                failures.push(fail(why));
                continue;
            }
        };
        match opened {
            // A damaged segment header fails the open (it holds no data to lose).
            Err(
                Error::Corruption {
                    segment, offset: 0, ..
                }
                | Error::UnsupportedFormat { segment, .. },
            ) if header_damaged && segment == built.segment => {}
            Err(e) => failures.push(fail(format!("open failed: {e}"))),
            Ok(_) if header_damaged => failures.push(fail("a damaged header opened".into())),
            Ok(store) => {
                if let Err(why) = check_recovered(store, &sim, built.expected_after(n)) {
                    failures.push(fail(why));
                }
            }
        }
    }
    failures
}

#[derive(Debug, Default)]
struct FlipCounts {
    flips: u64,
    corruption: u64,
    unsupported: u64,
    ignored: u64,
}

/// Every bit flip of `[0, records_end + FLIP_PAST_END)` and of the `FLIP_PAST_END` bytes
/// from the next block boundary on (an earlier life's, in a recycled segment); returns the
/// counts and failures.
fn flip_sweep(built: &Built) -> (FlipCounts, Vec<String>) {
    let mut counts = FlipCounts::default();
    let mut failures = Vec::new();
    let ops = built.spans.len();
    let in_close = |byte: usize| {
        built
            .close
            .is_some_and(|c| (c.start..c.end).contains(&byte))
    };
    let old_life = built.records_end().div_ceil(FILL_BLOCK_BYTES) * FILL_BLOCK_BYTES;
    let past_block = (old_life..old_life + FLIP_PAST_END).filter(|&b| b < built.bytes.len());
    for byte in (0..built.records_end() + FLIP_PAST_END).chain(past_block) {
        let record = built.record_at(byte);
        for bit in 0..8 {
            counts.flips += 1;
            let mut bytes = built.bytes.clone();
            bytes[byte] ^= 1 << bit;
            let fail = |why: String| {
                let at = match record {
                    Some(r) => format!("record {r} of {ops}"),
                    None if byte < HEADER => "the segment header".into(),
                    None if in_close(byte) => "the close record".into(),
                    None => "past the data".into(),
                };
                format!("flip of byte {byte} bit {bit} (in {at}): {why}")
            };
            let (sim, opened) = match open_image(&built.with_segment(bytes)) {
                Ok(o) => o,
                Err(why) => {
                    failures.push(fail(why));
                    continue;
                }
            };
            // Where a corruption report may point: the damaged record (or the header).
            let lowest = record.map_or(0, |r| built.spans[r].start);
            let past_data = byte >= built.data_end();
            // The last batch, which a flip turns into a torn tail: the close record if
            // there is one, else the last user record.
            let last_batch = match built.close {
                Some(_) => in_close(byte),
                None => record == Some(ops - 1),
            };
            match opened {
                Err(Error::Corruption {
                    segment,
                    offset,
                    reason,
                }) => {
                    let offset = offset as usize;
                    if segment != built.segment || !(lowest..=byte).contains(&offset) {
                        failures.push(fail(format!(
                            "corruption reported in {} at {offset} ({reason})",
                            segment.display()
                        )));
                    } else if past_data {
                        failures.push(fail(format!(
                            "garbage past the data is corruption at {offset} ({reason})"
                        )));
                    } else {
                        counts.corruption += 1;
                    }
                }
                Err(Error::UnsupportedFormat { segment, .. })
                    if byte < HEADER && segment == built.segment =>
                {
                    counts.unsupported += 1;
                }
                Err(e) => failures.push(fail(format!("open failed: {e}"))),
                Ok(store) => {
                    // A flip in the last batch looks exactly like a torn tail (docs/log.md
                    // §4.1): that batch is dropped (a close record holds no operation).
                    // Past the data: nothing is lost.
                    let want = match record {
                        _ if last_batch && built.close.is_some() => ops,
                        Some(r) if last_batch => r,
                        None if past_data && !last_batch => ops,
                        _ => {
                            let why = "opened: silent wrong state or lost acknowledged record";
                            failures.push(fail(why.into()));
                            continue;
                        }
                    };
                    match check_recovered(store, &sim, built.expected_after(want)) {
                        Ok(()) => counts.ignored += 1,
                        Err(why) => failures.push(fail(why)),
                    }
                }
            }
        }
    }
    (counts, failures)
}

#[test]
fn store_survives_truncation_zeroing_and_bit_flips_at_every_byte() {
    sweep_all(Segment::Fresh);
}

#[test]
fn store_in_a_recycled_segment_survives_truncation_zeroing_and_bit_flips_at_every_byte() {
    sweep_all(Segment::Recycled);
}

fn sweep_all(kind: Segment) {
    let started = Instant::now();
    let built = build(kind);
    let data_end = built.data_end();
    let truncated = prefix_sweep(&built, Damage::Truncate);
    let zeroed = prefix_sweep(&built, Damage::Zero);
    let (counts, flipped) = flip_sweep(&built);
    let classified = counts.corruption + counts.unsupported + counts.ignored;
    assert_eq!(
        classified + flipped.len() as u64,
        counts.flips,
        "every flip is judged"
    );
    let failures: Vec<String> = [truncated, zeroed, flipped].concat();
    let swept_end = built.records_end();
    println!(
        "store byte sweep ({kind:?} segment): {} records in {data_end} bytes (swept to \
         {swept_end}); {} truncation offsets, {} zeroed offsets, {} flips: {} corruption, {} \
         unsupported, {} torn/ignored; {} wrong states or panics; {:.1} s",
        built.spans.len(),
        swept_end + 1,
        swept_end + 1,
        counts.flips,
        counts.corruption,
        counts.unsupported,
        counts.ignored,
        failures.len(),
        started.elapsed().as_secs_f64(),
    );
    assert!(
        failures.is_empty(),
        "{} failures; the first {}:\n{}",
        failures.len(),
        FAILURES_SHOWN.min(failures.len()),
        failures[..FAILURES_SHOWN.min(failures.len())].join("\n")
    );
}
