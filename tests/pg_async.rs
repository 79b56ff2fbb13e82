//! The PostgreSQL backend from async code (`AsyncPgStore`, features `postgres` and
//! `tokio`): many tasks on a `current_thread` runtime complete (no call blocks its only
//! worker), leases fence through it as through the blocking handle, and a commit future
//! dropped mid-flight leaves its commit whole or absent.
#![cfg(all(feature = "postgres", feature = "tokio"))]

mod common;

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

#[test]
fn many_tasks_on_one_runtime_thread_complete() {
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
            // A dropped commit still runs to its end on the blocking pool: wait until the
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
