//! The child: its writer threads (or async tasks), the big task and its forks, the
//! journal calls, and the acks it prints.

use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use agentwal::{Error, Store};

use crate::workload::{
    ACK, BIG_TASK, CALL_EVERY, CHILD_DEADLINE, Chain, FORK_EVERY, FORKS_KEPT, SHARED_TASK, TOOL,
    call_args, call_id, call_result, delta, fork_name, owned_tasks,
};

/// Grows `big`; at every `FORK_EVERY`th seq forks it, commits the fork's seq 2, deletes
/// an older fork and compacts. A resumed child first finishes the fork of the seq it
/// stopped at.
pub(crate) fn big_writer(store: &Store<Chain>, started: Instant) {
    let mut seq = latest(store, BIG_TASK);
    if seq > 0 && seq.is_multiple_of(FORK_EVERY) {
        fork_big(store, seq);
    }
    loop {
        if started.elapsed() > CHILD_DEADLINE {
            fail_child("deadline passed without being killed");
        }
        seq += 1;
        match store.commit(BIG_TASK, &delta(BIG_TASK, seq)) {
            Ok(got) if got == seq => ack(&format!("C {BIG_TASK} {seq}")),
            Ok(got) => fail_child(&format!("commit to {BIG_TASK} returned {got}, not {seq}")),
            Err(e) => fail_child(&format!("commit {BIG_TASK} {seq}: {e}")),
        }
        if seq.is_multiple_of(FORK_EVERY) {
            fork_big(store, seq);
        }
    }
}

/// Forks `big` at `at` (unless that fork exists), commits the fork's seq 2 (unless
/// done), deletes the fork `FORKS_KEPT` forks older (if still there), compacts.
fn fork_big(store: &Store<Chain>, at: u64) {
    let name = fork_name(at);
    if latest(store, &name) == 0 {
        match store.fork(BIG_TASK, at, &name) {
            Ok(1) => ack(&format!("K {name} {at}")),
            Ok(got) => fail_child(&format!("fork {name} returned {got}")),
            Err(e) => fail_child(&format!("fork {name}: {e}")),
        }
    }
    if latest(store, &name) == 1 {
        match store.commit(&name, &delta(&name, 2)) {
            Ok(2) => ack(&format!("C {name} 2")),
            Ok(got) => fail_child(&format!("commit to {name} returned {got}, not 2")),
            Err(e) => fail_child(&format!("commit {name} 2: {e}")),
        }
    }
    if let Some(old) = at.checked_sub(FORKS_KEPT * FORK_EVERY).filter(|&o| o > 0) {
        let old = fork_name(old);
        match store.delete_task(&old) {
            Ok(()) => ack(&format!("D {old} 0")),
            Err(Error::UnknownTask { .. }) => {} // deleted before a kill
            Err(e) => fail_child(&format!("delete {old}: {e}")),
        }
    }
    match store.compact() {
        // "Retry later": a pass that met a record being indexed.
        Ok(_) | Err(Error::InvalidArgument(_)) => {}
        Err(e) => fail_child(&format!("compact: {e}")),
    }
}

pub(crate) fn child_thread(
    store: &Store<Chain>,
    thread: usize,
    shared: &AtomicU64,
    started: Instant,
) {
    let tasks = owned_tasks(thread);
    let mut next: Vec<u64> = tasks.iter().map(|t| latest(store, t) + 1).collect();
    loop {
        if started.elapsed() > CHILD_DEADLINE {
            fail_child("deadline passed without being killed");
        }
        for (task, seq) in tasks.iter().zip(next.iter_mut()) {
            if (*seq).is_multiple_of(CALL_EVERY) {
                journal_call(store, task, *seq);
            }
            match store.commit(task, &delta(task, *seq)) {
                Ok(got) if got == *seq => ack(&format!("C {task} {seq}")),
                Ok(got) => fail_child(&format!("commit to {task} returned {got}, not {seq}")),
                Err(e) => fail_child(&format!("commit {task} {seq}: {e}")),
            }
            *seq += 1;
        }
        let expected = shared.load(Ordering::SeqCst);
        let seq = expected + 1;
        match store.commit_if(SHARED_TASK, expected, &delta(SHARED_TASK, seq)) {
            Ok(got) if got == seq => {
                ack(&format!("C {SHARED_TASK} {seq}"));
                shared.fetch_max(seq, Ordering::SeqCst);
            }
            Ok(got) => fail_child(&format!("commit_if returned {got}, not {seq}")),
            Err(Error::Conflict { actual, .. }) => {
                shared.fetch_max(actual, Ordering::SeqCst);
            }
            Err(e) => fail_child(&format!("commit_if {SHARED_TASK} {seq}: {e}")),
        }
    }
}

