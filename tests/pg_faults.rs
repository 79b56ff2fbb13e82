//! Fault probes against the real PostgreSQL server (the throwaway cluster of
//! `scripts/test.sh`): a writer commits a numbered step after another while the probe
//! kills the client, SIGKILLs every server process, stops the server with
//! `pg_ctl stop -m immediate`, or freezes it (SIGSTOP) past the writer's deadline. After
//! each probe: every acknowledged commit is there, no state was ever committed that was not
//! (a step reported as failed is absent, an unknown one is present exactly when `resolve`
//! says it landed), the history is linear with no seq written twice, and no call outlived
//! its deadline by more than a scheduling slack.
//!
//! Rounds per probe: `AGENTWAL_PG_PROBE_ROUNDS` (default 4; CI's budget).
#![cfg(feature = "postgres")]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agentwal::Error;
use agentwal::postgres::{PgOptions, PgStore, Resolution};
use common::env::env_u64;
use common::pg::{cluster, probe_seed as seed, probe_step as step, signal};
use common::rng::Rng;

const ROUNDS_ENV: &str = "AGENTWAL_PG_PROBE_ROUNDS";
const CHILD_ENV: &str = "AGENTWAL_PG_CHILD_SCHEMA";
const TASK: &str = "probe";
/// How much later than its deadline a call may return: thread scheduling on a loaded
/// 2-core machine, not waiting on the server.
const DEADLINE_SLACK: Duration = Duration::from_millis(500);

fn rounds() -> u64 {
    env_u64(ROUNDS_ENV).unwrap_or(4)
}

fn options(deadline: Duration, schema: String) -> PgOptions {
    PgOptions {
        deadline,
        // Snapshots land among the faults too.
        snapshot_every: 8,
        schema,
        ..PgOptions::default()
    }
}

// ---------------------------------------------------------------------------------------
// The cluster

fn server_pids() -> Vec<String> {
    let pids: Vec<String> = cluster(&["pids", &common::pg::host()])
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert!(!pids.is_empty(), "the test server is not running");
    pids
}

fn start_again() {
    cluster(&["start-again", &common::pg::host()]);
}

fn stop_immediate() {
    let bin = std::env::var("AGENTWAL_PG_BIN").expect("AGENTWAL_PG_BIN (set by pg-cluster.sh)");
    let data = std::env::var("AGENTWAL_PG_DATA").expect("AGENTWAL_PG_DATA (set by pg-cluster.sh)");
    let status = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(format!("{bin}/pg_ctl"))
        .args(["-D", &data, "-m", "immediate", "-w", "stop"])
        .stdout(Stdio::null())
        .status()
        .expect("run pg_ctl");
    assert!(status.success(), "pg_ctl stop -m immediate failed");
}

// ---------------------------------------------------------------------------------------
// The writer and the check

/// What a writer learnt of its commits.
#[derive(Default, Debug)]
struct Outcomes {
    /// (step, seq) acknowledged.
    acked: Vec<(u64, u64)>,
    /// Steps reported as not landed (`Error::Postgres`).
    failed: Vec<u64>,
    /// Steps whose outcome was unknown, with their write ids.
    unknown: Vec<(u64, String)>,
    /// The longest call, in ms.
    longest_call_ms: u128,
}

fn write_until(store: &PgStore, stop: &AtomicBool, first: u64) -> Outcomes {
    let mut out = Outcomes::default();
    for n in first.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let started = Instant::now();
        let result = store.commit(TASK, &step(n));
        out.longest_call_ms = out.longest_call_ms.max(started.elapsed().as_millis());
        match result {
            Ok(seq) => out.acked.push((n, seq)),
            Err(Error::Postgres { .. }) => out.failed.push(n),
            Err(Error::Indeterminate { write_id, .. }) => out.unknown.push((n, write_id)),
            Err(e) => panic!("step {n}: unexpected error {e}"),
        }
    }
    out
}

