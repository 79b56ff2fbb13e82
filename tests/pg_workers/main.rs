//! Two worker processes contending for tasks through leases, on the PostgreSQL backend,
//! while one of them is SIGKILLed at random moments and restarted, or frozen (SIGSTOP)
//! past its lease's ttl and resumed.
//!
//! Each worker (a child re-executing this test binary) loops over the unfinished tasks in
//! random order: it acquires a task's lease (skipping a task whose lease is held), loads
//! the task and runs its remaining steps. A step is a tool call through the journal whose
//! side effect appends a line to the task's outbox file, keyed by the call id: the worker
//! reads `call_result` first, else `begin_call`s (idempotent for a pending call), sends
//! through the outbox *unless the outbox already has the call* (the call was left pending
//! by a killed worker after its effect), `finish_call`s, then `commit_if`s the step and
//! renews the lease. The outbox plays an external system that honours fencing tokens: a
//! line carries the lease epoch, and a send under an epoch older than one the outbox has
//! seen for the task is refused. A worker that meets `Error::Fenced` (or any failure)
//! drops the task and goes on with others; it releases a task's lease when its last step
//! is committed.
//!
//! At the end: every task has all its steps committed, in order, loadable at each seq;
//! each call has its result and no call is pending; each task's outbox holds each call
//! exactly once; no (task, seq) was acknowledged twice and each acknowledged step is the
//! one in the history, under the epoch it was acknowledged with; epochs never go back in
//! a task's history; and every commit refused with `Fenced` is absent (the step at that
//! seq was written under another epoch).
//!
//! Size: `AGENTWAL_PG_WORKERS_TASKS` tasks (default 100) of `AGENTWAL_PG_WORKERS_STEPS`
//! steps (default 5), CI's budget. A longer run:
//! `AGENTWAL_PG_WORKERS_TASKS=1000 AGENTWAL_PG_WORKERS_STEPS=10 cargo test --release
//! --features postgres --test pg_workers -- --nocapture` (with a cluster from
//! `scripts/pg-cluster.sh`).

#![cfg(feature = "postgres")]

#[path = "../common/mod.rs"]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use agentwal::postgres::PgStore;
use agentwal::{AgentState, Checkpoint, Error};
use common::pg::{probe_seed as seed, signal};
use common::rng::Rng;

mod worker;

use worker::{
    Dropped, MARK, NAME_ENV, OUTBOX_ENV, SCHEMA_ENV, TTL, call_id, call_result, options,
    parse_step, say, steps, task_name, tasks, work,
};

/// Child mode: runs only when the parent sets `AGENTWAL_PG_WORKER_SCHEMA`. Exits when
/// every task is complete.
#[test]
fn child_worker() {
    let Ok(schema) = std::env::var(SCHEMA_ENV) else {
        return;
    };
    let outbox = PathBuf::from(std::env::var(OUTBOX_ENV).expect("worker: the outbox dir"));
    let name = std::env::var(NAME_ENV).expect("worker: its name");
    let (tasks, steps) = (tasks(), steps());
    let store: PgStore =
        PgStore::open(&common::pg::url(), options(schema)).expect("worker: open a PgStore");
    let mut rng = Rng(seed() ^ u64::from(std::process::id()));
    let mut done = vec![false; tasks as usize];
    while done.iter().any(|d| !d) {
        // Tasks in progress first (a killed or frozen worker's, whose lease may have run
        // out), then the others, each group in random order.
        let mut started = Vec::new();
        let mut fresh = Vec::new();
        let open: Vec<u64> = (0..tasks).filter(|&i| !done[i as usize]).collect();
        for i in open {
            match store.load_latest(&task_name(i)) {
                Ok(Some(cp)) if cp.seq == steps => done[i as usize] = true,
                Ok(Some(_)) => started.push(i),
                Ok(None) => fresh.push(i),
                Err(e) => say(&format!("error load {}: {e}", task_name(i))),
            }
        }
        let mut worked = false;
        for mut group in [started, fresh] {
            for i in (1..group.len()).rev() {
                group.swap(i, rng.below(i as u64 + 1) as usize);
            }
            for i in group {
                let task = task_name(i);
                let lease = match store.acquire(&task, &name, TTL) {
                    Ok(lease) => lease,
                    Err(Error::LeaseHeld { .. }) => continue,
                    Err(e) => {
                        say(&format!("error acquire {task}: {e}"));
                        continue;
                    }
                };
                worked = true;
                match work(&store, &lease, steps, &outbox, &mut rng) {
                    Ok(()) => done[i as usize] = true,
                    Err(Dropped::Fenced(op, k)) => {
                        say(&format!("fenced {task} {} {op} {k}", lease.epoch))
                    }
                    Err(Dropped::Other(e)) => say(&format!("error {task}: {e}")),
                }
                // Back to the tasks in progress first.
                break;
            }
            if worked {
                break;
            }
        }
        if !worked {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    say("done");
}

// ---------------------------------------------------------------------------------------
// The parent

struct Worker {
    child: Child,
    lines: JoinHandle<Vec<String>>,
    /// The same lines as they come.
    live: Receiver<String>,
}

fn spawn_worker(schema: &str, outbox: &Path, name: &str) -> Worker {
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "child_worker", "--nocapture", "--test-threads=1"])
        .env(SCHEMA_ENV, schema)
        .env(OUTBOX_ENV, outbox)
        .env(NAME_ENV, name)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn a worker");
    let stdout = child.stdout.take().expect("a worker's stdout");
    let (tx, live) = channel();
    let lines = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(|l| l.ok())
            .filter_map(|l| l.find(MARK).map(|at| l[at + MARK.len()..].to_string()))
            .inspect(|l| {
                let _ = tx.send(l.clone());
            })
            .collect()
    });
    Worker { child, lines, live }
}

