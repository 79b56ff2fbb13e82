//! A segment file from another store is never served. Two stores, A and B, run the same
//! workload with different bytes, so their segments line up (same ids, same LSNs, same
//! sizes) and each of B's segments would pass every check but the ones that tie a segment
//! to its store and to its predecessor. One of B's segments is then put into A: over a
//! middle segment, over the final one, or as one more after A's sealed final segment.
//! Every open of A (for writing, read-only, in every recovery mode), `verify()` and the
//! CLI's `verify` must refuse it, naming B's file at offset 0; none may serve B's states.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use agentwal::log::SegmentHeader;
use agentwal::{
    AgentDelta, AgentState, CorruptionReason, Error, Message, Options, RecoveryMode, State, Store,
};
use common::segments::{read_header, segment_files};
use tempfile::TempDir;

fn options(recovery: RecoveryMode) -> Options {
    Options {
        segment_bytes: 4096,
        snapshot_every: 4,
        auto_compact: false,
        compression: agentwal::Compression::None,
        recovery,
        ..Options::default()
    }
}

/// Step `i` of the workload, its text made of `fill`: the same size in both stores.
fn step(fill: char, i: u64) -> AgentDelta {
    AgentDelta::default()
        .message(Message::assistant(format!(
            "step {i:04}: {}",
            fill.to_string().repeat(300)
        )))
        .set("step", i as i64)
}

/// A store in a new directory with `steps` commits of task "t" written with `fill`, and
/// a call begun and finished after them.
fn store(fill: char, steps: u64) -> TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let s: Store = Store::open_with(dir.path(), options(RecoveryMode::default())).expect("open");
    for i in 1..=steps {
        s.commit("t", &step(fill, i)).expect("commit");
    }
    s.begin_call("t", "c", "tool", b"args").expect("begin");
    s.finish_call("t", "c", fill.to_string().as_bytes())
        .expect("finish");
    dir
}

fn path_of(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.wal"))
}

/// What A holds when it is intact: the states of `steps` commits of `a`.
fn expected(steps: u64) -> AgentState {
    let mut state = AgentState::default();
    for i in 1..=steps {
        state.apply(&step('a', i));
    }
    state
}

/// Whether `result` is the corruption error naming `segment` at offset 0.
fn names_foreign<T>(result: agentwal::Result<T>, segment: &Path) -> Result<(), String> {
    match result {
        Err(Error::Corruption {
            segment: named,
            offset: 0,
            reason: CorruptionReason::BrokenChain(why),
        }) if named == segment => {
            let _ = why;
            Ok(())
        }
        Err(e) => Err(format!("wrong error: {e}")),
        Ok(_) => Err(format!(
            "{} was accepted as part of the store",
            segment.display()
        )),
    }
}

