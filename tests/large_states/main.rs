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
//! oversized record with small segments, `tests/store_api/` a commit of one).
//! `tests/kill9/` SIGKILLs a writer of states of up to 11 segments.

#[path = "../common/mod.rs"]
mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use agentwal::log::{RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, parse_free_file_name};
use agentwal::{Options, Store, SyncMode};
use common::panic_text;
use common::rng::Rng;

mod crash_sweep;
mod model;

use model::{
    Big, Edit, Model, SEGMENT_BYTES, STATE_BYTES, check_all, check_pool, files, options,
    recycled_segments, scratch, small_commits,
};

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
    check_pool(&dir, store.stats().segments_created, "after compaction");
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
    check_pool(
        &dir,
        store.stats().segments_created,
        "after deleting the source and compacting",
    );
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
