//! The async API (`AsyncStore`, cargo feature `tokio`): what it promises beyond the
//! blocking API it mirrors (the model-based property test runs it too, in
//! `store_model/`).
//!
//! - No blocking call on a runtime worker: many tasks on a `current_thread` runtime, some
//!   writing one task together, complete, and share fsyncs (a commit that blocked the
//!   only worker would be alone in its batch);
//! - 1,000 concurrent tasks need no thread per waiting commit (`async_threads.rs`, a
//!   binary of its own, so that no other test's threads are counted);
//! - a commit future dropped mid-flight leaves its commit fully there or absent, and
//!   every acknowledged one there, after a reopen;
//! - the journal's fast paths and its blocking fallbacks answer as the blocking API does.
// Built only with the `tokio` feature (scripts/test.sh turns it on). No `[[test]]` entry
// with required-features: the Python sdist carries the manifest but not the tests.
#![cfg(feature = "tokio")]

mod common;

use std::time::Duration;

use agentwal::{AgentDelta, AsyncStore, Error, Message, Options, Store, SyncMode};
use common::rng::Rng;

fn step(task: &str, i: u64) -> AgentDelta {
    AgentDelta::default()
        .message(Message::user(format!("{task} step {i}")))
        .set("i", i as i64)
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Opens `dir`, retrying while the previous handle is still closing: a handle closes when
/// its last clone drops and the writes it queued are done.
fn reopen(dir: &std::path::Path) -> Store {
    for _ in 0..500 {
        match Store::open(dir) {
            Err(Error::Locked { .. }) => std::thread::sleep(Duration::from_millis(10)),
            other => return other.expect("reopen"),
        }
    }
    panic!("the store stayed locked for 5 s after its handles dropped");
}

#[test]
fn a_current_thread_runtime_drives_many_tasks_and_they_share_fsyncs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = current_thread();
    let (tasks, steps) = (200u64, 10u64);
    let store: AsyncStore = rt.block_on(AsyncStore::open(dir.path())).expect("open");
    let fsyncs_before = store.blocking().stats().fsyncs;
    rt.block_on(async {
        let mut joins = Vec::new();
        for t in 0..tasks {
            let store = store.clone();
            joins.push(tokio::spawn(async move {
                let task = format!("t{t}");
                for i in 1..=steps {
                    let call = format!("c{i}");
                    store.begin_call(&task, &call, "tool", b"args").await?;
                    store.finish_call(&task, &call, b"done").await?;
                    assert_eq!(store.commit(&task, &step(&task, i)).await?, i);
                }
                Ok::<_, Error>(())
            }));
        }
        // Four writers on one task: they wait for its gate without blocking the worker.
        for w in 0..4u64 {
            let store = store.clone();
            joins.push(tokio::spawn(async move {
                for i in 0..steps {
                    store.commit("shared", &step("shared", w * 100 + i)).await?;
                }
                Ok(())
            }));
        }
        let all = async {
            for j in joins {
                j.await
                    .expect("no task panicked")
                    .expect("every write succeeded");
            }
        };
        tokio::time::timeout(Duration::from_secs(120), all)
            .await
            .expect("finished: nothing blocked the only worker");
    });
    let commits = tasks * steps + 4 * steps;
    let writes = tasks * steps * 2 + commits;
    let fsyncs = store.blocking().stats().fsyncs - fsyncs_before;
    eprintln!("{writes} durable writes on one runtime thread took {fsyncs} fsyncs");
    assert!(
        fsyncs * 4 <= writes,
        "{fsyncs} fsyncs for {writes} writes: concurrent async writes must share batches"
    );
    let latest = rt
        .block_on(store.load_latest("shared"))
        .expect("load")
        .expect("exists");
    assert_eq!(latest.seq, 4 * steps);
    assert_eq!(latest.state.messages.len() as u64, 4 * steps);
    drop(store);
    let reopened = reopen(dir.path());
    for t in 0..tasks {
        let task = format!("t{t}");
        let cp = reopened.load_latest(&task).expect("load").expect("exists");
        assert_eq!(cp.seq, steps, "{task}");
        assert_eq!(
            reopened.call_result(&task, "c1").expect("read"),
            Some(b"done".to_vec())
        );
    }
}

#[test]
fn a_dropped_commit_future_leaves_its_commit_whole_or_absent() {
    let mut rng = Rng(0xA5F0);
    for round in 0..20u64 {
        let dir = tempfile::tempdir().expect("tempdir");
        let rt = current_thread();
        let acked: Vec<u64> = rt.block_on(async {
            let store: AsyncStore = AsyncStore::open(dir.path()).await.expect("open");
            let mut acked = vec![0u64; 8];
            for i in 1..=30u64 {
                for (t, seen) in acked.iter_mut().enumerate() {
                    let task = format!("t{t}");
                    let delta = step(&task, i);
                    let commit = store.commit(&task, &delta);
                    // Give some commits no time at all, some a little, some enough.
                    let budget = Duration::from_micros(rng.below(400));
                    match tokio::time::timeout(budget, commit).await {
                        Ok(seq) => *seen = seq.expect("commit"),
                        Err(_) => {
                            // Dropped: its outcome is unknown. Later commits of the task
                            // follow whatever it did; learn the seq it left.
                            let latest = store.load_latest(&task).await.expect("load");
                            *seen = latest.map_or(0, |cp| cp.seq);
                        }
                    }
                }
            }
            acked
        });
        let store = reopen(dir.path());
        for (t, &acked_seq) in acked.iter().enumerate() {
            let task = format!("t{t}");
            let Some(cp) = store.load_latest(&task).expect("load") else {
                assert_eq!(acked_seq, 0, "round {round}: {task} lost");
                continue;
            };
            assert!(
                cp.seq >= acked_seq,
                "round {round}: {task} lost an acknowledged commit"
            );
            // Whole: every seq loads, and its state holds exactly the steps up to it.
            for seq in 1..=cp.seq {
                let state = store
                    .load(&task, seq)
                    .expect("load")
                    .expect("retained")
                    .state;
                assert_eq!(
                    state.messages.len() as u64,
                    seq,
                    "round {round}: {task} @ {seq}"
                );
            }
        }
        store.verify().expect("verify");
    }
}