/// Checks the task's history against what the writers learnt; returns the steps present.
fn check(store: &PgStore, out: &Outcomes, ctx: &str) -> Vec<u64> {
    let mut landed: Vec<(u64, u64)> = out.acked.clone();
    let mut not_landed: Vec<u64> = out.failed.clone();
    for (n, id) in &out.unknown {
        // The server is back: resolution must settle it now.
        match store.resolve(id) {
            Ok(Resolution::Landed { seq: Some(seq) }) => landed.push((*n, seq)),
            Ok(Resolution::NotLanded) => not_landed.push(*n),
            other => panic!("{ctx}: resolving step {n} gave {other:?}"),
        }
    }
    let latest = store.load_latest(TASK).unwrap();
    let present: Vec<u64> = latest
        .as_ref()
        .map(|cp| {
            cp.state
                .messages
                .iter()
                .map(|m| m.content.parse().unwrap())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        latest.as_ref().map_or(0, |c| c.seq),
        present.len() as u64,
        "{ctx}"
    );
    // Linear: each step at most once, in the order written.
    assert!(
        present.windows(2).all(|w| w[0] < w[1]),
        "{ctx}: history not linear: {present:?}"
    );
    for (n, seq) in &landed {
        assert_eq!(
            present.get(*seq as usize - 1),
            Some(n),
            "{ctx}: step {n} acked/landed at seq {seq} is not there"
        );
    }
    for n in &not_landed {
        assert!(
            !present.contains(n),
            "{ctx}: step {n} was reported not landed, yet it is there"
        );
    }
    // Every seq loads, to the fold of exactly the steps before it.
    for seq in (1..=present.len() as u64).step_by(5) {
        let cp = store.load(TASK, seq).unwrap().unwrap();
        let texts: Vec<u64> = cp
            .state
            .messages
            .iter()
            .map(|m| m.content.parse().unwrap())
            .collect();
        assert_eq!(texts, present[..seq as usize], "{ctx}: seq {seq}");
    }
    present
}

/// Runs a writer thread while `fault` strikes `rounds()` times at random moments.
fn probe(name: &str, deadline: Duration, fault: impl Fn(&mut Rng)) {
    let _serial = common::serial();
    let seed = seed();
    let mut rng = Rng(seed);
    let ctx = format!("{name} (AGENTWAL_PG_PROBE_SEED={seed})");
    let store: PgStore = common::pg::store(name, options(deadline, String::new()));
    let store = PgStore::open(
        &common::pg::url(),
        options(deadline, store.options().schema.clone()),
    )
    .unwrap();
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let out = std::thread::scope(|s| {
        let writer = s.spawn(|| write_until(&store, &stop, 1));
        for _ in 0..rounds() {
            std::thread::sleep(Duration::from_millis(50 + rng.below(250)));
            fault(&mut rng);
        }
        // Let the writer commit again after the last fault.
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap()
    });
    let present = check(&store, &out, &ctx);
    assert!(
        out.longest_call_ms <= (deadline + DEADLINE_SLACK).as_millis(),
        "{ctx}: a call took {} ms, past its deadline of {} ms",
        out.longest_call_ms,
        deadline.as_millis()
    );
    assert!(!out.acked.is_empty(), "{ctx}: nothing was acknowledged");
    eprintln!(
        "{ctx}: {} rounds in {:.1} s: {} acked, {} failed, {} unknown then resolved, {} steps present, 0 lost, longest call {} ms",
        rounds(),
        started.elapsed().as_secs_f64(),
        out.acked.len(),
        out.failed.len(),
        out.unknown.len(),
        present.len(),
        out.longest_call_ms
    );
}

#[test]
fn server_frozen_past_the_deadline() {
    let deadline = Duration::from_millis(800);
    probe("frozen", deadline, |rng| {
        let pids = server_pids();
        signal("-STOP", &pids);
        std::thread::sleep(deadline + Duration::from_millis(200 + rng.below(400)));
        signal("-CONT", &pids);
    });
}

#[test]
fn every_server_process_sigkilled_then_restarted() {
    probe("sigkill", Duration::from_secs(5), |_| {
        signal("-KILL", &server_pids());
        start_again();
    });
}

#[test]
fn pg_ctl_stop_immediate_then_restarted() {
    probe("immediate", Duration::from_secs(5), |_| {
        stop_immediate();
        start_again();
    });
}

// ---------------------------------------------------------------------------------------
// Client SIGKILL: a child process writes, printing `ack STEP SEQ` after each commit.

/// Child mode: runs only when the parent sets `AGENTWAL_PG_CHILD_SCHEMA`.
#[test]
fn child_writer() {
    let Ok(schema) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store: PgStore =
        PgStore::open(&common::pg::url(), options(Duration::from_secs(5), schema)).unwrap();
    // A restarted worker goes on from the state it loads, committing with `commit_if`: a
    // commit of its killed predecessor may still land after that load (the server had its
    // COMMIT), and a plain commit would then apply a step twice.
    let latest = || {
        store.load_latest(TASK).unwrap().map_or((0, 0), |cp| {
            let last = cp
                .state
                .messages
                .last()
                .map_or(0, |m| m.content.parse::<u64>().unwrap());
            (cp.seq, last)
        })
    };
    let (mut seq, mut last) = latest();
    let mut stdout = std::io::stdout().lock();
    loop {
        match store.commit_if(TASK, seq, &step(last + 1)) {
            Ok(s) => {
                (seq, last) = (s, last + 1);
                writeln!(stdout, "ack {last} {seq}").unwrap();
                stdout.flush().unwrap();
            }
            Err(Error::Conflict { .. }) => (seq, last) = latest(),
            Err(e) => panic!("child: {e}"),
        }
    }
}

#[test]
fn client_sigkilled_mid_commit() {
    let _serial = common::serial();
    let seed = seed();
    let mut rng = Rng(seed);
    let ctx = format!("client sigkill (AGENTWAL_PG_PROBE_SEED={seed})");
    let schema = common::pg::fresh_schema("client_kill");
    // Created here, so the children all find it.
    let store: PgStore = PgStore::open(
        &common::pg::url(),
        options(Duration::from_secs(5), schema.clone()),
    )
    .unwrap();
    let mut out = Outcomes::default();
    let rounds = rounds() * 2;
    let started = Instant::now();
    for _ in 0..rounds {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_writer", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &schema)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(|l| l.ok())
                .collect::<Vec<String>>()
        });
        std::thread::sleep(Duration::from_millis(150 + rng.below(300)));
        child.kill().unwrap();
        child.wait().unwrap();
        for line in reader.join().unwrap() {
            // The harness's "test child_writer ... " may precede the first ack on its line.
            let Some(at) = line.find("ack ") else {
                continue;
            };
            let mut words = line[at + 4..].split_whitespace();
            if let (Some(n), Some(seq)) = (words.next(), words.next()) {
                out.acked.push((n.parse().unwrap(), seq.parse().unwrap()));
            }
        }
    }
    let present = check(&store, &out, &ctx);
    assert!(
        !out.acked.is_empty(),
        "{ctx}: the children acknowledged nothing"
    );
    eprintln!(
        "{ctx}: {rounds} kills in {:.1} s: {} acked, {} present ({} landed unacknowledged), 0 lost",
        started.elapsed().as_secs_f64(),
        out.acked.len(),
        present.len(),
        present.len() - out.acked.len()
    );
    // At most the one commit in flight when each child was killed landed unacknowledged.
    assert!(
        present.len() - out.acked.len() <= rounds as usize,
        "{ctx}: more unacknowledged steps than kills"
    );
}
