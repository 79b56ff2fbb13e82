//! What compaction costs and gives back in steady state, with the background compactor
//! looking at each rotation (docs/store.md §7):
//!
//! - write amplification: the bytes compaction passes write stay within the bytes the
//!   store appended ("each byte rewritten pays for at least one byte reclaimed"), also
//!   when a large tool-call journal is live, finished or pending;
//! - recycling: the sealed segment a pass replaces is retired and taken by a later
//!   rotation, so that in steady state nearly every new segment is a recycled file
//!   (docs/format.md §6);
//! - `Store::compact` seals the active segment, so that it compacts a store smaller than
//!   a segment.

use std::time::{Duration, Instant};

use agentwal::{AgentDelta, Compression, Options, Store, SyncMode};

/// How long a test waits for the background compactor after a rotation (it looks every
/// 100 ms): for a pass to be counted, or, when none is due, for it to have looked.
const PASS_WAIT: Duration = Duration::from_millis(250);

fn options(segment_bytes: u64, keep: Option<u32>) -> Options {
    Options {
        segment_bytes,
        keep_checkpoints: keep,
        sync: SyncMode::Never,
        compression: Compression::None,
        ..Options::default()
    }
}

/// Runs `step` `n` times; after each step that rotated, waits until the background
/// compactor counted a pass or `PASS_WAIT` passed, so that it runs a pass per rotation
/// as it would at a slower commit rate.
fn with_a_look_per_rotation(store: &Store, n: usize, mut step: impl FnMut(usize)) {
    for i in 0..n {
        let before = store.stats();
        step(i);
        if store.stats().segments_created != before.segments_created {
            let deadline = Instant::now() + PASS_WAIT;
            while store.stats().compactions == before.compactions && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// (Appended + compaction's writes) / appended.
fn write_amplification(store: &Store) -> f64 {
    let s = store.stats();
    (s.bytes_written + s.compaction_bytes_written) as f64 / s.bytes_written as f64
}

fn commits(store: &Store, task: &str, n: usize, note_bytes: usize) {
    with_a_look_per_rotation(store, n, |i| {
        let note = "x".repeat(note_bytes);
        let delta = AgentDelta::default()
            .set("step", i as i64)
            .set("note", note);
        store.commit(task, &delta).unwrap();
    });
}

/// 600 finished calls with 4 KiB results on one task, then 4,000 small commits to
/// another. Every call record is live (no retention), so a pass that counted the journal
/// as dead rewrote all of it at every rotation (32x before the live bytes counted it).
#[test]
fn write_amplification_with_a_large_finished_journal_is_at_most_2x() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open_with(dir.path(), options(64 << 10, None)).unwrap();
    let result = vec![7u8; 4096];
    with_a_look_per_rotation(&store, 600, |i| {
        let id = format!("call-{i}");
        store.begin_call("journal", &id, "tool", b"args").unwrap();
        store.finish_call("journal", &id, &result).unwrap();
    });
    commits(&store, "other", 4000, 40);
    let wa = write_amplification(&store);
    eprintln!(
        "finished journal: write amplification {wa:.2}x, {:?}",
        store.stats()
    );
    assert!(wa <= 2.0, "write amplification {wa:.2}x");
}

/// 300 pending calls of 8 KiB args, with `keep_checkpoints = Some(4)`, then 4,000
/// commits to another task, large enough (~1 KiB) that retention makes passes due:
/// pending calls stay live whatever retention keeps (26x before the live bytes counted
/// them, with small commits).
#[test]
fn write_amplification_with_large_pending_calls_under_retention_is_at_most_2x() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open_with(dir.path(), options(64 << 10, Some(4))).unwrap();
    let args = vec![3u8; 8192];
    with_a_look_per_rotation(&store, 300, |i| {
        store
            .begin_call("journal", &format!("call-{i}"), "tool", &args)
            .unwrap();
    });
    commits(&store, "other", 4000, 1000);
    let wa = write_amplification(&store);
    eprintln!(
        "pending calls: write amplification {wa:.2}x, {:?}",
        store.stats()
    );
    assert!(wa <= 2.0, "write amplification {wa:.2}x");
    assert!(store.stats().compactions >= 1, "no pass ran");
    assert_eq!(store.pending_calls("journal").unwrap().len(), 300);
}

/// The default compression (`ZstdAtCompaction`) makes passes run to compress segments no
/// pass has written, with nothing dead in them. Only checkpoint bodies compress: a pass
/// that weighed the journal's bytes as well copied the whole live journal again each
/// time the new segments' bytes matched the compacted one (2.9x here before the weight
/// counted only checkpoints).
#[test]
fn write_amplification_with_a_live_journal_and_compression_at_compaction_is_at_most_2x() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        compression: Compression::default(),
        ..options(64 << 10, None)
    };
    assert!(matches!(
        options.compression,
        Compression::ZstdAtCompaction { .. }
    ));
    let store: Store = Store::open_with(dir.path(), options).unwrap();
    let result = vec![7u8; 4096];
    with_a_look_per_rotation(&store, 2000, |i| {
        let id = format!("call-{i}");
        store.begin_call("journal", &id, "tool", b"args").unwrap();
        store.finish_call("journal", &id, &result).unwrap();
        let delta = AgentDelta::default().set("step", i as i64);
        store.commit("other", &delta).unwrap();
    });
    let wa = write_amplification(&store);
    eprintln!(
        "live journal, compression at compaction: write amplification {wa:.2}x, {:?}",
        store.stats()
    );
    assert!(wa <= 2.0, "write amplification {wa:.2}x");
}

