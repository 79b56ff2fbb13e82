//! A store written by format v2 code, committed under `tests/fixtures/v2-store/`, opens
//! and reads back exactly (read-only, and for writing on a copy), and keeps working under
//! format v3: its v2 segments stay v2 (the final one is appended to under v2's rules),
//! every new segment is v3 and links to the v2 segment before it, and compaction leaves
//! only v3 segments.
//!
//! The fixture was written by `write_v2_fixture` below, with format v2 code (commit
//! `d6f3755`): a compacted segment, a recycled one, and a clean close (a close record in
//! the recycled final segment). Regenerating it is only for a new format version, under a
//! new name, so that every old fixture keeps being opened:
//! `AGENTWAL_WRITE_FIXTURE=tests/fixtures/v2-store cargo test --test format_fixture_v2 -- --ignored`

mod common;

use std::path::{Path, PathBuf};

use agentwal::log::record::Salt;
use agentwal::log::{FORMAT_VERSION, FORMAT_VERSION_V2, KIND_CLOSE, SegmentHeader};
use agentwal::{AgentDelta, AgentState, Message, Options, State, Store, Value};
use common::segments::{copy_dir, free_files, read_header, segment_files, walk};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v2-store")
}

fn options() -> Options {
    Options {
        segment_bytes: 4096,
        snapshot_every: 4,
        auto_compact: false,
        compression: agentwal::Compression::None,
        ..Options::default()
    }
}

/// Step `i` of task `task`: what the fixture's commits hold.
fn step(task: &str, i: i64) -> AgentDelta {
    AgentDelta::default()
        .message(Message::assistant(format!(
            "{task} step {i}: {}",
            "y".repeat(120)
        )))
        .set("step", i)
        .set("ratio", Value::Float(i as f64 / 4.0))
}

/// The states the fixture's tasks must have, from the same steps.
fn expected(task: &str, steps: std::ops::RangeInclusive<i64>) -> AgentState {
    let mut state = AgentState::default();
    for i in steps {
        state.apply(&step(task, i));
    }
    state
}

/// What the fixture holds: "alpha" 40 steps, "beta" 12 steps then deleted and
/// recreated with 3 steps, "fork" forked from alpha at 10 plus 2 steps of its own, calls
/// on alpha (c1 finished, c2 pending); compacted twice, with the rotations after the
/// first compaction taking retired files.
#[test]
#[ignore = "writes the fixture; run only for a new format version"]
fn write_v2_fixture() {
    let dir = std::env::var("AGENTWAL_WRITE_FIXTURE").expect("AGENTWAL_WRITE_FIXTURE=<dir>");
    let store: Store = Store::open_with(&dir, options()).expect("open");
    for i in 1..=12 {
        store.commit("beta", &step("beta", i)).expect("commit");
    }
    for i in 1..=30 {
        store.commit("alpha", &step("alpha", i)).expect("commit");
    }
    store
        .begin_call("alpha", "c1", "search", b"q=1")
        .expect("begin");
    store.finish_call("alpha", "c1", b"found").expect("finish");
    store
        .begin_call("alpha", "c2", "email", b"to=x")
        .expect("begin");
    store.fork("alpha", 10, "fork").expect("fork");
    store.delete_task("beta").expect("delete");
    store.compact().expect("compact");
    for i in 1..=3 {
        store.commit("beta", &step("beta2", i)).expect("commit");
    }
    for i in 11..=12 {
        store.commit("fork", &step("fork", i)).expect("commit");
    }
    for i in 31..=40 {
        store.commit("alpha", &step("alpha", i)).expect("commit");
    }
    // Small records (finished calls on beta) until the writer is in a recycled file, so
    // the drop below closes it with a close record.
    let final_is_recycled = || {
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .expect("list")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".wal"))
            .collect();
        names.sort();
        let bytes =
            std::fs::read(std::path::Path::new(&dir).join(&names[names.len() - 1])).expect("read");
        bytes[12] & 2 != 0
    };
    let mut i = 0;
    while !final_is_recycled() {
        i += 1;
        assert!(i < 500, "no rotation into a retired file");
        let call = format!("b{i}");
        store
            .begin_call("beta", &call, "search", b"q")
            .expect("begin");
        store.finish_call("beta", &call, b"r").expect("finish");
    }
}

fn check(store: &Store) {
    check_with_tasks(store, &["alpha", "beta", "fork"], 40);
}

