//! The journal across restarts, `load_latest_matching`, the cache after a delete, loads
//! racing commits.

use agentwal::{AgentDelta, Error, Message, Options, Store};

use crate::{expected, step};

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
