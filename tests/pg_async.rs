//! The PostgreSQL backend from async code (`AsyncPgStore`, features `postgres` and
//! `tokio`): many tasks on a `current_thread` runtime complete (no call blocks its only
//! worker), calls in flight hold no thread of the caller's blocking pool (on either flavour
//! of runtime), leases fence through it as through the blocking handle, a commit future
//! dropped mid-flight leaves its commit whole or absent, and the last handle can be dropped
//! inside a runtime.
#![cfg(all(feature = "postgres", feature = "tokio"))]

mod common;

use std::sync::{Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use agentwal::postgres::{AsyncPgStore, PgOptions};
use agentwal::{AgentDelta, Error, Message};

fn step(task: &str, i: u64) -> AgentDelta {
    AgentDelta::default().message(Message::user(format!("{task} step {i}")))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn store(name: &str) -> AsyncPgStore {
    AsyncPgStore::from(common::pg::store(name, PgOptions::default()))
}

/// A turn for a test that opens tens of connections at once: such tests take turns, so
/// that together they stay under the server's 100 connections.
fn many_connections() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    // A test that failed holding the turn poisons it; the next one may still run.
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn many_tasks_on_one_runtime_thread_complete() {
    let _turn = many_connections();
    let store = store("async_many");
    let (tasks, steps) = (32u64, 5u64);
    runtime().block_on(async {
        let joins: Vec<_> = (0..tasks)
            .map(|t| {
                let store = store.clone();
                tokio::spawn(async move {
                    let task = format!("t{t}");
                    for i in 1..=steps {
                        let call = format!("c{i}");
                        store.begin_call(&task, &call, "tool", b"args").await?;
                        store.finish_call(&task, &call, b"done").await?;
                        assert_eq!(store.commit(&task, &step(&task, i)).await?, i);
                    }
                    Ok::<_, Error>(())
                })
            })
            .collect();
        let all = async {
            for j in joins {
                j.await
                    .expect("no task panicked")
                    .expect("every write succeeded");
            }
        };
        tokio::time::timeout(Duration::from_secs(120), all)
            .await
            .expect("finished: nothing blocked the runtime's only worker");
        assert_eq!(store.tasks().await.expect("tasks").len() as u64, tasks);
        let ones: Vec<String> = std::iter::once("t1".to_string())
            .chain((10..tasks.min(20)).map(|t| format!("t{t}")))
            .collect();
        assert_eq!(store.tasks_with_prefix("t1").await.expect("tasks"), ones);
        for t in 0..tasks {
            let task = format!("t{t}");
            let cp = store
                .load_latest(&task)
                .await
                .expect("load")
                .expect("exists");
            assert_eq!((cp.seq, cp.state.messages.len() as u64), (steps, steps));
            let result = store.call_result(&task, "c1").await.expect("read");
            assert_eq!(result, Some(b"done".to_vec()));
        }
    });
}

#[test]
fn a_taken_over_async_writer_is_fenced() {
    let store = store("async_fenced");
    runtime().block_on(async {
        let ttl = Duration::from_secs(60);
        let a = store.acquire("t", "worker-a", ttl).await.expect("acquire");
        let writer_a = store.with_lease(&a);
        assert_eq!(
            writer_a.commit("t", &step("t", 1)).await.expect("commit"),
            1
        );
        store.release(&a).await.expect("release");
        let b = store
            .acquire("t", "worker-b", ttl)
            .await
            .expect("take over");
        assert!(b.epoch > a.epoch);
        let refused = writer_a.commit("t", &step("t", 2)).await;
        assert!(matches!(refused, Err(Error::Fenced { .. })), "{refused:?}");
        let refused = writer_a.begin_call("t", "c", "tool", b"").await;
        assert!(matches!(refused, Err(Error::Fenced { .. })), "{refused:?}");
        let writer_b = store.with_lease(&b);
        assert_eq!(
            writer_b.commit("t", &step("t", 2)).await.expect("commit"),
            2
        );
        let cp = store.load_latest("t").await.expect("load").expect("exists");
        assert_eq!(cp.seq, 2);
    });
}

#[test]
fn a_dropped_commit_future_leaves_its_commit_whole_or_absent() {
    let store = store("async_dropped");
    let mut rng = common::rng::Rng(0x5EED);
    runtime().block_on(async {
        for _ in 0..40 {
            let latest = store
                .load_latest("t")
                .await
                .expect("load")
                .map_or(0, |c| c.seq);
            let delta = step("t", latest + 1);
            let budget = Duration::from_micros(rng.below(3_000));
            let _ = tokio::time::timeout(budget, store.commit_if("t", latest, &delta)).await;
            // A dropped commit still runs to its end on the handle's runtime: wait until the
            // task's history settles before the next one (or the next `commit_if` conflicts).
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let cp = store.load_latest("t").await.expect("load");
        let latest = cp.map_or(0, |c| c.seq);
        for seq in 1..=latest {
            let state = store
                .load("t", seq)
                .await
                .expect("load")
                .expect("retained")
                .state;
            assert_eq!(
                state.messages.len() as u64,
                seq,
                "seq {seq} holds exactly its steps"
            );
        }
        eprintln!("{latest} of 40 commits landed around dropped futures");
    });
}

/// Calls in flight at once in the tests of the blocking pool.
const CALLS: u64 = 64;

/// Runs `CALLS` concurrent calls on `rt` (each task a commit, then a load of it) while the
/// only thread `rt`'s blocking pool may have (`max_blocking_threads(1)`) is held by a task
/// that waits to be released; they must all complete before it is. A call that needed a
/// blocking-pool thread would wait behind that task until the timeout failed the test.
fn calls_complete_with_the_blocking_pool_held(rt: tokio::runtime::Runtime, name: &str) {
    let _turn = many_connections();
    let store = store(name);
    // Declared after `rt`, so dropped before it when a failure unwinds: the blocker then
    // ends, and dropping `rt` does not wait for it for ever.
    let (release, held) = std::sync::mpsc::channel::<()>();
    rt.block_on(async {
        let (started, running) = tokio::sync::oneshot::channel();
        let blocker = tokio::task::spawn_blocking(move || {
            let _ = started.send(());
            // Until released, or until the test fails and drops `release`.
            let _ = held.recv();
        });
        running
            .await
            .expect("the blocking pool's one thread runs the blocker");
        let calls: Vec<_> = (0..CALLS)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    let task = format!("t{i}");
                    let seq = store.commit(&task, &step(&task, 1)).await?;
                    let cp = store.load_latest(&task).await?;
                    Ok::<_, Error>((seq, cp.map(|c| c.seq)))
                })
            })
            .collect();
        let all = async {
            for call in calls {
                let outcome = call.await.expect("no call panicked");
                assert_eq!(outcome.expect("every call succeeded"), (1, Some(1)));
            }
        };
        tokio::time::timeout(Duration::from_secs(30), all)
            .await
            .expect("every call completed while the blocking pool's only thread was held");
        release.send(()).expect("the blocker still waits");
        blocker.await.expect("the blocker ended");
        assert_eq!(store.tasks().await.expect("tasks").len() as u64, CALLS);
    });
}

