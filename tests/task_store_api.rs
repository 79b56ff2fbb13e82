//! The store API suite written once against `TaskStore` and run on both backends: every
//! test here runs on a local `Store` and, with the `postgres` feature, on a `PgStore` in a
//! fresh schema of the test server (`scripts/test.sh` starts one; without it the PostgreSQL
//! half fails rather than skips).

mod common;

use std::collections::HashMap;

use agentwal::{AgentDelta, AgentState, BodyLocation, Error, Message, State, TaskStore, Value};
use common::states::CounterV1;

/// The options both backends share.
#[derive(Clone, Copy)]
struct Cfg {
    snapshot_every: u32,
    keep: Option<u32>,
}

const DEFAULT: Cfg = Cfg {
    snapshot_every: agentwal::SNAPSHOT_EVERY_DEFAULT,
    keep: None,
};

fn local(cfg: Cfg) -> (tempfile::TempDir, agentwal::Store) {
    let dir = tempfile::tempdir().unwrap();
    let options = agentwal::Options {
        snapshot_every: cfg.snapshot_every,
        keep_checkpoints: cfg.keep,
        ..agentwal::Options::default()
    };
    let store = agentwal::Store::open_with(dir.path(), options).unwrap();
    (dir, store)
}

#[cfg(feature = "postgres")]
fn pg(name: &str, cfg: Cfg) -> agentwal::postgres::PgStore {
    let options = agentwal::postgres::PgOptions {
        snapshot_every: cfg.snapshot_every,
        keep_checkpoints: cfg.keep,
        ..agentwal::postgres::PgOptions::default()
    };
    common::pg::store(name, options)
}

/// Runs test body `$name` (a generic fn) on each backend.
macro_rules! on_both {
    ($name:ident, $cfg:expr) => {
        mod $name {
            #[test]
            fn local() {
                let (_dir, store) = super::local($cfg);
                super::$name(&store);
            }
            #[cfg(feature = "postgres")]
            #[test]
            fn postgres() {
                let store = super::pg(stringify!($name), $cfg);
                super::$name(&store);
            }
        }
    };
}

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

on_both!(
    commit_and_load_every_seq,
    super::Cfg {
        snapshot_every: 4,
        keep: None
    }
);
fn commit_and_load_every_seq(store: &impl TaskStore<AgentState>) {
    for i in 1..=30 {
        assert_eq!(store.commit("t", &step(i)).unwrap(), i);
    }
    for seq in 1..=30 {
        let cp = store.load("t", seq).unwrap().unwrap();
        assert_eq!((cp.seq, &*cp.state), (seq, &expected(seq)), "seq {seq}");
    }
    let infos = store.list_checkpoints("t").unwrap();
    assert_eq!(
        infos.iter().map(|c| c.seq).collect::<Vec<_>>(),
        (1..=30).collect::<Vec<_>>()
    );
    assert!(
        infos.iter().any(|c| c.snapshot),
        "snapshot_every 4 must produce snapshots"
    );
    // The count rule: never more than 3 deltas in a row.
    assert!(infos.windows(4).all(|w| w.iter().any(|c| c.snapshot)));
    assert!(
        infos
            .windows(2)
            .all(|w| w[0].created_at_ms <= w[1].created_at_ms)
    );
    let latest = store.load_latest("t").unwrap().unwrap();
    assert_eq!((latest.seq, &*latest.state), (30, &expected(30)));
    assert_eq!(store.tasks().unwrap(), vec!["t".to_string()]);
}

on_both!(size_rule_snapshots_a_growing_state, super::DEFAULT);
fn size_rule_snapshots_a_growing_state(store: &impl TaskStore<AgentState>) {
    for i in 1..=120 {
        store.commit("g", &step(i)).unwrap();
    }
    let infos = store.list_checkpoints("g").unwrap();
    let snapshots: Vec<u64> = infos.iter().filter(|c| c.snapshot).map(|c| c.seq).collect();
    // A state growing by ~300 bytes a step: a snapshot once the deltas pass 4 KiB, then
    // when they outweigh the last snapshot twice over; never every commit, never none.
    assert!(
        !snapshots.is_empty() && snapshots.len() < 10,
        "{snapshots:?}"
    );
    assert_eq!(*store.load("g", 77).unwrap().unwrap().state, expected(77));
}

