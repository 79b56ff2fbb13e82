//! The on-disk format is a contract: a store written by earlier code, committed under
//! `tests/fixtures/v1-store/`, opens and reads back exactly (read-only, and for writing on a
//! copy, which then takes new commits).
//!
//! Current code keeps a v1 store working: its v1 segments stay v1 (the final one is
//! appended to with v1, unsalted, records), every new segment is in the current format,
//! and compaction, which rewrites the sealed segments, leaves only such segment files
//! behind.
//!
//! The fixture was written by `write_v1_fixture` below (format version 1, at commit
//! `c017e56`); regenerating it is only for a new format version, under a new name, so that
//! every old fixture keeps being opened:
//! `AGENTWAL_WRITE_FIXTURE=tests/fixtures/v1-store cargo test --release --test format_fixture -- --ignored`

mod common;

use std::path::{Path, PathBuf};

use agentwal::log::record::Salt;
use agentwal::log::{FORMAT_VERSION, FORMAT_VERSION_V1, SegmentHeader};
use agentwal::{
    AgentDelta, AgentState, CallInfo, CheckpointInfo, Message, Options, PendingCall, State, Store,
    Value,
};
use common::segments::{copy_dir, free_files, read_header, segment_files, walk_salted};
use tempfile::TempDir;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1-store")
}

fn options() -> Options {
    Options {
        segment_bytes: 4096,
        snapshot_every: 4,
        auto_compact: false,
        // Bodies stored as the fixture's were: the tests plan rotations by their sizes.
        compression: agentwal::Compression::None,
        ..Options::default()
    }
}

