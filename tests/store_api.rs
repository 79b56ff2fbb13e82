//! The typed Store: checkpoints, reopen, concurrency, fork, tool calls, bad input.

mod common;

use agentwal::{AgentDelta, AgentState, BodyCheck, Error, Message, Options, State, Store, Value};
use common::newest_segment;
use common::states::{CounterV1, CounterV2, CounterV2Migrating};

fn step(i: u64) -> AgentDelta {
    AgentDelta::default()
        .message(Message::assistant(format!("step {i}")).with_tool_call(
            format!("c{i}"),
            "search",
            "q",
        ))
        .message(Message::tool(format!("c{i}"), "x".repeat(200)))
        .set("step", i as i64)
        .set("phase", if i.is_multiple_of(2) { "even" } else { "odd" })
}

fn expected(n: u64) -> AgentState {
    let mut s = AgentState::default();
    for i in 1..=n {
        s.apply(&step(i));
    }
    s
}

#[test]
fn commit_load_every_seq_and_reopen_after_clean_close() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        snapshot_every: 4,
        segment_bytes: 8192,
        ..Options::default()
    };
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    for i in 1..=30 {
        assert_eq!(store.commit("t", &step(i)).unwrap(), i);
    }
    for seq in 1..=30 {
        assert_eq!(
            *store.load("t", seq).unwrap().unwrap().state,
            expected(seq),
            "seq {seq}"
        );
    }
    let infos = store.list_checkpoints("t").unwrap();
    assert_eq!(infos.len(), 30);
    assert!(
        infos.iter().any(|c| c.snapshot),
        "snapshot_every 4 must produce snapshots"
    );
    drop(store);
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    let latest = store.load_latest("t").unwrap().unwrap();
    assert_eq!((latest.seq, (*latest.state).clone()), (30, expected(30)));
    assert_eq!(*store.load("t", 7).unwrap().unwrap().state, expected(7));
    assert_eq!(store.commit("t", &step(31)).unwrap(), 31);
    assert_eq!(store.recovery_report().records, 30);
}

#[test]
fn reopen_after_drop_without_close_and_after_cut_in_last_batch() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store: Store = Store::open(dir.path()).unwrap();
        for i in 1..=5 {
            store.commit("t", &step(i)).unwrap();
        }
        std::mem::forget(store); // no destructor runs, like a crash after the last commit
    }
    // The forgotten handle still holds the OS lock in this process; copy the files out.
    let copy = tempfile::tempdir().unwrap();
    let seg = newest_segment(dir.path());
    let target = copy.path().join(seg.file_name().unwrap());
    std::fs::copy(&seg, &target).unwrap();
    let store: Store = Store::open(copy.path()).unwrap();
    assert_eq!(*store.load_latest("t").unwrap().unwrap().state, expected(5));
    let len_before = store.stats().bytes_written;
    assert_eq!(len_before, 0);
    drop(store);

    // Cut the file inside the last record: only that commit is lost.
    let bytes = std::fs::read(&target).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
    std::fs::write(&target, &bytes[..end - 10]).unwrap();
    let store: Store = Store::open(copy.path()).unwrap();
    assert!(store.recovery_report().torn_bytes > 0);
    let latest = store.load_latest("t").unwrap().unwrap();
    assert_eq!((latest.seq, (*latest.state).clone()), (4, expected(4)));
    assert_eq!(store.commit("t", &step(5)).unwrap(), 5);
    drop(store);
    let store: Store = Store::open(copy.path()).unwrap();
    assert_eq!(*store.load_latest("t").unwrap().unwrap().state, expected(5));
}

#[test]
fn eight_threads_eight_tasks_histories_complete_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        segment_bytes: 64 << 10,
        ..Options::default()
    };
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    std::thread::scope(|s| {
        for t in 0..8 {
            let store = store.clone();
            s.spawn(move || {
                for i in 1..=40u64 {
                    // Every thread writes to every task: same-task commits must serialize.
                    let task = format!("task-{}", (t + i) % 8);
                    let d = AgentDelta::default().message(Message::user(format!("{t}:{i}")));
                    store.commit(&task, &d).unwrap();
                }
            });
        }
    });
    let stats = store.stats();
    assert_eq!(stats.commits, 320);
    drop(store);
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    assert_eq!(store.tasks().unwrap().len(), 8);
    for t in 0..8 {
        let task = format!("task-{t}");
        let latest = store.load_latest(&task).unwrap().unwrap();
        assert_eq!(latest.seq, 40);
        // Each writer's own messages to this task appear in its commit order.
        let mut last: std::collections::HashMap<String, u64> = Default::default();
        for m in &latest.state.messages {
            let (w, i) = m.content.split_once(':').unwrap();
            let i: u64 = i.parse().unwrap();
            assert!(
                last.insert(w.to_string(), i).is_none_or(|p| p < i),
                "reordered in {task}"
            );
        }
        for seq in 1..=40 {
            assert_eq!(
                store
                    .load(&task, seq)
                    .unwrap()
                    .unwrap()
                    .state
                    .messages
                    .len(),
                seq as usize
            );
        }
    }
}