on_both!(
    threads_contending_on_tasks_keep_histories_linear,
    super::DEFAULT
);
fn threads_contending_on_tasks_keep_histories_linear(store: &impl TaskStore<AgentState>) {
    std::thread::scope(|s| {
        for t in 0..4u64 {
            s.spawn(move || {
                for i in 1..=20u64 {
                    // Every thread writes to every task: same-task commits must serialize.
                    let task = format!("task-{}", (t + i) % 4);
                    let d = AgentDelta::default().message(Message::user(format!("{t}:{i}")));
                    store.commit(&task, &d).unwrap();
                }
            });
        }
    });
    assert_eq!(store.tasks().unwrap().len(), 4);
    for t in 0..4 {
        let task = format!("task-{t}");
        let latest = store.load_latest(&task).unwrap().unwrap();
        assert_eq!(latest.seq, 20);
        let mut last: HashMap<String, u64> = HashMap::new();
        for m in &latest.state.messages {
            let (w, i) = m.content.split_once(':').unwrap();
            let i: u64 = i.parse().unwrap();
            assert!(
                last.insert(w.to_string(), i).is_none_or(|p| p < i),
                "reordered in {task}"
            );
        }
        for seq in 1..=20 {
            let cp = store.load(&task, seq).unwrap().unwrap();
            assert_eq!(cp.state.messages.len(), seq as usize);
        }
    }
}

on_both!(commit_if_detects_conflicts, super::DEFAULT);
fn commit_if_detects_conflicts(store: &impl TaskStore<AgentState>) {
    assert_eq!(store.commit_if("t", 0, &step(1)).unwrap(), 1);
    match store.commit_if("t", 0, &step(2)) {
        Err(Error::Conflict {
            task,
            expected,
            actual,
        }) => {
            assert_eq!((task.as_str(), expected, actual), ("t", 0, 1))
        }
        other => panic!("{other:?}"),
    }
    // A conflicting commit_if on a new task does not create it.
    assert!(matches!(
        store.commit_if("new", 3, &step(1)),
        Err(Error::Conflict { actual: 0, .. })
    ));
    assert_eq!(store.tasks().unwrap(), vec!["t".to_string()]);
    assert_eq!(store.commit_if("t", 1, &step(2)).unwrap(), 2);
    assert_eq!(*store.load_latest("t").unwrap().unwrap().state, expected(2));
}