/// Every way to open A refuses the foreign file `foreign`, naming it.
fn assert_refused(dir: &Path, foreign: &Path) {
    for mode in [
        RecoveryMode::TolerateTornTail,
        RecoveryMode::Strict,
        RecoveryMode::Salvage,
    ] {
        let opened = Store::<AgentState>::open_read_only_with(dir, options(mode));
        names_foreign(opened.map(|s| s.verify()), foreign)
            .unwrap_or_else(|e| panic!("read-only open, {mode:?}: {e}"));
        let opened = Store::<AgentState>::open_with(dir, options(mode));
        names_foreign(opened.map(drop), foreign)
            .unwrap_or_else(|e| panic!("open for writing, {mode:?}: {e}"));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_agentwal"))
        .args(["verify", dir.to_str().expect("utf-8 path")])
        .output()
        .expect("run agentwal");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let name = foreign.file_name().expect("name").to_string_lossy();
    assert!(stderr.contains(&*name), "{stderr}");
}

/// A and B as the placements need them: same workload, same segment boundaries.
fn pair(steps: u64) -> (TempDir, TempDir) {
    let (a, b) = (store('a', steps), store('b', steps));
    let sizes = |d: &Path| -> Vec<u64> {
        segment_files(d)
            .iter()
            .map(|(_, p)| std::fs::metadata(p).expect("meta").len())
            .collect()
    };
    assert_eq!(segment_files(a.path()).len(), segment_files(b.path()).len());
    assert!(segment_files(a.path()).len() >= 4, "{:?}", sizes(a.path()));
    // A is intact before the swap.
    let s: Store = Store::open_read_only(a.path()).expect("open A");
    let latest = s.load_latest("t").expect("load").expect("t");
    assert_eq!((latest.seq, &*latest.state), (steps, &expected(steps)));
    (a, b)
}

#[test]
fn a_middle_segment_from_another_store_is_refused() {
    let (a, b) = pair(24);
    let middle = segment_files(a.path()).len() as u64 / 2;
    let target = path_of(a.path(), middle);
    std::fs::copy(path_of(b.path(), middle), &target).expect("copy");
    assert_refused(a.path(), &target);
}

#[test]
fn a_final_segment_from_another_store_is_refused() {
    let (a, b) = pair(24);
    let last = segment_files(a.path()).len() as u64;
    let target = path_of(a.path(), last);
    std::fs::copy(path_of(b.path(), last), &target).expect("copy");
    assert_refused(a.path(), &target);
}

#[test]
fn a_segment_from_another_store_after_the_sealed_final_one_is_refused() {
    // A's final segment is sealed with no successor, as a crash between a rotation's
    // seal and its new segment's directory entry leaves it: its last commit went to a
    // new segment, whose file is then removed (that commit is not part of A).
    let a = tempfile::tempdir().expect("tempdir");
    let s: Store = Store::open_with(a.path(), options(RecoveryMode::default())).expect("open");
    let mut steps = 0;
    while segment_files(a.path()).len() < 4 {
        steps += 1;
        s.commit("t", &step('a', steps)).expect("commit");
    }
    drop(s);
    let (last, _) = *segment_files(a.path()).last().expect("segments");
    std::fs::remove_file(path_of(a.path(), last)).expect("remove");
    // B: the same workload, and more in the segment A lacks.
    let b = store('b', steps + 3);
    let s: Store = Store::open_read_only(a.path()).expect("open A");
    let latest = s.load_latest("t").expect("load").expect("t");
    assert_eq!(latest.seq, steps - 1);
    drop(s);
    let target = path_of(a.path(), last);
    std::fs::copy(path_of(b.path(), last), &target).expect("copy");
    assert_refused(a.path(), &target);
}

/// Rewrites the header of segment file `path` with `edit` applied.
fn rewrite_header(path: &Path, edit: impl FnOnce(&mut SegmentHeader)) {
    let mut bytes = std::fs::read(path).expect("read");
    let mut header = read_header(path);
    edit(&mut header);
    let encoded = header.encode();
    bytes[..encoded.len()].copy_from_slice(&encoded);
    std::fs::write(path, bytes).expect("write");
}

#[test]
fn a_segment_that_does_not_link_to_its_sealed_predecessor_is_refused_outside_salvage() {
    // Same store id, another link: what a segment of another copy of this store, or one
    // put out of order, looks like.
    let a = store('a', 24);
    let target = path_of(a.path(), 2);
    rewrite_header(&target, |h| {
        let chain = h.chain.as_mut().expect("v3");
        chain.prev_link = chain.prev_link.wrapping_add(1);
    });
    for mode in [RecoveryMode::TolerateTornTail, RecoveryMode::Strict] {
        let opened = Store::<AgentState>::open_read_only_with(a.path(), options(mode));
        names_foreign(opened.map(drop), &target).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        let opened = Store::<AgentState>::open_with(a.path(), options(mode));
        names_foreign(opened.map(drop), &target).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
    }
    // Salvage reads past a broken chain (a missing segment breaks the links too); the
    // records still validate under the segment's own salt, and the store id is A's.
    let s = Store::<AgentState>::open_read_only_with(a.path(), options(RecoveryMode::Salvage))
        .expect("salvage");
    let latest = s.load_latest("t").expect("load").expect("t");
    assert_eq!((latest.seq, &*latest.state), (24, &expected(24)));
}

#[test]
fn a_v2_segment_after_a_v3_segment_is_refused_in_every_mode() {
    // A v3 writer makes only v3 segments: a v2 one after them is another store's.
    let a = store('a', 24);
    let last = segment_files(a.path()).len() as u64;
    let target = path_of(a.path(), last);
    rewrite_header(&target, |h| h.chain = None);
    assert_refused(a.path(), &target);
}

#[test]
fn every_segment_of_a_store_carries_its_id_and_links_to_its_predecessor() {
    let a = store('a', 24);
    let s: Store = Store::open_with(a.path(), options(RecoveryMode::default())).expect("open");
    s.compact().expect("compact");
    for i in 25..=40 {
        s.commit("t", &step('a', i)).expect("commit");
    }
    drop(s);
    let headers: Vec<SegmentHeader> = segment_files(a.path())
        .iter()
        .map(|(_, p)| read_header(p))
        .collect();
    assert!(headers[0].is_compacted(), "{headers:?}");
    assert!(headers.iter().any(|h| h.is_recycled()), "{headers:?}");
    let store_id = headers[0].chain.expect("v3").store_id;
    for pair in headers.windows(2) {
        let chain = pair[1].chain.expect("v3");
        assert_eq!(chain.store_id, store_id, "{pair:?}");
        assert_eq!(Some(chain.prev_link), pair[0].hand_on(), "{pair:?}");
    }
    // Another store's id differs.
    let b = store('a', 1);
    let other = read_header(&segment_files(b.path())[0].1);
    assert_ne!(other.chain.expect("v3").store_id, store_id);
}