#[test]
fn calls_hold_no_blocking_thread_of_a_multi_thread_runtime() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    calls_complete_with_the_blocking_pool_held(rt, "async_no_blocking_multi");
}

#[test]
fn calls_hold_no_blocking_thread_of_a_current_thread_runtime() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    calls_complete_with_the_blocking_pool_held(rt, "async_no_blocking_current");
}

#[test]
fn the_last_handle_can_be_dropped_inside_a_runtime() {
    let options = PgOptions {
        schema: common::pg::fresh_schema("async_last_handle"),
        ..PgOptions::default()
    };
    let url = common::pg::url();
    runtime().block_on(async {
        let store: AsyncPgStore = AsyncPgStore::open(&url, options.clone())
            .await
            .expect("open");
        assert_eq!(store.commit("t", &step("t", 1)).await.expect("commit"), 1);
        // A commit whose future is dropped after its first poll, then the handle: the
        // commit's task goes on and, when it ends, drops the last handle on the handle's
        // own runtime. Polled once by hand: a zero timeout is no single poll (tokio rounds
        // its deadline up to the next millisecond, time enough for a whole commit). Should
        // the caller be descheduled long enough for the commit to end at that poll, the
        // next one is tried.
        let mut seq = 1;
        loop {
            seq += 1;
            let delta = step("t", seq);
            let mut commit = Box::pin(store.commit("t", &delta));
            let first = std::future::poll_fn(|cx| Poll::Ready(commit.as_mut().poll(cx))).await;
            match first {
                Poll::Pending => break,
                Poll::Ready(done) => {
                    assert_eq!(done.expect("commit"), seq);
                    assert!(seq < 12, "ten commits in a row ended at their first poll");
                }
            }
        }
        drop(store);
        let again: AsyncPgStore = AsyncPgStore::open(&url, options).await.expect("open again");
        let landed = async {
            loop {
                let info = again.latest_info("t").await.expect("latest info");
                if info.is_some_and(|i| i.seq == seq) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(20), landed)
            .await
            .expect("the commit whose future was dropped ran to its end");
        // The last handle, dropped in the caller's task.
        drop(again);
    });
}

/// `catch_up` from async code: the latest state, as a load reads it, built from a
/// checkpoint loaded before other commits.
#[test]
fn catch_up_from_async_code_gives_what_a_load_reads() {
    let options = PgOptions {
        schema: common::pg::fresh_schema("async_catch_up"),
        ..PgOptions::default()
    };
    let url = common::pg::url();
    runtime().block_on(async {
        let store: AsyncPgStore = AsyncPgStore::open(&url, options).await.expect("open");
        store.commit("t", &step("t", 1)).await.expect("commit");
        let base = store
            .load_latest("t")
            .await
            .expect("load")
            .expect("t exists");
        for n in 2..=6 {
            store.commit("t", &step("t", n)).await.expect("commit");
        }
        let up = store.catch_up(&base).await.expect("catch up");
        assert_eq!(up, store.load_latest("t").await.expect("load"));
        assert_eq!(up.map(|c| c.seq), Some(6));
    });
}
