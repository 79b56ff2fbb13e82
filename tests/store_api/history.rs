//! Commits, loads and reopens, concurrent writers, conflicts, forks and deletes.

use crate::common::newest_segment;
use agentwal::{AgentDelta, AgentState, Error, Message, Options, State, Store};

use crate::{expected, step};

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
