//! The on-disk format is a contract: a store written by earlier code, committed under
//! `tests/fixtures/v1-store/`, opens and reads back exactly (read-only, and for writing on a
//! copy, which then takes new commits).
//!
//! The fixture was written by `write_v1_fixture` below (format version 1, at commit
//! `c017e56`); regenerating it is only for a new format version, under a new name, so that
//! every old fixture keeps being opened:
//! `AGENTWAL_WRITE_FIXTURE=tests/fixtures/v1-store cargo test --release --test format_fixture -- --ignored`

use std::path::{Path, PathBuf};

use agentwal::{AgentDelta, AgentState, Message, Options, State, Store, Value};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1-store")
}

fn options() -> Options {
    Options {
        segment_bytes: 4096,
        snapshot_every: 4,
        auto_compact: false,
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
    assert_eq!(store.tasks().expect("tasks"), ["alpha", "beta", "fork"]);
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
    let dir = tempfile::tempdir().expect("tempdir");
    for entry in std::fs::read_dir(fixture()).expect("fixture") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).expect("copy");
    }
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