/// What `check` checks, with `tasks` the store's tasks and `alpha` alpha's latest seq.
fn check_with_tasks(store: &Store, tasks: &[&str], alpha: u64) {
    assert_eq!(store.tasks().expect("tasks"), tasks);
    let latest = store.load_latest("alpha").expect("load").expect("alpha");
    assert_eq!(latest.seq, alpha);
    for seq in 1..=alpha {
        let c = store.load("alpha", seq).expect("load").expect("retained");
        assert_eq!(*c.state, expected("alpha", 1..=seq as i64), "alpha {seq}");
    }
    let beta = store.load_latest("beta").expect("load").expect("beta");
    assert_eq!((beta.seq, &*beta.state), (3, &expected("beta2", 1..=3)));
    let fork = store.load_latest("fork").expect("load").expect("fork");
    let mut state = expected("alpha", 1..=10);
    for i in 11..=12 {
        state.apply(&step("fork", i));
    }
    assert_eq!((fork.seq, &*fork.state), (3, &state));
    let listed = store.list_checkpoints("fork").expect("list");
    assert_eq!(listed[0].forked_from, Some(("alpha".to_string(), 10)));
    assert_eq!(
        store.call_result("alpha", "c1").expect("call"),
        Some(b"found".to_vec())
    );
    let pending = store.pending_calls("alpha").expect("pending");
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0].call_id.as_str(), &pending[0].args[..]),
        ("c2", &b"to=x"[..])
    );
    store.verify().expect("verify");
}

/// Each segment file of `dir` (by id) and its header.
fn headers(dir: &Path) -> Vec<(u64, SegmentHeader)> {
    segment_files(dir)
        .into_iter()
        .map(|(id, path)| (id, read_header(&path)))
        .collect()
}

fn assert_version(header: &SegmentHeader, version: u32, ctx: &str) {
    assert!(matches!(header.salt, Salt::Salted(_)), "{ctx}: {header:?}");
    assert_eq!(header.version(), version, "{ctx}: {header:?}");
    assert_eq!(header.chain.is_some(), version == FORMAT_VERSION, "{ctx}");
}

#[test]
fn the_v2_fixture_is_v2_with_a_compacted_and_a_recycled_segment() {
    let hs = headers(&fixture());
    assert!(hs.len() >= 2, "{hs:?}");
    for (id, h) in &hs {
        assert_version(h, FORMAT_VERSION_V2, &format!("fixture segment {id}"));
    }
    assert!(hs[0].1.is_compacted(), "{hs:?}");
    let (_, last) = hs.last().expect("segments");
    assert!(last.is_recycled(), "{hs:?}");
    let path = segment_files(&fixture())
        .last()
        .expect("segments")
        .1
        .clone();
    let kinds: Vec<u8> = walk(&path).into_iter().map(|(_, h, _)| h.kind).collect();
    assert_eq!(kinds.last(), Some(&KIND_CLOSE), "closed cleanly: {kinds:?}");
}

#[test]
fn a_store_written_by_format_version_2_opens_and_reads_back() {
    let store: Store = Store::open_read_only(fixture()).expect("open read-only");
    check(&store);
    assert_eq!(store.recovery_report().torn_bytes, 0);
    // A writer on a copy reads the same, and appends in the v2 final segment, after its
    // close record, under v2's rules.
    let dir = copy_dir(&fixture());
    let store: Store = Store::open_with(dir.path(), options()).expect("open for writing");
    check(&store);
    let delta = AgentDelta::default().set("k", 1);
    assert_eq!(store.commit("gamma", &delta).expect("commit"), 1);
    drop(store);
    let after = headers(dir.path());
    assert_eq!(after.len(), headers(&fixture()).len(), "no new segment");
    for (id, h) in &after {
        assert_version(h, FORMAT_VERSION_V2, &format!("segment {id}"));
    }
    let store: Store = Store::open_read_only(dir.path()).expect("read-only");
    check_with_tasks(&store, &["alpha", "beta", "fork", "gamma"], 40);
}

/// The v3 segments of `dir` all carry one store id, and each one after a sealed
/// segment links to what that segment hands on.
fn assert_chained(dir: &Path) {
    let hs = headers(dir);
    let ids: std::collections::HashSet<u128> = hs
        .iter()
        .filter_map(|(_, h)| h.chain.map(|c| c.store_id))
        .collect();
    assert_eq!(ids.len(), 1, "one store id: {hs:?}");
    for pair in hs.windows(2) {
        let ((_, before), (id, h)) = (&pair[0], &pair[1]);
        match h.chain {
            Some(chain) => assert_eq!(Some(chain.prev_link), before.hand_on(), "segment {id}"),
            // The fixture's own segments: v2, and only ever before v3 ones.
            None => assert!(before.chain.is_none(), "segment {id} follows a v3 one"),
        }
    }
}