#[test]
fn commit_if_detects_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open(dir.path()).unwrap();
    assert_eq!(store.commit_if("t", 0, &step(1)).unwrap(), 1);
    match store.commit_if("t", 0, &step(2)) {
        Err(Error::Conflict {
            task,
            expected,
            actual,
        }) => assert_eq!((task.as_str(), expected, actual), ("t", 0, 1)),
        other => panic!("{other:?}"),
    }
    assert_eq!(store.commit_if("t", 1, &step(2)).unwrap(), 2);
}

#[test]
fn fork_is_independent_and_remembers_its_origin() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open(dir.path()).unwrap();
    for i in 1..=5 {
        store.commit("main", &step(i)).unwrap();
    }
    assert_eq!(store.fork("main", 3, "branch").unwrap(), 1);
    assert!(matches!(
        store.fork("main", 3, "branch"),
        Err(Error::TaskExists { .. })
    ));
    assert!(matches!(
        store.fork("nope", 1, "x"),
        Err(Error::UnknownTask { .. })
    ));
    store.commit("branch", &step(100)).unwrap();
    store.commit("main", &step(6)).unwrap();
    let mut want = expected(3);
    want.apply(&step(100));
    assert_eq!(*store.load_latest("branch").unwrap().unwrap().state, want);
    assert_eq!(
        *store.load_latest("main").unwrap().unwrap().state,
        expected(6)
    );
    let info = store.list_checkpoints("branch").unwrap();
    assert_eq!(info[0].forked_from, Some(("main".to_string(), 3)));
    drop(store);
    let store: Store = Store::open(dir.path()).unwrap();
    assert_eq!(*store.load_latest("branch").unwrap().unwrap().state, want);
    assert_eq!(
        store.list_checkpoints("branch").unwrap()[0].forked_from,
        Some(("main".into(), 3))
    );
}

#[test]
fn tool_call_journal_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store: Store = Store::open(dir.path()).unwrap();
        store.begin_call("t", "c1", "send_email", b"to=a").unwrap();
        store.finish_call("t", "c1", b"sent").unwrap();
        store.begin_call("t", "c2", "charge_card", b"42").unwrap();
        // Idempotent re-begin and re-finish.
        store.begin_call("t", "c2", "charge_card", b"42").unwrap();
        store.finish_call("t", "c1", b"sent").unwrap();
        assert!(matches!(
            store.begin_call("t", "c2", "charge_card", b"43"),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            store.finish_call("t", "c1", b"other"),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            store.finish_call("t", "zz", b"x"),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            store.begin_call("t", "c1", "send_email", b"to=a"),
            Err(Error::InvalidArgument(_))
        ));
    }
    let store: Store = Store::open(dir.path()).unwrap();
    assert_eq!(
        store.call_result("t", "c1").unwrap(),
        Some(b"sent".to_vec())
    );
    assert_eq!(store.call_result("t", "c2").unwrap(), None);
    let pending = store.pending_calls("t").unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (
            pending[0].call_id.as_str(),
            pending[0].tool.as_str(),
            &pending[0].args[..]
        ),
        ("c2", "charge_card", &b"42"[..])
    );
    store.delete_task("t").unwrap();
    assert_eq!(store.call_result("t", "c1").unwrap(), None);
    drop(store);
    let store: Store = Store::open(dir.path()).unwrap();
    assert!(store.tasks().unwrap().is_empty());
    assert!(store.pending_calls("t").unwrap().is_empty());
}

#[test]
fn delete_is_durable_and_task_can_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open(dir.path()).unwrap();
    store.commit("t", &step(1)).unwrap();
    store.commit("u", &step(1)).unwrap();
    store.delete_task("t").unwrap();
    assert!(matches!(
        store.delete_task("t"),
        Err(Error::UnknownTask { .. })
    ));
    assert_eq!(store.load_latest("t").unwrap(), None);
    assert_eq!(store.commit("t", &step(9)).unwrap(), 1);
    drop(store);
    let store: Store = Store::open(dir.path()).unwrap();
    assert_eq!(
        store.tasks().unwrap(),
        vec!["t".to_string(), "u".to_string()]
    );
    let mut want = AgentState::default();
    want.apply(&step(9));
    assert_eq!(*store.load_latest("t").unwrap().unwrap().state, want);
}