/// With retention and a pass per rotation, each pass replaces the sealed segment with a
/// compacted one; the replaced file must reach the recycle pool (it was renamed over and
/// lost, so no rotation ever found a file: 0 of every new segment recycled) and be taken
/// by the next rotation. Checked at 1 MiB segments (a sealed segment's file is as long
/// as a segment, so it qualifies for reuse as at the default size).
#[test]
fn segments_are_recycled_in_steady_state() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open_with(dir.path(), options(1 << 20, Some(2))).unwrap();
    let body = "y".repeat(2000);
    let mut i = 0;
    while store.stats().segments_created < 8 {
        with_a_look_per_rotation(&store, 1, |_| {
            let delta = AgentDelta::default()
                .set("step", i)
                .set("body", body.as_str());
            store.commit(&format!("t{}", i % 4), &delta).unwrap();
        });
        i += 1;
    }
    let s = store.stats();
    eprintln!(
        "{} of {} new segments recycled, zeros {:.2}x of appended",
        s.segments_recycled,
        s.segments_created,
        s.zero_bytes_written as f64 / s.bytes_written as f64
    );
    // The first two rotations find no retired file (the first pass, with two sealed
    // segments, retires one); every later one should.
    assert!(
        s.segments_recycled + 2 >= s.segments_created,
        "{} of {} new segments recycled",
        s.segments_recycled,
        s.segments_created
    );
    drop(store);
    let store: Store = Store::open_with(dir.path(), options(1 << 20, Some(2))).unwrap();
    for t in 0..4 {
        assert!(store.load_latest(&format!("t{t}")).unwrap().is_some());
    }
}

/// Background passes rarer than rotations (the pass waits for a megabyte of dead bytes and
/// looks every 100 ms, so at 64 KiB segments dozens of rotations come between two): each
/// pass retires about as many files as were started since the one before, and the pool
/// must keep them for the rotations to come. With a fixed pool of four, 4 of each
/// interval's rotations found a retired file and the rest made new ones (5-9% in steady
/// state in the compaction benchmark, 20% here with a pass per 20 rotations); the pool is
/// now sized by the rotations between passes (`agentwal::log::recycle_files_max`).
#[test]
fn segments_are_recycled_in_steady_state_when_passes_are_rarer_than_rotations() {
    const ROTATIONS: u64 = 300;
    let dir = tempfile::tempdir().unwrap();
    let options = options(64 << 10, Some(2));
    assert!(options.auto_compact);
    let store: Store = Store::open_with(dir.path(), options).unwrap();
    let body = "y".repeat(2000);
    let mut i = 0i64;
    let mut rotate = |n: u64| {
        let until = store.stats().segments_created + n;
        while store.stats().segments_created < until {
            let delta = AgentDelta::default()
                .set("step", i)
                .set("body", body.as_str());
            store.commit(&format!("t{}", i % 4), &delta).unwrap();
            i += 1;
            // About one rotation per millisecond: the nice-19 pass gets its share.
            if i % 32 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    };
    // Until the passes have started: the first interval has nothing retired to take.
    rotate(ROTATIONS);
    let before = store.stats();
    rotate(ROTATIONS);
    let s = store.stats();
    let rotations = s.segments_created - before.segments_created;
    let recycled = s.segments_recycled - before.segments_recycled;
    let passes = s.compactions - before.compactions;
    eprintln!(
        "second half: {recycled} of {rotations} rotations recycled, {passes} passes, {} files \
         waiting",
        s.free_segments
    );
    assert!(
        passes >= 2 && passes * 8 <= rotations,
        "{passes} passes in {rotations} rotations: not the case this test is about"
    );
    assert!(
        recycled * 2 >= rotations,
        "{recycled} of {rotations} rotations took a retired file"
    );
    drop(store);
    let store: Store = Store::open_with(dir.path(), options).unwrap();
    for t in 0..4 {
        assert!(store.load_latest(&format!("t{t}")).unwrap().is_some());
    }
}

/// `Store::compact` on a store that never filled a segment: the active segment is
/// sealed and compacted, so retention's dead checkpoints leave the disk (before, the pass
/// found no sealed segment and did nothing).
#[test]
fn compact_seals_the_active_segment() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        auto_compact: false,
        snapshot_every: 4,
        ..options(Options::default().segment_bytes, Some(1))
    };
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    for i in 0..200 {
        let delta = AgentDelta::default()
            .set("step", i)
            .set("note", "z".repeat(100));
        store.commit("t", &delta).unwrap();
    }
    let report = store.compact().unwrap();
    assert!(
        report.records_rewritten >= 1 && report.bytes_reclaimed > 0,
        "{report:?}"
    );
    store
        .commit("t", &AgentDelta::default().set("step", 200))
        .unwrap();
    let latest = store.load_latest("t").unwrap().unwrap();
    drop(store);
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    let checkpoints = store.stats().checkpoints;
    assert!(checkpoints <= 6, "{checkpoints} checkpoints still on disk");
    assert_eq!(store.load_latest("t").unwrap().unwrap().state, latest.state);
}
