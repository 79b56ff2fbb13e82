//! 1,000 concurrent async tasks, each committing, on a 2-worker runtime: the writes wait
//! for their batches without a thread each. A test binary of its own, so that the
//! process's thread count is this test's alone.
// Built only with the `tokio` feature (scripts/test.sh turns it on). No `[[test]]` entry
// with required-features: the Python sdist carries the manifest but not the tests.
#![cfg(feature = "tokio")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agentwal::{AgentDelta, AsyncStore, Error, Message, Options};

fn threads_now() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

#[test]
fn a_thousand_concurrent_tasks_need_no_thread_each() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let options = Options {
        auto_compact: false,
        ..Options::default()
    };
    let store: AsyncStore = rt
        .block_on(AsyncStore::open_with(dir.path(), options))
        .expect("open");
    let before = threads_now();
    let peak = Arc::new(AtomicUsize::new(before));
    rt.block_on(async {
        let sampler = {
            let peak = peak.clone();
            tokio::spawn(async move {
                loop {
                    peak.fetch_max(threads_now(), Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            })
        };
        let joins: Vec<_> = (0..1_000u64)
            .map(|t| {
                let store = store.clone();
                tokio::spawn(async move {
                    let task = format!("t{t}");
                    for i in 1..=5 {
                        store
                            .commit(
                                &task,
                                &AgentDelta::default()
                                    .message(Message::user(format!("{task} {i}"))),
                            )
                            .await?;
                    }
                    Ok::<_, Error>(())
                })
            })
            .collect();
        for j in joins {
            j.await.expect("no panic").expect("committed");
        }
        sampler.abort();
    });
    let peak = peak.load(Ordering::Relaxed);
    eprintln!("threads: {before} before, at most {peak} during 1,000 concurrent tasks");
    // The runtime's 2 workers existed before; the syncer is the one thread the writes add
    // (the blocking pool, capped at 2 here, must not be needed at all).
    assert!(
        peak <= before + 1,
        "{peak} threads during the run, {before} before: waiting commits must not hold threads"
    );
    assert_eq!(store.blocking().stats().commits, 5_000);
}