on_both!(fork_is_independent_and_remembers_its_origin, super::DEFAULT);
fn fork_is_independent_and_remembers_its_origin(store: &impl TaskStore<AgentState>) {
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
    assert!(matches!(
        store.fork("main", 9, "x"),
        Err(Error::UnknownSeq { .. })
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
    assert!(info[0].snapshot);
    assert_eq!(info[1].forked_from, None);
}

on_both!(tool_call_journal, super::DEFAULT);
fn tool_call_journal(store: &impl TaskStore<AgentState>) {
    store.begin_call("t", "c1", "send_email", b"to=a").unwrap();
    store.finish_call("t", "c1", b"sent").unwrap();
    store.begin_call("t", "c2", "charge_card", b"42").unwrap();
    store.begin_call("t", "c3", "search", b"").unwrap();
    // Idempotent re-begin and re-finish.
    store.begin_call("t", "c2", "charge_card", b"42").unwrap();
    store.finish_call("t", "c1", b"sent").unwrap();
    let invalid = |r: agentwal::Result<()>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(invalid(store.begin_call("t", "c2", "charge_card", b"43")));
    assert!(invalid(store.begin_call("t", "c2", "refund", b"42")));
    assert!(invalid(store.finish_call("t", "c1", b"other")));
    assert!(invalid(store.finish_call("t", "zz", b"x")));
    assert!(invalid(store.begin_call("t", "c1", "send_email", b"to=a")));
    assert!(matches!(
        store.finish_call("nope", "c1", b"x"),
        Err(Error::UnknownTask { .. })
    ));
    // A task with calls only exists, and has no checkpoint.
    assert_eq!(store.tasks().unwrap(), vec!["t".to_string()]);
    assert_eq!(store.load_latest("t").unwrap(), None);
    assert!(store.list_checkpoints("t").unwrap().is_empty());
    assert_eq!(
        store.call_result("t", "c1").unwrap(),
        Some(b"sent".to_vec())
    );
    assert_eq!(store.call_result("t", "c2").unwrap(), None);
    assert_eq!(store.call_result("t", "nope").unwrap(), None);
    let pending = store.pending_calls("t").unwrap();
    let got: Vec<_> = pending
        .iter()
        .map(|p| (p.call_id.as_str(), p.tool.as_str(), &p.args[..]))
        .collect();
    assert_eq!(
        got,
        vec![
            ("c2", "charge_card", &b"42"[..]),
            ("c3", "search", &b""[..])
        ]
    );
    store.commit("t", &step(1)).unwrap();
    store.delete_task("t").unwrap();
    assert_eq!(store.call_result("t", "c1").unwrap(), None);
    assert!(store.pending_calls("t").unwrap().is_empty());
    assert!(store.tasks().unwrap().is_empty());
}

on_both!(
    delete_then_the_task_restarts_at_seq_1,
    super::Cfg {
        snapshot_every: 2,
        keep: None
    }
);
fn delete_then_the_task_restarts_at_seq_1(store: &impl TaskStore<AgentState>) {
    for i in 1..=5 {
        store.commit("t", &step(i)).unwrap();
    }
    store.commit("u", &step(1)).unwrap();
    store.delete_task("t").unwrap();
    assert!(matches!(
        store.delete_task("t"),
        Err(Error::UnknownTask { .. })
    ));
    assert!(matches!(
        store.delete_task("never"),
        Err(Error::UnknownTask { .. })
    ));
    assert_eq!(store.load_latest("t").unwrap(), None);
    assert_eq!(store.load("t", 1).unwrap(), None);
    assert_eq!(store.commit("t", &step(9)).unwrap(), 1);
    assert_eq!(
        store.tasks().unwrap(),
        vec!["t".to_string(), "u".to_string()]
    );
    let mut want = AgentState::default();
    want.apply(&step(9));
    assert_eq!(*store.load_latest("t").unwrap().unwrap().state, want);
    assert_eq!(store.list_checkpoints("t").unwrap().len(), 1);
}

on_both!(
    latest_info_names_the_newest_checkpoint,
    super::Cfg {
        snapshot_every: 3,
        keep: Some(2)
    }
);
/// `latest_info` is what a cache of a task is validated against: it must name the checkpoint
/// `load_latest` returns, move with every commit, fork and delete, and tell a task deleted
/// and committed to again apart by its time.
fn latest_info_names_the_newest_checkpoint(store: &impl TaskStore<AgentState>) {
    assert_eq!(store.latest_info("t").unwrap(), None);
    for i in 1..=5 {
        assert_eq!(store.commit("t", &step(i)).unwrap(), i);
        let info = store.latest_info("t").unwrap().unwrap();
        let latest = store.load_latest("t").unwrap().unwrap();
        assert_eq!(
            (info.seq, info.created_at_ms),
            (latest.seq, latest.created_at_ms)
        );
        assert_eq!(Some(&info), store.list_checkpoints("t").unwrap().last());
    }
    assert_eq!(store.fork("t", 5, "f").unwrap(), 1);
    let forked = store.latest_info("f").unwrap().unwrap();
    assert_eq!(
        (forked.seq, forked.forked_from),
        (1, Some(("t".to_string(), 5)))
    );
    let before = store.latest_info("t").unwrap().unwrap();
    store.delete_task("t").unwrap();
    assert_eq!(store.latest_info("t").unwrap(), None);
    std::thread::sleep(std::time::Duration::from_millis(2));
    for i in 1..=5 {
        store.commit("t", &step(i)).unwrap();
    }
    let again = store.latest_info("t").unwrap().unwrap();
    assert_eq!(again.seq, before.seq);
    assert!(again.created_at_ms > before.created_at_ms);
    assert!(matches!(
        store.latest_info(""),
        Err(Error::InvalidArgument(_))
    ));
}

on_both!(
    load_latest_matching_falls_back_past_unhealthy_states,
    super::DEFAULT
);
fn load_latest_matching_falls_back_past_unhealthy_states(store: &impl TaskStore<AgentState>) {
    for i in 1..=4 {
        store.commit("t", &step(i)).unwrap();
    }
    store
        .commit("t", &AgentDelta::default().set("broken", true))
        .unwrap();
    let ok = store
        .load_latest_matching("t", &|s: &AgentState| !s.vars.contains_key("broken"))
        .unwrap()
        .unwrap();
    assert_eq!(ok.seq, 4);
    assert!(
        store
            .load_latest_matching("t", &|_: &AgentState| false)
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .load_latest_matching("nope", &|_: &AgentState| true)
            .unwrap()
            .is_none()
    );
}

on_both!(
    retention_keeps_the_last_n_and_what_they_need,
    super::Cfg {
        snapshot_every: 3,
        keep: Some(4)
    }
);
fn retention_keeps_the_last_n_and_what_they_need(store: &impl TaskStore<AgentState>) {
    for i in 1..=20 {
        store.commit("t", &step(i)).unwrap();
        let infos = store.list_checkpoints("t").unwrap();
        let seqs: Vec<u64> = infos.iter().map(|c| c.seq).collect();
        let from = i.saturating_sub(3).max(1);
        assert_eq!(seqs, (from..=i).collect::<Vec<_>>(), "after commit {i}");
        // Every retained checkpoint still loads, to the exact state.
        for seq in from..=i {
            assert_eq!(*store.load("t", seq).unwrap().unwrap().state, expected(seq));
        }
        if from > 1 {
            assert_eq!(store.load("t", from - 1).unwrap(), None);
        }
    }
    assert!(matches!(
        store.fork("t", 2, "f"),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(store.fork("t", 18, "f").unwrap(), 1);
}

on_both!(bad_input_is_a_clear_error, super::DEFAULT);
fn bad_input_is_a_clear_error(store: &impl TaskStore<AgentState>) {
    let invalid = |r: agentwal::Result<u64>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(invalid(store.commit("", &step(1))));
    let long = "x".repeat(agentwal::TASK_ID_BYTES_MAX + 1);
    assert!(invalid(store.commit(&long, &step(1))));
    assert!(invalid(store.fork("a", 1, "")));
    assert!(matches!(
        store.begin_call("t", "", "x", b""),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        store.begin_call("t", "c", "", b""),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        store.load_latest(""),
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
    assert!(store.list_checkpoints("nope").unwrap().is_empty());
    // Ids are bytes as given: unusual ones round-trip.
    let odd = "tâche \u{1F600} \"quoted\"; DROP TABLE tasks; --";
    assert_eq!(store.commit(odd, &step(1)).unwrap(), 1);
    assert_eq!(
        store.tasks().unwrap(),
        vec!["t".to_string(), odd.to_string()]
    );
    // Values of every kind round-trip.
    let d = AgentDelta::default()
        .set("f", 1.5)
        .set("n", Value::Null)
        .set(
            "list",
            Value::List(vec![Value::from(1), Value::from("two")]),
        );
    store.commit("t", &d).unwrap();
    let mut want = expected(1);
    want.apply(&d);
    assert_eq!(*store.load_latest("t").unwrap().unwrap().state, want);
}

on_both!(
    loads_racing_commits_see_only_committed_states,
    super::Cfg {
        snapshot_every: 5,
        keep: None
    }
);
fn loads_racing_commits_see_only_committed_states(store: &impl TaskStore<AgentState>) {
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 1..=40 {
                store.commit("t", &step(i)).unwrap();
            }
        });
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..40 {
                    if let Some(cp) = store.load_latest("t").unwrap() {
                        assert_eq!(*cp.state, expected(cp.seq));
                    }
                }
            });
        }
    });
    assert_eq!(store.load_latest("t").unwrap().unwrap().seq, 40);
}