#[test]
fn two_workers_contend_for_tasks_through_leases() {
    let seed = seed();
    let mut rng = Rng(seed);
    let ctx = format!("two workers (AGENTWAL_PG_PROBE_SEED={seed})");
    let (tasks, steps) = (tasks(), steps());
    let store: PgStore = common::pg::store("workers", options(String::new()));
    let schema = store.options().schema.clone();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let outbox = dir.path().join("outbox");
    std::fs::create_dir(&outbox).expect("create the outbox dir");
    let started = Instant::now();
    let limit = Duration::from_secs(60) + Duration::from_millis(30 * tasks * steps);

    let mut stable = spawn_worker(&schema, &outbox, "a");
    let mut victim = Some(spawn_worker(&schema, &outbox, "b0"));
    let (mut kills, mut freezes) = (0u64, 0u64);
    let mut lines: Vec<String> = Vec::new();
    loop {
        std::thread::sleep(Duration::from_millis(50 + rng.below(250)));
        if stable.child.try_wait().expect("poll worker a").is_some() {
            break;
        }
        assert!(started.elapsed() < limit, "{ctx}: not done after {limit:?}");
        let Some(v) = victim.as_mut() else { continue };
        if v.child.try_wait().expect("poll worker b").is_some() {
            // It finished the last tasks itself.
            let v = victim.take().expect("the victim");
            lines.extend(v.lines.join().expect("worker b's reader"));
            continue;
        }
        if rng.below(4) == 0 {
            // Frozen past its lease while it thinks, holding no row lock: the other
            // worker takes its task over, and what it does on waking must be refused.
            while v.live.try_recv().is_ok() {}
            let thinking = v
                .live
                .recv_timeout(Duration::from_secs(1))
                .is_ok_and(|l| l.starts_with("think"))
                || v.live.iter().take(50).any(|l| l.starts_with("think"));
            if !thinking {
                continue;
            }
            let pid = v.child.id();
            signal("-STOP", &[pid.to_string()]);
            std::thread::sleep(TTL + Duration::from_millis(200 + rng.below(500)));
            signal("-CONT", &[pid.to_string()]);
            freezes += 1;
        } else {
            let mut v = victim.take().expect("the victim");
            v.child.kill().expect("kill worker b");
            v.child.wait().expect("reap worker b");
            lines.extend(v.lines.join().expect("worker b's reader"));
            kills += 1;
            victim = Some(spawn_worker(&schema, &outbox, &format!("b{kills}")));
        }
    }
    assert!(
        stable.child.wait().expect("reap worker a").success(),
        "{ctx}: worker a failed"
    );
    lines.extend(stable.lines.join().expect("worker a's reader"));
    if let Some(mut v) = victim {
        // Every task is complete: it finishes its pass and exits.
        let until = Instant::now() + Duration::from_secs(30);
        while v.child.try_wait().expect("poll worker b").is_none() {
            assert!(Instant::now() < until, "{ctx}: worker b did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            v.child.wait().expect("reap worker b").success(),
            "{ctx}: worker b failed"
        );
        lines.extend(v.lines.join().expect("worker b's reader"));
    }
    let elapsed = started.elapsed();

    // What the workers reported.
    let mut acks: BTreeMap<(String, u64), u64> = BTreeMap::new();
    let mut fenced: Vec<(String, u64, String, u64)> = Vec::new();
    let mut errors = 0;
    for line in &lines {
        let w: Vec<&str> = line.split(' ').collect();
        match w[0] {
            "ack" => {
                let key = (w[1].to_string(), w[2].parse().expect("an ack's seq"));
                let epoch = w[3].parse().expect("an ack's epoch");
                assert!(
                    acks.insert(key.clone(), epoch).is_none(),
                    "{ctx}: {key:?} acknowledged twice (a seq written twice)"
                );
            }
            "fenced" => fenced.push((
                w[1].to_string(),
                w[2].parse().expect("a fenced epoch"),
                w[3].to_string(),
                w[4].parse().expect("a fenced step"),
            )),
            "error" => errors += 1,
            "done" | "think" => {}
            _ => panic!("{ctx}: a worker said {line:?}"),
        }
    }

    // The database and the outboxes.
    let steps_of = |cp: &Checkpoint<AgentState>| -> Vec<(u64, String, u64)> {
        cp.state.messages.iter().map(parse_step).collect()
    };
    let mut histories: BTreeMap<String, Vec<(u64, String, u64)>> = BTreeMap::new();
    for i in 0..tasks {
        let task = task_name(i);
        let cp = store
            .load_latest(&task)
            .expect("load_latest")
            .unwrap_or_else(|| panic!("{ctx}: {task} has no checkpoint"));
        assert_eq!(cp.seq, steps, "{ctx}: {task} is not complete");
        let history = steps_of(&cp);
        for (at, (k, call, _)) in history.iter().enumerate() {
            assert_eq!(*k, at as u64 + 1, "{ctx}: {task}'s history: {history:?}");
            assert_eq!(*call, call_id(&task, *k), "{ctx}: {task}");
        }
        assert!(
            history.windows(2).all(|w| w[0].2 <= w[1].2),
            "{ctx}: {task}: an older epoch landed after a newer one: {history:?}"
        );
        for seq in 1..=steps {
            let at = store
                .load(&task, seq)
                .expect("load")
                .unwrap_or_else(|| panic!("{ctx}: {task} seq {seq} does not load"));
            assert_eq!(
                steps_of(&at),
                history[..seq as usize],
                "{ctx}: {task} seq {seq}"
            );
        }
        for k in 1..=steps {
            let call = call_id(&task, k);
            assert_eq!(
                store.call_result(&task, &call).expect("call_result"),
                Some(call_result(&call)),
                "{ctx}: {call}'s result"
            );
        }
        assert!(
            store
                .pending_calls(&task)
                .expect("pending_calls")
                .is_empty(),
            "{ctx}: {task} has pending calls"
        );
        let path = outbox.join(format!("{task}.txt"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read the outbox {}: {e}", path.display()));
        let sent: Vec<&str> = text
            .lines()
            .map(|l| l.split_once(' ').expect("an outbox line").0)
            .collect();
        let unique: BTreeSet<&str> = sent.iter().copied().collect();
        assert_eq!(
            unique.len(),
            sent.len(),
            "{ctx}: {task}: a side effect happened twice: {sent:?}"
        );
        let expected: BTreeSet<String> = (1..=steps).map(|k| call_id(&task, k)).collect();
        assert_eq!(
            unique
                .iter()
                .map(|s| s.to_string())
                .collect::<BTreeSet<String>>(),
            expected,
            "{ctx}: {task}'s outbox"
        );
        histories.insert(task, history);
    }
    for ((task, seq), epoch) in &acks {
        let (_, _, landed) = &histories[task][*seq as usize - 1];
        assert_eq!(
            landed, epoch,
            "{ctx}: {task} seq {seq} was acknowledged under epoch {epoch}, the history has {landed}"
        );
    }
    // A fenced commit never landed: its step is there under another epoch.
    let mut by_op: BTreeMap<&str, u64> = BTreeMap::new();
    for (task, epoch, op, k) in &fenced {
        *by_op.entry(op.as_str()).or_default() += 1;
        if op == "commit" {
            let (_, _, landed) = &histories[task][*k as usize - 1];
            assert_ne!(
                landed, epoch,
                "{ctx}: {task} step {k}'s commit was refused (Fenced) under epoch {epoch}, yet it landed"
            );
        }
    }
    eprintln!(
        "{ctx}: {tasks} tasks x {steps} steps in {:.1} s: {} commits acked, {kills} SIGKILLs, \
         {freezes} freezes past the ttl, {} Fenced refusals {by_op:?} (none landed), \
         {errors} other dropped tasks, outboxes exactly once, 0 seqs written twice",
        elapsed.as_secs_f64(),
        acks.len(),
        fenced.len()
    );
    assert!(kills > 0, "{ctx}: the victim was never killed");
}