#[test]
fn load_latest_matching_falls_back_past_unhealthy_states() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open(dir.path()).unwrap();
    for i in 1..=4 {
        store.commit("t", &step(i)).unwrap();
    }
    store
        .commit("t", &AgentDelta::default().set("broken", true))
        .unwrap();
    let ok = store
        .load_latest_matching("t", |s| !s.vars.contains_key("broken"))
        .unwrap()
        .unwrap();
    assert_eq!(ok.seq, 4);
    assert!(
        store
            .load_latest_matching("t", |_| false)
            .unwrap()
            .is_none()
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        segment_bytes: 8192,
        ..Options::default()
    };
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    assert!(matches!(
        store.commit("", &step(1)),
        Err(Error::InvalidArgument(_))
    ));
    let long = "x".repeat(agentwal::TASK_ID_BYTES_MAX + 1);
    assert!(matches!(
        store.commit(&long, &step(1)),
        Err(Error::InvalidArgument(_))
    ));
    store.commit("t", &step(1)).unwrap();
    assert!(matches!(store.load("t", 0), Err(Error::UnknownSeq { .. })));
    assert!(matches!(
        store.load("t", 2),
        Err(Error::UnknownSeq {
            seq: 2,
            latest: 1,
            ..
        })
    ));
    assert_eq!(store.load("nope", 1).unwrap(), None);
    assert_eq!(store.load_latest("nope").unwrap(), None);
    // Larger than a segment: it gets a segment of its own.
    let huge = AgentDelta::default().message(Message::user("y".repeat(10_000)));
    assert_eq!(store.commit("t", &huge).unwrap(), 2);
    assert_eq!(store.commit("t", &step(3)).unwrap(), 3);
    assert!(matches!(
        Store::<AgentState>::open_with(
            dir.path(),
            Options {
                snapshot_every: 0,
                ..opts
            }
        ),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Store::<AgentState>::open(dir.path()),
        Err(Error::Locked { .. })
    ));
    let ro: Store = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(ro.load_latest("t").unwrap().unwrap().seq, 3);
    assert!(matches!(ro.commit("t", &step(4)), Err(Error::ReadOnly)));
    assert!(matches!(
        ro.begin_call("t", "c", "x", b""),
        Err(Error::ReadOnly)
    ));
    let missing = dir.path().join("missing");
    assert!(matches!(
        Store::<AgentState>::open_read_only(&missing),
        Err(Error::Io { .. })
    ));
    let not_a_store = tempfile::tempdir().unwrap();
    std::fs::write(not_a_store.path().join("notes.txt"), b"x").unwrap();
    assert!(matches!(
        Store::<AgentState>::open_read_only(not_a_store.path()),
        Err(Error::NotAStore { .. })
    ));
}

#[test]
fn schema_version_mismatch_is_an_error_or_a_migration_never_garbage() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store: Store<CounterV1> = Store::open(dir.path()).unwrap();
        store.commit("t", &5).unwrap();
        store.commit("t", &7).unwrap();
    }
    {
        let store: Store<CounterV2> = Store::open(dir.path()).unwrap();
        assert!(matches!(
            store.load_latest("t"),
            Err(Error::SchemaMismatch {
                found: 1,
                expected: 2
            })
        ));
    }
    let store: Store<CounterV2Migrating> = Store::open(dir.path()).unwrap();
    let s = store.load_latest("t").unwrap().unwrap().state;
    assert_eq!((s.0.total, s.0.label.as_str()), (12, "migrated"));
}

