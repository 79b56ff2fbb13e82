//! Regressions: minimal sequences the property found, replayed as plain tests, and
//! `max_age` retention across compaction and reopen.

use crate::common::newest_segment;
use std::collections::BTreeMap;

use agentwal::{AgentDelta, Message, Options, Role, Store, SyncMode, ToolCall, Value};

use crate::checks::check_task_infos;
use crate::generators::options;
use crate::harness::Harness;
use crate::ops::{Blob, Cut, Expected, Fail, Op, Seq, classify};
use crate::segments::records_in;

// ---------------------------------------------------------------------------------------
// Regressions: minimal sequences the property found, replayed as plain tests.

fn replay(ops: &[Op]) {
    Harness::new(options(
        SyncMode::Never,
        3,
        None,
        agentwal::CACHE_BYTES_DEFAULT,
    ))
    .run(ops);
}

/// A clean close of a recycled segment with no room left for a close record seals it
/// (`Writer::close`), and the harness's cut of the last record took that seal for the
/// segment's last record ("the newest segment is never sealed here"): a gap in the
/// harness, not in the store, which the property found after a `Compact` had retired
/// files for rotations to recycle. The minimal sequence it found (`cache_bytes = 0`).
#[test]
fn regression_a_cut_after_a_close_that_sealed_a_recycled_segment() {
    let ops = [
        Op::Commit { task: "b", delta: AgentDelta { messages: vec![], set: BTreeMap::from([("scratch".to_string(), Value::Bool(false))]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::Commit { task: "d", delta: AgentDelta { messages: vec![Message { role: Role::System, content: "".into(), tool_calls: vec![], tool_call_id: None, data: None }, Message { role: Role::System, content: "aa   a".into(), tool_calls: vec![], tool_call_id: None, data: None }], set: BTreeMap::from([("scratch".to_string(), Value::Null)]), unset: vec![], metadata: BTreeMap::from([("retries".to_string(), Value::Bool(false))]) } },
        Op::Commit { task: "a", delta: AgentDelta { messages: vec![], set: BTreeMap::from([]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::Commit { task: "a", delta: AgentDelta { messages: vec![], set: BTreeMap::from([]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::CommitIf { task: "a", expected: Expected::Latest, delta: AgentDelta { messages: vec![], set: BTreeMap::from([]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::CommitIf { task: "c", expected: Expected::Latest, delta: AgentDelta { messages: vec![], set: BTreeMap::from([]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::Commit { task: "d", delta: AgentDelta { messages: vec![Message { role: Role::System, content: "a".into(), tool_calls: vec![ToolCall { id: "k1".into(), name: "search".into(), args: Value::Float(0.0) }], tool_call_id: None, data: None }, Message { role: Role::System, content: "".into(), tool_calls: vec![], tool_call_id: None, data: None }], set: BTreeMap::from([("phase".to_string(), Value::Bool(false)), ("step".to_string(), Value::List(vec![]))]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::Commit { task: "b", delta: AgentDelta { messages: vec![Message { role: Role::System, content: "aa a".into(), tool_calls: vec![ToolCall { id: "k1".into(), name: "search".into(), args: Value::Null }], tool_call_id: None, data: None }, Message { role: Role::System, content: " a".into(), tool_calls: vec![], tool_call_id: None, data: Some(Value::Float(0.0)) }], set: BTreeMap::from([("step".to_string(), Value::Map(BTreeMap::from([("phase".to_string(), Value::Float(0.0))])))]), unset: vec![], metadata: BTreeMap::from([("model".to_string(), Value::Null)]) } },
        Op::Commit { task: "f", delta: AgentDelta { messages: vec![], set: BTreeMap::from([]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::BeginCall { task: "b", call: "k1", tool: "search", args: Blob(b"") },
        Op::Compact,
        Op::Commit { task: "a", delta: AgentDelta { messages: vec![Message { role: Role::System, content: "".into(), tool_calls: vec![], tool_call_id: None, data: None }, Message { role: Role::System, content: "a ".into(), tool_calls: vec![ToolCall { id: "k1".into(), name: "search".into(), args: Value::Null }], tool_call_id: None, data: None }], set: BTreeMap::from([("phase".to_string(), Value::List(vec![Value::Null, Value::Float(0.0)]))]), unset: vec!["scratch".to_string()], metadata: BTreeMap::from([]) } },
        Op::BeginCall { task: "a", call: "k1", tool: "search", args: Blob(&[b'y'; 1200]) },
        Op::Commit { task: "f", delta: AgentDelta { messages: vec![Message { role: Role::System, content: " a  ".into(), tool_calls: vec![], tool_call_id: None, data: None }], set: BTreeMap::from([("n".to_string(), Value::List(vec![Value::Bool(false)]))]), unset: vec![], metadata: BTreeMap::from([("retries".to_string(), Value::Bool(false))]) } },
        Op::Fork { task: "d", seq: Seq::Existing(29), new_task: "g" },
        Op::Delete { task: "g" },
        Op::CommitIf { task: "f", expected: Expected::Latest, delta: AgentDelta { messages: vec![Message { role: Role::System, content: "a  a  ".into(), tool_calls: vec![ToolCall { id: "k1".into(), name: "search".into(), args: Value::Float(0.0) }], tool_call_id: None, data: None }], set: BTreeMap::from([("phase".to_string(), Value::Null)]), unset: vec![], metadata: BTreeMap::from([("model".to_string(), Value::Str("mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmm".into()))]) } },
        Op::Commit { task: "b", delta: AgentDelta { messages: vec![Message { role: Role::System, content: "   ".into(), tool_calls: vec![], tool_call_id: None, data: None }, Message { role: Role::System, content: "a  ".into(), tool_calls: vec![], tool_call_id: None, data: None }], set: BTreeMap::from([("phase".to_string(), Value::Bool(false))]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::Commit { task: "d", delta: AgentDelta { messages: vec![], set: BTreeMap::from([("step".to_string(), Value::List(vec![Value::Bool(false)]))]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::BeginCall { task: "c", call: "k1", tool: "search", args: Blob(&[b'y'; 1200]) },
        Op::Commit { task: "a", delta: AgentDelta { messages: vec![Message { role: Role::System, content: "".into(), tool_calls: vec![], tool_call_id: None, data: None }, Message { role: Role::System, content: "  ".into(), tool_calls: vec![ToolCall { id: "k1".into(), name: "search".into(), args: Value::Bool(false) }], tool_call_id: None, data: None }], set: BTreeMap::from([("step".to_string(), Value::Float(0.0))]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::BeginCall { task: "a", call: "k2", tool: "search", args: Blob(b"") },
        Op::Commit { task: "c", delta: AgentDelta { messages: vec![Message { role: Role::System, content: " ".into(), tool_calls: vec![], tool_call_id: None, data: None }], set: BTreeMap::from([("phase".to_string(), Value::Bool(false))]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::Fork { task: "b", seq: Seq::Existing(187), new_task: "g" },
        Op::Delete { task: "b" },
        Op::CommitIf { task: "f", expected: Expected::Latest, delta: AgentDelta { messages: vec![Message { role: Role::System, content: " a a  ".into(), tool_calls: vec![], tool_call_id: None, data: None }, Message { role: Role::System, content: "a".into(), tool_calls: vec![], tool_call_id: None, data: None }], set: BTreeMap::from([("scratch".to_string(), Value::List(vec![Value::Float(0.0)]))]), unset: vec![], metadata: BTreeMap::from([("model".to_string(), Value::Bool(false))]) } },
        Op::Commit { task: "a", delta: AgentDelta { messages: vec![Message { role: Role::System, content: "a aa ".into(), tool_calls: vec![], tool_call_id: None, data: None }], set: BTreeMap::from([("scratch".to_string(), Value::Bool(false))]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::Reopen { cut: Some(Cut { at: 0, zero_fill: false }), keep: None }
    ];
    Harness::new(options(SyncMode::Never, 3, None, 0)).run(&ops);
}

/// A `commit_if` that conflicts on a task that does not exist left an empty slot in the
/// index, and the task half-existed until the store was reopened: `tasks()` did not list
/// it, but `load` and `fork` answered `UnknownSeq` instead of `Ok(None)` / `UnknownTask`,
/// `finish_call` answered `InvalidArgument` instead of `UnknownTask`, and `delete_task`
/// succeeded and appended a deletion record for a task that never existed.
#[test]
fn regression_conflicting_commit_if_does_not_create_the_task() {
    let commit_if = Op::CommitIf {
        task: "a",
        expected: Expected::Above,
        delta: AgentDelta::default(),
    };
    // The minimal sequences the property found.
    replay(std::slice::from_ref(&commit_if)); // the final sweep: load("a", 0)
    replay(&[
        commit_if.clone(),
        Op::FinishCall {
            task: "a",
            call: "k1",
            result: Blob(b""),
        },
    ]);
    // Every operation that looked the task up, then a reopen that counts the records.
    replay(&[
        commit_if,
        Op::Load {
            task: "a",
            seq: Seq::Exact(1),
        },
        Op::Fork {
            task: "a",
            seq: Seq::Exact(1),
            new_task: "f",
        },
        Op::Delete { task: "a" },
        Op::Reopen {
            cut: None,
            keep: None,
        },
        Op::Tasks,
    ]);
}

/// Compaction drops the records a deletion made dead, so the deletion must be durable
/// first. It was not: with `SyncMode::Periodic` or `Never`, a crash after a pass could lose
/// the (unflushed) deletion record while the task's older records were already gone, and
/// the task came back with only its newer records: listed by `tasks()`, one delta in
/// `list_checkpoints`, `load_latest` = `None`, a state that never existed. The property
/// found it as a cut of the deletion after `Compact`; the fix flushes the log in the pass,
/// which this test observes as an fsync of the writer (nothing else fsyncs in `Never`).
#[test]
fn regression_compaction_makes_the_deletions_it_relies_on_durable() {
    let big = Blob(&[b'y'; 1200]);
    let call = |call| Op::BeginCall {
        task: "a",
        call,
        tool: "search",
        args: big,
    };
    let commit = |n: i64| Op::Commit {
        task: "c",
        delta: AgentDelta::default().set("n", n),
    };
    // c@1 and four large calls fill segment 1; c@2 and the deletion go to segment 2.
    let ops = [
        commit(1),
        call("k1"),
        call("k2"),
        call("k3"),
        Op::BeginCall {
            task: "b",
            call: "k1",
            tool: "search",
            args: big,
        },
        commit(2),
        Op::Delete { task: "c" },
    ];
    let mut h = Harness::new(options(
        SyncMode::Never,
        3,
        None,
        agentwal::CACHE_BYTES_DEFAULT,
    ));
    for (i, op) in ops.iter().enumerate() {
        h.step(op, &format!("op #{i}: {op:?}"));
    }
    let segments = std::fs::read_dir(h.dir.path())
        .expect("read dir")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "wal"))
        })
        .count();
    assert_eq!(segments, 2, "the setup must seal segment 1");
    let fsyncs = h.store().stats().fsyncs;
    h.step(&Op::Compact, "compact");
    assert!(
        h.store().stats().fsyncs > fsyncs,
        "compaction dropped c's records without making the deletion durable"
    );
    h.step(
        &Op::Reopen {
            cut: None,
            keep: None,
        },
        "reopen",
    );
}

/// `task_infos` reported a fork's origin from the index's memory of it, which outlives
/// the fork's checkpoint 1 under retention: with `keep_checkpoints: Some(1)` it said
/// `forked_from: Some(("b", 1))` while `list_checkpoints` no longer served seq 1, until a
/// compaction dropped seq 1's record and a reopen, which learns origins from that record,
/// said `None`. The answer depended on whether compaction and a reopen had happened; it
/// now follows seq 1's retention, as `list_checkpoints` does.
#[test]
fn regression_task_infos_forked_from_follows_retention() {
    let commit = |task| Op::Commit {
        task,
        delta: AgentDelta::default(),
    };
    let big_call = |task, call| Op::BeginCall {
        task,
        call,
        tool: "search",
        args: Blob(&[b'y'; 1200]),
    };
    let fork = Op::Fork {
        task: "b",
        seq: Seq::Exact(1),
        new_task: "a",
    };
    // a@1 (the fork) lands in a segment the large calls seal; compaction drops it.
    let ops = [
        commit("b"),
        fork,
        commit("a"),
        big_call("b", "k1"),
        big_call("b", "k2"),
        big_call("b", "k3"),
        big_call("a", "k1"),
        commit("a"),
        Op::Compact,
        Op::Reopen {
            cut: None,
            keep: None,
        },
    ];
    // Every checkpoint a snapshot: a@3 needs no older record.
    let mut h = Harness::new(options(
        SyncMode::Never,
        1,
        Some(1),
        agentwal::CACHE_BYTES_DEFAULT,
    ));
    for (i, op) in ops.iter().enumerate() {
        h.step(op, &format!("op #{i}: {op:?}"));
        check_task_infos(h.store(), &h.model, &format!("after op #{i}: {op:?}"));
    }
    // The reopened store no longer holds a@1: the origin is gone for good.
    assert!(
        h.model.tasks["a"].indexed_from > 1,
        "the setup must drop a@1"
    );
}

/// `max_age` retention, which the property leaves out (wall-clock time would make it
/// flaky there): checkpoints older than `max_age` are no longer served, the latest always
/// is, `fork` from a dropped one is refused, and all of it holds across a compaction and a
/// reopen, after which the history the log still holds starts mid-chain (headless).
#[test]
fn max_age_retention_across_compaction_and_reopen() {
    const MAX_AGE: std::time::Duration = std::time::Duration::from_millis(1000);
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options {
        max_age: Some(MAX_AGE),
        // The layout below (records per segment) is planned in bytes as encoded.
        compression: agentwal::Compression::None,
        ..options(SyncMode::Never, 3, None, agentwal::CACHE_BYTES_DEFAULT)
    };
    let commit =
        |store: &Store, task: &str, n: i64| store.commit(task, &AgentDelta::default().set("n", n));
    // Two of these fill a segment: rotations, so compaction has sealed segments to drop.
    let filler = |store: &Store, n: i64| {
        let delta = AgentDelta::default().meta("pad", "p".repeat(1500));
        store.commit("x", &delta.set("n", n))
    };
    let n_at = |store: &Store, task: &str, seq: u64| {
        let cp = store.load(task, seq).expect("load");
        cp.map(|cp| cp.state.vars["n"].clone())
    };
    let listed = |store: &Store, task: &str| -> Vec<(u64, bool)> {
        let list = store.list_checkpoints(task).expect("list_checkpoints");
        list.iter().map(|c| (c.seq, c.snapshot)).collect()
    };
    let store: Store = Store::open_with(dir.path(), options).expect("open");
    let ops = [("x", 1), ("x", 2), ("a", 1), ("a", 2), ("a", 3)];
    let ops = ops
        .into_iter()
        .chain([("x", 3), ("x", 4), ("a", 4), ("a", 5)]);
    for (task, n) in ops {
        let done = if task == "x" {
            filler(&store, n)
        } else {
            commit(&store, task, n)
        };
        done.expect("commit");
    }
    let all = [(1, false), (2, false), (3, true), (4, false), (5, false)];
    assert_eq!(listed(&store, "a"), all, "all young (snapshot_every 3)");
    std::thread::sleep(MAX_AGE + std::time::Duration::from_millis(100));
    commit(&store, "a", 6).expect("commit");
    commit(&store, "a", 7).expect("commit");
    // The layout the rest relies on: x@1, x@2 and a@1..3 in sealed segments; x@3, x@4,
    // a@4, a@5 (old deltas), a@6 (a snapshot: a@6's fold base) and a@7 in the active one.
    let active = records_in(&newest_segment(dir.path()));
    assert_eq!(active.len(), 6, "records in the active segment: {active:?}");
    let check = |store: &Store, ctx: &str| {
        assert_eq!(listed(store, "a"), [(6, true), (7, false)], "{ctx}: young");
        assert_eq!(
            listed(store, "x"),
            [(4, false)],
            "{ctx}: the latest is kept"
        );
        for seq in 1..=5 {
            assert_eq!(n_at(store, "a", seq), None, "{ctx}: a@{seq} is too old");
        }
        assert_eq!(n_at(store, "a", 6), Some(Value::Int(6)), "{ctx}");
        assert_eq!(n_at(store, "a", 7), Some(Value::Int(7)), "{ctx}");
        assert_eq!(n_at(store, "x", 3), None, "{ctx}");
        assert_eq!(n_at(store, "x", 4), Some(Value::Int(4)), "{ctx}");
        let unknown = store.load("a", 8).map_err(classify).err();
        let want = Fail::UnknownSeq {
            task: "a".into(),
            seq: 8,
            latest: 7,
        };
        assert_eq!(unknown, Some(want), "{ctx}");
        let matching = |n: i64| {
            let cp = store.load_latest_matching("a", |s| s.vars["n"] != Value::Int(n));
            cp.expect("load_latest_matching").map(|cp| cp.seq)
        };
        assert_eq!(matching(0), Some(7), "{ctx}");
        assert_eq!(matching(7), Some(6), "{ctx}");
        let only_old = store.load_latest_matching("a", |s| s.vars["n"] == Value::Int(5));
        assert_eq!(only_old.expect("load").map(|cp| cp.seq), None, "{ctx}");
        let refused = store.fork("a", 5, "f").map_err(classify);
        assert_eq!(refused, Err(Fail::InvalidArgument), "{ctx}: fork from a@5");
    };
    check(&store, "before compaction");
    // As a background pass does, leaving the active segment alone (`compact` seals it).
    store.compact_sealed_segments().expect("compact");
    check(&store, "after compaction");
    drop(store);
    // The log now holds a@4.. (a@4 a delta): served from the first snapshot, a@6.
    let store: Store = Store::open_with(dir.path(), options).expect("reopen");
    assert_eq!(
        store.recovery_report().records,
        6,
        "only the active segment's"
    );
    check(&store, "after reopen");
    let all: Store = Store::open_read_only(dir.path()).expect("read-only open");
    assert_eq!(listed(&all, "a"), [(6, true), (7, false)], "no retention");
    assert_eq!(n_at(&all, "a", 5), None, "a@5 cannot be rebuilt");
    drop(all);
    store.compact().expect("compact");
    check(&store, "after a second compaction");
    assert_eq!(store.fork("a", 6, "f").expect("fork"), 1);
    assert_eq!(n_at(&store, "f", 1), Some(Value::Int(6)));
}