/// A body that does not decode as the program's state type (written by a program with
/// another one) is `Error::BodyDecode` on both backends, naming the checkpoint and where
/// its body is stored: never another error kind on one of them. `write` commits to the
/// backend with another state type; `reader` then reads what it wrote.
fn another_state_types_body_is_body_decode<R: TaskStore<AgentState>>(
    write: impl FnOnce(),
    reader: impl FnOnce() -> R,
    stored_here: fn(&BodyLocation) -> bool,
) {
    write();
    let reader = reader();
    for loaded in [reader.load_latest("t"), reader.load("t", 2)] {
        match loaded {
            Err(Error::BodyDecode {
                location,
                task,
                seq: 1,
                schema_version: 1,
                ..
            }) => {
                assert_eq!(task, "t");
                assert!(stored_here(&location), "{location:?}");
            }
            other => panic!("expected BodyDecode of checkpoint 1, got {other:?}"),
        }
    }
}

/// Commits two counter deltas to task "t" of `writer`.
fn commit_counters(writer: &impl TaskStore<CounterV1>) {
    writer.commit("t", &5).unwrap();
    writer.commit("t", &7).unwrap();
}

mod another_state_types_body_is_body_decode {
    use agentwal::{AgentState, BodyLocation, Store};

    use crate::common::states::CounterV1;

    #[test]
    fn local() {
        let dir = tempfile::tempdir().unwrap();
        super::another_state_types_body_is_body_decode(
            || {
                let writer: Store<CounterV1> = Store::open(dir.path()).unwrap();
                super::commit_counters(&writer);
            },
            || Store::<AgentState>::open(dir.path()).unwrap(),
            |at| matches!(at, BodyLocation::Log { offset, .. } if *offset > 0),
        );
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres() {
        use agentwal::postgres::{PgOptions, PgStore};
        let options = PgOptions {
            schema: crate::common::pg::fresh_schema("body_decode"),
            ..PgOptions::default()
        };
        let url = crate::common::pg::url();
        super::another_state_types_body_is_body_decode(
            || {
                let writer: PgStore<CounterV1> = PgStore::open(&url, options.clone()).unwrap();
                super::commit_counters(&writer);
            },
            || PgStore::<AgentState>::open(&url, options.clone()).unwrap(),
            |at| *at == BodyLocation::Postgres,
        );
    }
}