/// Step `i` of task `task`: what the fixture's commits hold.
fn step(task: &str, i: i64) -> AgentDelta {
    AgentDelta::default()
        .message(Message::assistant(format!(
            "{task} step {i}: {}",
            "z".repeat(120)
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

/// What the fixture holds: "alpha" 30 steps, "beta" 12 steps then deleted and
/// recreated with 3 steps, "fork" forked from alpha at 10 plus 2 steps of its own,
/// calls on alpha (c1 finished, c2 pending), and a compacted segment at the front.
#[test]
#[ignore = "writes the fixture; run only for a new format version"]
fn write_v1_fixture() {
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
}

fn check(store: &Store) {
    check_with_tasks(store, &["alpha", "beta", "fork"]);
}

/// What `check` checks, with `tasks` the store's tasks (the fixture's and any added).
fn check_with_tasks(store: &Store, tasks: &[&str]) {
    assert_eq!(store.tasks().expect("tasks"), tasks);
    let alpha = store.load_latest("alpha").expect("load").expect("alpha");
    assert_eq!(alpha.seq, 30);
    assert_eq!(*alpha.state, expected("alpha", 1..=30));
    for seq in 1..=30 {
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

#[test]
fn a_store_written_by_format_version_1_opens_and_reads_back() {
    let store: Store = Store::open_read_only(fixture()).expect("open read-only");
    check(&store);
    assert_eq!(store.recovery_report().torn_bytes, 0);
}

#[test]
fn a_store_written_by_format_version_1_takes_new_commits() {
    let dir = fixture_copy();
    let store: Store = Store::open_with(dir.path(), options()).expect("open for writing");
    check(&store);
    assert_eq!(
        store.commit("alpha", &step("alpha", 31)).expect("commit"),
        31
    );
    store.compact().expect("compact");
    drop(store);
    let store: Store = Store::open_with(dir.path(), options()).expect("reopen");
    let alpha = store.load_latest("alpha").expect("load").expect("alpha");
    assert_eq!((alpha.seq, &*alpha.state), (31, &expected("alpha", 1..=31)));
}

/// A copy of the fixture, to open for writing.
fn fixture_copy() -> TempDir {
    copy_dir(&fixture())
}

/// Each segment file of `dir` (by id): its header, and the version field as it lies on
/// disk.
fn segment_headers(dir: &Path) -> Vec<(u64, SegmentHeader, u32)> {
    segment_files(dir)
        .into_iter()
        .map(|(id, path)| (id, read_header(&path), version_field(&path)))
        .collect()
}

/// The version field of the header of the file at `path`, as it lies on disk.
fn version_field(path: &Path) -> u32 {
    let bytes = std::fs::read(path).expect("read segment");
    u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"))
}

/// The record kinds of segment `path`, validated under `salt`, to its first position
/// that does not validate.
fn record_kinds(path: &Path, salt: Salt) -> Vec<u8> {
    let records = walk_salted(path, salt);
    records.into_iter().map(|(_, h, _)| h.kind).collect()
}

fn assert_v1(header: &SegmentHeader, version: u32, ctx: &str) {
    assert_eq!(
        (header.salt, header.version(), version),
        (Salt::Unsalted, FORMAT_VERSION_V1, FORMAT_VERSION_V1),
        "{ctx}: {header:?}"
    );
}

/// A segment in the current format (v2 when this test was written, v3 since).
fn assert_current(header: &SegmentHeader, version: u32, ctx: &str) {
    assert!(matches!(header.salt, Salt::Salted(_)), "{ctx}: {header:?}");
    assert_eq!(
        (header.version(), version),
        (FORMAT_VERSION, FORMAT_VERSION),
        "{ctx}: {header:?}"
    );
}

/// Everything the store answers about its tasks: per task, its listed checkpoints,
/// each one's state, its calls and its pending calls.
type Dump = Vec<(
    String,
    Vec<CheckpointInfo>,
    Vec<(u64, u64, AgentState)>,
    Vec<CallInfo>,
    Vec<PendingCall>,
)>;

fn dump(store: &Store) -> Dump {
    let mut out = Vec::new();
    for task in store.tasks().expect("tasks") {
        let listed = store.list_checkpoints(&task).expect("list");
        let states = listed
            .iter()
            .map(|c| {
                let cp = store.load(&task, c.seq).expect("load").expect("retained");
                (cp.seq, cp.created_at_ms, (*cp.state).clone())
            })
            .collect();
        let calls = store.calls(&task).expect("calls");
        let pending = store.pending_calls(&task).expect("pending");
        out.push((task, listed, states, calls, pending));
    }
    out
}

/// The fixture's tasks after [`grow`]: alpha has 40 steps, "fork2" was forked from
/// alpha@35 and took a step and two calls (one finished), beta took a pending call.
fn check_grown(store: &Store, ctx: &str) {
    assert_eq!(
        store.tasks().expect("tasks"),
        ["alpha", "beta", "fork", "fork2"],
        "{ctx}"
    );
    for seq in 1..=40 {
        let c = store.load("alpha", seq).expect("load").expect("retained");
        assert_eq!(
            *c.state,
            expected("alpha", 1..=seq as i64),
            "{ctx}: alpha {seq}"
        );
    }
    let mut state = expected("alpha", 1..=35);
    state.apply(&step("fork2", 36));
    let fork2 = store.load_latest("fork2").expect("load").expect("fork2");
    assert_eq!((fork2.seq, &*fork2.state), (2, &state), "{ctx}");
    let listed = store.list_checkpoints("fork2").expect("list");
    assert_eq!(
        listed[0].forked_from,
        Some(("alpha".to_string(), 35)),
        "{ctx}"
    );
    assert_eq!(
        store.call_result("fork2", "c3").expect("call"),
        Some(b"done".to_vec()),
        "{ctx}"
    );
    let pending = store.pending_calls("fork2").expect("pending");
    assert_eq!(pending.len(), 1, "{ctx}");
    assert_eq!(pending[0].call_id, "c4", "{ctx}");
    let pending = store.pending_calls("beta").expect("pending");
    assert_eq!(
        (pending.len(), pending[0].call_id.as_str()),
        (1, "c5"),
        "{ctx}"
    );
    // What the fixture held is still there.
    assert_eq!(
        store.call_result("alpha", "c1").expect("call"),
        Some(b"found".to_vec()),
        "{ctx}"
    );
    let beta = store.load_latest("beta").expect("load").expect("beta");
    assert_eq!(
        (beta.seq, &*beta.state),
        (3, &expected("beta2", 1..=3)),
        "{ctx}"
    );
    let fork = store.load_latest("fork").expect("load").expect("fork");
    assert_eq!(fork.seq, 3, "{ctx}");
    store.verify().expect("verify");
}

/// New commits, a fork, tool calls: enough to fill segment 7 and rotate past it.
fn grow(store: &Store) {
    for i in 31..=40 {
        assert_eq!(
            store.commit("alpha", &step("alpha", i)).expect("commit"),
            i as u64
        );
    }
    assert_eq!(store.fork("alpha", 35, "fork2").expect("fork"), 1);
    store.commit("fork2", &step("fork2", 36)).expect("commit");
    store
        .begin_call("fork2", "c3", "search", b"q=3")
        .expect("begin");
    store.finish_call("fork2", "c3", b"done").expect("finish");
    store
        .begin_call("fork2", "c4", "email", b"to=y")
        .expect("begin");
    store
        .begin_call("beta", "c5", "search", b"q=5")
        .expect("begin");
}

#[test]
fn a_v1_store_keeps_working_and_compaction_leaves_only_current_segments() {
    let dir = fixture_copy();
    let store: Store = Store::open_with(dir.path(), options()).expect("open for writing");
    check(&store);
    let before = segment_headers(dir.path());
    assert_eq!(before.iter().map(|s| s.0).collect::<Vec<_>>(), [6, 7]);
    for (id, h, version) in &before {
        assert_v1(h, *version, &format!("fixture segment {id}"));
    }
    grow(&store);
    check_grown(&store, "after the new writes");
    drop(store);
    let store: Store = Store::open_with(dir.path(), options()).expect("reopen");
    check_grown(&store, "reopened");
    // The old segments stay v1 until compaction; every new one is current, with its own salt.
    let grown = segment_headers(dir.path());
    assert!(grown.len() >= 4, "rotated past segment 7: {grown:?}");
    let mut salts = Vec::new();
    for (id, h, version) in &grown {
        let ctx = format!("segment {id}");
        match id {
            6 | 7 => assert_v1(h, *version, &ctx),
            _ => {
                assert_current(h, *version, &ctx);
                salts.push(h.salt);
            }
        }
    }
    let distinct: std::collections::HashSet<_> = salts.iter().collect();
    assert_eq!(distinct.len(), salts.len(), "distinct salts: {salts:?}");
    let all = dump(&store);
    let read_only: Store = Store::open_read_only(dir.path()).expect("read-only open");
    assert_eq!(dump(&read_only), all, "read-only view of the mixed store");
    drop(read_only);

    store.compact().expect("compact");
    check_grown(&store, "compacted");
    assert_eq!(dump(&store), all, "compaction changes no answer");
    drop(store);
    let after = segment_headers(dir.path());
    for (id, h, version) in &after {
        assert_current(h, *version, &format!("segment {id} after compaction"));
    }
    assert!(
        after.iter().all(|(id, _, _)| *id > 7),
        "the v1 segments are gone: {after:?}"
    );
    // No v1 file waits for reuse either (only salted files are recycled).
    for path in free_files(dir.path()) {
        assert_current(&read_header(&path), version_field(&path), "free file");
    }
    let store: Store = Store::open_with(dir.path(), options()).expect("reopen");
    check_grown(&store, "reopened after compaction");
    assert_eq!(dump(&store), all, "reads back identically after reopen");
    assert_eq!(store.recovery_report().torn_bytes, 0);
    // And it keeps working.
    store.commit("alpha", &step("alpha", 41)).expect("commit");
    drop(store);
    let read_only: Store = Store::open_read_only(dir.path()).expect("read-only open");
    let alpha = read_only
        .load_latest("alpha")
        .expect("load")
        .expect("alpha");
    assert_eq!((alpha.seq, &*alpha.state), (41, &expected("alpha", 1..=41)));
}

#[test]
fn a_v1_final_segment_is_appended_to_with_v1_records() {
    let dir = fixture_copy();
    let final_path = dir.path().join("00000000000000000007.wal");
    let kinds_before = record_kinds(&final_path, Salt::Unsalted);
    let store: Store = Store::open_with(dir.path(), options()).expect("open for writing");
    // A small commit: it fits in what segment 7 has left.
    let delta = AgentDelta::default().set("k", 1);
    assert_eq!(store.commit("gamma", &delta).expect("commit"), 1);
    drop(store);
    let headers = segment_headers(dir.path());
    assert_eq!(
        headers.iter().map(|s| s.0).collect::<Vec<_>>(),
        [6, 7],
        "no new segment"
    );
    let (_, h, version) = &headers[1];
    assert_v1(h, *version, "the final segment after the append");
    // One more record, validating unsalted (a v1 record), right after the old ones.
    let kinds_after = record_kinds(&final_path, Salt::Unsalted);
    assert_eq!(kinds_after.len(), kinds_before.len() + 1, "{kinds_after:?}");
    assert_eq!(kinds_after[..kinds_before.len()], kinds_before[..]);
    for (mode, store) in [
        (
            "read-only",
            Store::open_read_only(dir.path()).expect("read-only"),
        ),
        (
            "writer",
            Store::open_with(dir.path(), options()).expect("reopen"),
        ),
    ] {
        check_with_tasks(&store, &["alpha", "beta", "fork", "gamma"]);
        let gamma = store.load_latest("gamma").expect("load").expect("gamma");
        let mut want = AgentState::default();
        want.apply(&delta);
        assert_eq!((gamma.seq, &*gamma.state), (1, &want), "{mode}");
        assert_eq!(store.recovery_report().torn_bytes, 0, "{mode}");
    }
}