/// Journals the tool call of `seq` (resuming a begun one, skipping a finished one).
fn journal_call(store: &Store<Chain>, task: &str, seq: u64) {
    let id = call_id(seq);
    match store.call_result(task, &id) {
        Ok(Some(_)) => return,
        Ok(None) => {}
        Err(e) => fail_child(&format!("call_result {task} {seq}: {e}")),
    }
    if let Err(e) = store.begin_call(task, &id, TOOL, &call_args(task, seq)) {
        fail_child(&format!("begin_call {task} {seq}: {e}"));
    }
    ack(&format!("B {task} {seq}"));
    if seq.is_multiple_of(2 * CALL_EVERY) {
        if let Err(e) = store.finish_call(task, &id, &call_result(task, seq)) {
            fail_child(&format!("finish_call {task} {seq}: {e}"));
        }
        ack(&format!("F {task} {seq}"));
    }
}

pub(crate) fn latest(store: &Store<Chain>, task: &str) -> u64 {
    match store.load_latest(task) {
        Ok(cp) => cp.map_or(0, |c| c.seq),
        Err(e) => fail_child(&format!("load_latest {task}: {e}")),
    }
}

/// Prints one acknowledgement line with a single write, and flushes it.
pub(crate) fn ack(line: &str) {
    static OUT: Mutex<()> = Mutex::new(());
    let _one_at_a_time = OUT.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = std::io::stdout().lock();
    let ok = out.write_all(format!("{ACK}{line}\n").as_bytes()).is_ok() && out.flush().is_ok();
    if !ok {
        std::process::exit(5); // the parent is gone
    }
}

pub(crate) fn fail_child(why: &str) -> ! {
    eprintln!("child error: {why}");
    std::process::exit(3);
}

/// The child's writers as tasks on a tokio runtime, through the async API: the same
/// steps, acks and failures as `child_thread` and `journal_call`.
#[cfg(feature = "tokio")]
pub(crate) mod async_child {
    use super::*;
    use crate::workload::THREADS;
    use agentwal::AsyncStore;
    use std::sync::Arc;

    pub fn run(store: Store<Chain>, started: Instant) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| fail_child(&format!("runtime: {e}")));
        let shared = Arc::new(AtomicU64::new(latest(&store, SHARED_TASK)));
        let store = AsyncStore::from(store);
        rt.block_on(async {
            let writers: Vec<_> = (0..THREADS)
                .map(|t| tokio::spawn(writer(store.clone(), t, shared.clone(), started)))
                .collect();
            for w in writers {
                if w.await.is_err() {
                    fail_child("a writer task panicked");
                }
            }
        });
    }

    async fn writer(
        store: AsyncStore<Chain>,
        thread: usize,
        shared: Arc<AtomicU64>,
        started: Instant,
    ) {
        let tasks = owned_tasks(thread);
        let mut next: Vec<u64> = tasks
            .iter()
            .map(|t| latest(store.blocking(), t) + 1)
            .collect();
        loop {
            if started.elapsed() > CHILD_DEADLINE {
                fail_child("deadline passed without being killed");
            }
            for (task, seq) in tasks.iter().zip(next.iter_mut()) {
                if (*seq).is_multiple_of(CALL_EVERY) {
                    journal_call(&store, task, *seq).await;
                }
                match store.commit(task, &delta(task, *seq)).await {
                    Ok(got) if got == *seq => ack(&format!("C {task} {seq}")),
                    Ok(got) => fail_child(&format!("commit to {task} returned {got}, not {seq}")),
                    Err(e) => fail_child(&format!("commit {task} {seq}: {e}")),
                }
                *seq += 1;
            }
            let expected = shared.load(Ordering::SeqCst);
            let seq = expected + 1;
            match store
                .commit_if(SHARED_TASK, expected, &delta(SHARED_TASK, seq))
                .await
            {
                Ok(got) if got == seq => {
                    ack(&format!("C {SHARED_TASK} {seq}"));
                    shared.fetch_max(seq, Ordering::SeqCst);
                }
                Ok(got) => fail_child(&format!("commit_if returned {got}, not {seq}")),
                Err(Error::Conflict { actual, .. }) => {
                    shared.fetch_max(actual, Ordering::SeqCst);
                }
                Err(e) => fail_child(&format!("commit_if {SHARED_TASK} {seq}: {e}")),
            }
        }
    }

    async fn journal_call(store: &AsyncStore<Chain>, task: &str, seq: u64) {
        let id = call_id(seq);
        match store.call_result(task, &id).await {
            Ok(Some(_)) => return,
            Ok(None) => {}
            Err(e) => fail_child(&format!("call_result {task} {seq}: {e}")),
        }
        if let Err(e) = store
            .begin_call(task, &id, TOOL, &call_args(task, seq))
            .await
        {
            fail_child(&format!("begin_call {task} {seq}: {e}"));
        }
        ack(&format!("B {task} {seq}"));
        if seq.is_multiple_of(2 * CALL_EVERY) {
            if let Err(e) = store.finish_call(task, &id, &call_result(task, seq)).await {
                fail_child(&format!("finish_call {task} {seq}: {e}"));
            }
            ack(&format!("F {task} {seq}"));
        }
    }
}

#[cfg(not(feature = "tokio"))]
pub(crate) mod async_child {
    use super::*;

    pub fn run(_: Store<Chain>, _: Instant) {
        fail_child("asked for the async API, built without the tokio feature");
    }
}