#[test]
fn verify_with_checks_records_without_knowing_the_state_type() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store: Store<CounterV1> = Store::open(dir.path()).unwrap();
        for d in [5, 7, 9] {
            store.commit("t", &d).unwrap();
        }
        store.begin_call("t", "c1", "tool", b"a").unwrap();
        store.finish_call("t", "c1", b"r").unwrap();
    }
    let own: Store<CounterV1> = Store::open_read_only(dir.path()).unwrap();
    let report = own.verify().unwrap();
    assert_eq!(
        (
            report.tasks,
            report.checkpoints,
            report.calls,
            report.bodies_decoded
        ),
        (1, 3, 1, 3)
    );
    assert!(report.bodies_not_decoded.is_empty());

    // i64 bodies do not decode as AgentDelta: not damage, another state type.
    let other: Store<AgentState> = Store::open_read_only(dir.path()).unwrap();
    assert!(matches!(
        other.load_latest("t"),
        Err(Error::BodyDecode {
            seq: 1,
            schema_version: 1,
            ..
        })
    ));
    assert!(matches!(
        other.verify(),
        Err(Error::BodyDecode { seq: 1, .. })
    ));
    for mode in [BodyCheck::Try, BodyCheck::Skip] {
        let report = other.verify_with(mode).unwrap();
        assert_eq!(
            (
                report.tasks,
                report.checkpoints,
                report.calls,
                report.bodies_decoded
            ),
            (1, 3, 1, 0),
            "{mode:?}"
        );
        let [undecoded] = &report.bodies_not_decoded[..] else {
            panic!("{report:?}");
        };
        assert_eq!((undecoded.schema_version, undecoded.count), (1, 3));
    }
    // A newer schema without a migration: listed too, with why.
    let newer: Store<CounterV2> = Store::open_read_only(dir.path()).unwrap();
    let report = newer.verify_with(BodyCheck::Try).unwrap();
    assert_eq!(report.bodies_not_decoded[0].count, 3);
    assert!(
        report.bodies_not_decoded[0]
            .reason
            .contains("schema version 1"),
        "{report:?}"
    );
}

#[test]
fn value_conversions() {
    assert_eq!(Value::from("a"), Value::Str("a".into()));
    assert_eq!(Value::from(2u8), Value::Int(2));
    assert_eq!(Value::from(None::<i64>), Value::Null);
}

/// The latest-state cache answers only for the task it was filled for: a task deleted
/// and started again under the same id never gets the old task's state back.
#[test]
fn cache_never_serves_a_deleted_tasks_state() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open(dir.path()).unwrap();
    for i in 1..=3 {
        store.commit("a", &step(i)).unwrap();
    }
    assert_eq!(*store.load_latest("a").unwrap().unwrap().state, expected(3));
    store.delete_task("a").unwrap();
    let other = |i: u64| AgentDelta::default().message(Message::user(format!("new {i}")));
    for i in 1..=3 {
        assert_eq!(store.commit("a", &other(i)).unwrap(), i);
        let latest = store.load_latest("a").unwrap().unwrap();
        assert_eq!(latest.seq, i);
        assert_eq!(latest.state.messages.len() as u64, i, "{latest:?}");
        assert_eq!(latest.state.messages[0].content, "new 1");
    }
}

/// Loads racing commits (and, with a budget of about one state, evictions) only ever see
/// a committed state: checkpoint `seq` of a task always holds `seq` steps.
#[test]
fn loads_racing_commits_see_only_committed_states() {
    for cache_bytes in [agentwal::CACHE_BYTES_DEFAULT, 3000, 0] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            sync: agentwal::SyncMode::Never,
            cache_bytes,
            ..Options::default()
        };
        let store: Store = Store::open_with(dir.path(), opts).unwrap();
        let tasks = ["t0", "t1", "t2"];
        std::thread::scope(|s| {
            for t in tasks {
                let store = store.clone();
                s.spawn(move || {
                    for i in 1..=60 {
                        store.commit(t, &step(i)).unwrap();
                    }
                });
            }
            for _ in 0..2 {
                let store = store.clone();
                s.spawn(move || {
                    for round in 0..400 {
                        let t = tasks[round % tasks.len()];
                        if let Some(cp) = store.load_latest(t).unwrap() {
                            assert_eq!(*cp.state, expected(cp.seq), "{t} at {}", cp.seq);
                        }
                    }
                });
            }
        });
        for t in tasks {
            let cp = store.load_latest(t).unwrap().unwrap();
            assert_eq!(
                (cp.seq, &*cp.state),
                (60, &expected(60)),
                "cache {cache_bytes}"
            );
        }
    }
}

/// Dropping the last handle of a `Periodic` store releases the directory at once, even
/// while its flusher or compactor is at work: the workload benchmark once failed to reopen
/// a store it had just dropped.
#[test]
fn periodic_store_reopens_right_after_drop() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        sync: agentwal::SyncMode::Periodic(std::time::Duration::from_millis(1)),
        ..Options::default()
    };
    let mut seq = 0;
    for round in 0..150u64 {
        let store: Store =
            Store::open_with(dir.path(), opts).unwrap_or_else(|e| panic!("round {round}: {e}"));
        for _ in 0..3 {
            seq = store.commit("t", &step(seq + 1)).unwrap();
            let pause_us = 200 + (round * 7 + seq) % 11 * 60;
            std::thread::sleep(std::time::Duration::from_micros(pause_us));
        }
    }
    let store: Store = Store::open(dir.path()).unwrap();
    assert_eq!(
        *store.load_latest("t").unwrap().unwrap().state,
        expected(seq)
    );
}