#[test]
fn a_v2_store_grows_v3_segments_linked_to_its_v2_ones_and_compacts_to_v3() {
    let dir = copy_dir(&fixture());
    let store: Store = Store::open_with(dir.path(), options()).expect("open for writing");
    for i in 41..=60 {
        assert_eq!(
            store.commit("alpha", &step("alpha", i)).expect("commit"),
            i as u64
        );
    }
    drop(store);
    let old = headers(&fixture()).len();
    let grown = headers(dir.path());
    assert!(grown.len() > old + 1, "rotated: {grown:?}");
    for (index, (id, h)) in grown.iter().enumerate() {
        let version = match index < old {
            true => FORMAT_VERSION_V2,
            false => FORMAT_VERSION,
        };
        assert_version(h, version, &format!("segment {id}"));
    }
    assert_chained(dir.path());
    let store: Store = Store::open_with(dir.path(), options()).expect("reopen");
    check_with_tasks(&store, &["alpha", "beta", "fork"], 60);
    store.compact().expect("compact");
    check_with_tasks(&store, &["alpha", "beta", "fork"], 60);
    drop(store);
    for (id, h) in headers(dir.path()) {
        assert_version(
            &h,
            FORMAT_VERSION,
            &format!("segment {id} after compaction"),
        );
    }
    assert_chained(dir.path());
    for path in free_files(dir.path()) {
        let h = read_header(&path);
        assert!(matches!(h.salt, Salt::Salted(_)), "{h:?}");
    }
    let store: Store = Store::open_read_only(dir.path()).expect("read-only");
    check_with_tasks(&store, &["alpha", "beta", "fork"], 60);
    assert_eq!(store.recovery_report().torn_bytes, 0);
}

/// Hooks of a log whose records are all dead: a pass deletes the sealed segments and
/// replaces the last of them with an empty compacted one.
struct NothingLive(parking_lot::RwLock<()>);

impl agentwal::log::CompactionHooks for NothingLive {
    fn positions_lock(&self) -> &parking_lot::RwLock<()> {
        &self.0
    }
    fn live_records(
        &self,
        _sealed: &dyn Fn(agentwal::log::RecordPos) -> bool,
    ) -> (Vec<agentwal::log::RecordPos>, u64) {
        (Vec::new(), 0)
    }
    fn orphan(
        &self,
        _vanishes: &dyn Fn(agentwal::log::RecordPos) -> bool,
        _moved: &std::collections::HashMap<agentwal::log::RecordPos, agentwal::log::Moved>,
    ) -> Option<agentwal::log::RecordPos> {
        None
    }
    fn remap(
        &self,
        _moved: &std::collections::HashMap<agentwal::log::RecordPos, agentwal::log::Moved>,
    ) {
    }
}

/// A pass that is not forced leaves the v2 final segment a writer still appends to where
/// it is, after a v3 compacted segment: the next open must accept that order (only a v3
/// segment made by a rotation never precedes an older one).
#[test]
fn a_v2_final_segment_after_a_v3_compacted_segment_opens() {
    use agentwal::log::{Log, LogOptions};
    let dir = copy_dir(&fixture());
    let opts = || LogOptions {
        segment_bytes: 4096,
        ..LogOptions::default()
    };
    let last_id = headers(dir.path()).last().expect("segments").0;
    let mut in_last = 0;
    let log = Log::open_with(dir.path(), opts(), |r| {
        in_last += u64::from(r.segment_id == last_id);
        Ok(())
    })
    .expect("open the v2 fixture's log");
    let hooks = NothingLive(parking_lot::RwLock::new(()));
    log.compact(false, &hooks)
        .expect("pass")
        .expect("a pass ran: nothing is live");
    drop(log);
    let hs = headers(dir.path());
    assert_eq!(hs.len(), 2, "{hs:?}");
    assert!(hs[0].1.is_compacted(), "{hs:?}");
    assert_version(&hs[0].1, FORMAT_VERSION, "compacted segment");
    assert_version(&hs[1].1, FORMAT_VERSION_V2, "final segment");
    let mut after = 0;
    let log = Log::open_with(dir.path(), opts(), |r| {
        assert_eq!(r.segment_id, last_id);
        after += 1;
        Ok(())
    })
    .expect("a v2 final segment after a compacted v3 one opens");
    assert_eq!(after, in_last);
    assert!(in_last > 0);
    drop(log);
}
