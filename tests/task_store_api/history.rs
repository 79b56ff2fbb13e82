//! Commits and loads of every seq under both snapshot rules, contending threads,
//! `commit_if`, fork, delete and restart, `latest_info`.

use std::collections::HashMap;

use agentwal::{AgentDelta, AgentState, Error, Message, State, TaskStore};

use crate::{expected, step};
// Reached through `super::` by what `on_both!` expands to.
#[cfg(feature = "postgres")]
use crate::pg;
use crate::{Cfg, DEFAULT, local};

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
