//! The journal, `load_latest_matching`, retention, bad input and odd ids, loads racing
//! commits, and another state type's bodies.

use crate::common::states::CounterV1;
use agentwal::{AgentDelta, AgentState, BodyLocation, Error, State, TaskStore, Value};

use crate::{expected, step};
// Reached through `super::` by what `on_both!` expands to.
#[cfg(feature = "postgres")]
use crate::pg;
use crate::{Cfg, DEFAULT, local};

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