#[test]
fn journal_fast_paths_and_fallbacks_answer_like_the_blocking_api() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = current_thread();
    rt.block_on(async {
        let store: AsyncStore = AsyncStore::open(dir.path()).await.expect("open");
        store
            .begin_call("t", "c", "tool", b"a")
            .await
            .expect("begin");
        // Again, the same: a no-op, through the blocking fallback (compared with disk).
        store
            .begin_call("t", "c", "tool", b"a")
            .await
            .expect("same begin");
        let other = store.begin_call("t", "c", "tool", b"b").await;
        assert!(matches!(other, Err(Error::InvalidArgument(_))), "{other:?}");
        assert_eq!(store.pending_calls("t").await.expect("pending").len(), 1);
        store.finish_call("t", "c", b"r").await.expect("finish");
        store
            .finish_call("t", "c", b"r")
            .await
            .expect("same result");
        let other = store.finish_call("t", "c", b"x").await;
        assert!(matches!(other, Err(Error::InvalidArgument(_))), "{other:?}");
        let never = store.finish_call("t", "nope", b"x").await;
        assert!(matches!(never, Err(Error::InvalidArgument(_))), "{never:?}");
        let unknown = store.finish_call("ghost", "c", b"x").await;
        assert!(
            matches!(unknown, Err(Error::UnknownTask { .. })),
            "{unknown:?}"
        );
        assert_eq!(
            store.call_result("t", "c").await.expect("read"),
            Some(b"r".to_vec())
        );
        // Failed writes on new tasks leave no slot behind, as blocking ones do.
        let slots = store.blocking().index_slots();
        let conflict = store.commit_if("new", 3, &step("new", 1)).await;
        assert!(
            matches!(conflict, Err(Error::Conflict { .. })),
            "{conflict:?}"
        );
        let never = store.finish_call("new", "c", b"x").await;
        assert!(matches!(never, Err(Error::UnknownTask { .. })), "{never:?}");
        assert_eq!(
            store.blocking().index_slots(),
            slots,
            "a failed write left a slot"
        );
        let conflict = store.commit_if("t", 5, &step("t", 1)).await;
        assert!(
            matches!(conflict, Err(Error::Conflict { .. })),
            "{conflict:?}"
        );
        assert_eq!(
            store
                .commit_if("t", 0, &step("t", 1))
                .await
                .expect("commit"),
            1
        );
        let long = "x".repeat(agentwal::TASK_ID_BYTES_MAX + 1);
        let too_long = store.commit(&long, &step("t", 1)).await;
        assert!(
            matches!(too_long, Err(Error::InvalidArgument(_))),
            "{too_long:?}"
        );
        assert_eq!(store.fork("t", 1, "f").await.expect("fork"), 1);
        store.delete_task("t").await.expect("delete");
        assert_eq!(store.tasks().await.expect("tasks"), vec!["f".to_string()]);
        assert_eq!(store.tasks_with_prefix("f").await.expect("tasks"), ["f"]);
        assert!(
            store
                .tasks_with_prefix("t")
                .await
                .expect("tasks")
                .is_empty()
        );
    });
    // A read-only view beside the writer: reads work, writes say why not.
    let ro: AsyncStore = rt
        .block_on(AsyncStore::open_read_only(dir.path()))
        .expect("a read-only view");
    rt.block_on(async {
        let cp = ro.load_latest("f").await.expect("load").expect("exists");
        assert_eq!(cp.seq, 1);
        let refused = ro.commit("f", &step("f", 2)).await;
        assert!(matches!(refused, Err(Error::ReadOnly)), "{refused:?}");
        let refused = ro.begin_call("f", "c", "tool", b"").await;
        assert!(matches!(refused, Err(Error::ReadOnly)), "{refused:?}");
    });
}

#[test]
fn commits_that_must_fold_from_disk_take_the_blocking_path_and_stay_correct() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = current_thread();
    // No cache: every snapshot-due commit must fold the state from disk first.
    let options = Options {
        cache_bytes: 0,
        snapshot_every: 3,
        sync: SyncMode::Never,
        ..Options::default()
    };
    rt.block_on(async {
        let store: AsyncStore = AsyncStore::open_with(dir.path(), options)
            .await
            .expect("open");
        for i in 1..=20 {
            assert_eq!(store.commit("t", &step("t", i)).await.expect("commit"), i);
        }
        let cp = store.load_latest("t").await.expect("load").expect("exists");
        assert_eq!(cp.state.messages.len(), 20);
        let snapshots = store
            .list_checkpoints("t")
            .await
            .expect("list")
            .iter()
            .filter(|c| c.snapshot)
            .count();
        assert!(snapshots >= 5, "snapshots were written: {snapshots}");
    });
}
