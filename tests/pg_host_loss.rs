//! Host loss on the PostgreSQL backend: a primary with a synchronous standby
//! (`synchronous_standby_names = 'ANY 1 (s1)'`, `sync_state = 'quorum'`), a writer child
//! process committing numbered steps through `PgStore` and printing `ack STEP SEQ`; the
//! primary's every process is SIGKILLed, the standby promoted (`pg_ctl promote`), and on
//! the promoted server every acknowledged step must be at its seq, with the right state,
//! the history linear (no seq written twice, no step twice) and nothing there that was
//! never committed (at most the one commit in flight at the kill, unacknowledged).
//!
//! Each round makes its own pair of clusters with `scripts/pg-cluster.sh start` and
//! `standby` (a base backup streamed into a second data dir with its own socket dir), and
//! removes both afterwards; a pair that cannot start fails the test (never skipped). The
//! test does not use `AGENTWAL_PG_HOST`'s server.
//!
//! A second test checks what decides durability across hosts here: `PgStore`'s deadline
//! never cancels the server's wait for the standby (a cancelled wait returns success once
//! the transaction committed locally). With the standby frozen, a commit returns
//! `Error::Indeterminate` at its deadline, not success; its transaction stays invisible on
//! the primary (`resolve` waits for it); and after the primary is lost, the promoted
//! standby says it never landed.
//!
//! Rounds: `AGENTWAL_PG_HOST_LOSS_ROUNDS` (default 3; CI's budget). A longer run:
//! `AGENTWAL_PG_HOST_LOSS_ROUNDS=30 cargo test --release --features postgres --test
//! pg_host_loss -- --test-threads=1 --nocapture`.
#![cfg(feature = "postgres")]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentwal::Error;
use agentwal::postgres::{PgOptions, PgStore, Resolution};
use common::env::env_u64;
use common::pg::{cluster, probe_seed as seed, probe_step as step, signal};
use common::rng::Rng;

const ROUNDS_ENV: &str = "AGENTWAL_PG_HOST_LOSS_ROUNDS";
/// Child mode: the primary's socket directory.
const CHILD_HOST_ENV: &str = "AGENTWAL_PG_HOST_LOSS_CHILD_HOST";
const SCHEMA: &str = "host_loss";
const TASK: &str = "probe";

fn rounds() -> u64 {
    env_u64(ROUNDS_ENV).unwrap_or(3)
}

fn options(deadline: Duration) -> PgOptions {
    PgOptions {
        deadline,
        snapshot_every: 8,
        schema: SCHEMA.into(),
        ..PgOptions::default()
    }
}

fn url(host: &str) -> String {
    format!("host={host} user=postgres dbname=postgres")
}

// ---------------------------------------------------------------------------------------
// The pair of clusters

/// The value of `name` in the `export NAME='value' ...` line pg-cluster.sh prints.
fn exported(out: &str, name: &str) -> String {
    let key = format!("{name}='");
    let at = out
        .find(&key)
        .unwrap_or_else(|| panic!("pg-cluster.sh printed no {name}: {out:?}"))
        + key.len();
    let len = out[at..].find('\'').expect("a closing quote");
    out[at..at + len].to_string()
}

/// A primary and its synchronous standby, both stopped and removed on drop.
struct Pair {
    primary: String,
    standby: String,
}

impl Pair {
    fn start() -> Pair {
        let primary = exported(&cluster(&["start"]), "AGENTWAL_PG_HOST");
        // Removed on drop even if the standby fails to come up.
        let mut pair = Pair {
            primary,
            standby: String::new(),
        };
        pair.standby = exported(
            &cluster(&["standby", &pair.primary]),
            "AGENTWAL_PG_STANDBY_HOST",
        );
        pair
    }

    fn pids(base: &str) -> Vec<String> {
        cluster(&["pids", base])
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }

    /// The primary's host is lost: every one of its processes SIGKILLed at once.
    fn kill_primary(&self) {
        let pids = Pair::pids(&self.primary);
        assert!(!pids.is_empty(), "the primary is not running");
        signal("-KILL", &pids);
    }

    fn promote(&self) {
        cluster(&["promote", &self.standby]);
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for base in [&self.standby, &self.primary] {
            if !base.is_empty() {
                // Thaws a frozen server first; errors are not the test's subject here.
                let _ = Command::new("bash")
                    .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/pg-cluster.sh"))
                    .args(["stop", base])
                    .output();
            }
        }
    }
}

/// One value from `psql` on the server at `host`.
fn psql(host: &str, sql: &str) -> String {
    let out = Command::new("runuser")
        .args(["-u", "postgres", "--", "psql", "-h", host])
        .args(["-U", "postgres", "-d", "postgres", "-qAt", "-c", sql])
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "psql {sql:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

// ---------------------------------------------------------------------------------------
// The writer child and the check

/// Child mode: runs only when the parent sets `AGENTWAL_PG_HOST_LOSS_CHILD_HOST`. Commits
/// step after step with `commit_if` from the state it loaded, printing `ack STEP SEQ`.
#[test]
fn child_host_loss_writer() {
    let Ok(host) = std::env::var(CHILD_HOST_ENV) else {
        return;
    };
    let store: PgStore = PgStore::open(&url(&host), options(Duration::from_secs(5)))
        .expect("child: open a PgStore on the primary");
    let (mut seq, mut last) = (0, 0);
    let mut stdout = std::io::stdout().lock();
    loop {
        match store.commit_if(TASK, seq, &step(last + 1)) {
            Ok(s) => {
                (seq, last) = (s, last + 1);
                writeln!(stdout, "ack {last} {seq}").expect("child: write an ack");
                stdout.flush().expect("child: flush an ack");
            }
            // The primary is gone: nothing more to acknowledge; the parent kills us.
            Err(e) => {
                writeln!(stdout, "error {e}").expect("child: write an error");
                stdout.flush().expect("child: flush");
                std::thread::sleep(Duration::from_secs(60));
            }
        }
    }
}

#[test]
fn primary_lost_standby_promoted_keeps_every_ack() {
    let _serial = common::serial();
    let seed = seed();
    let mut rng = Rng(seed);
    let ctx = format!("host loss (AGENTWAL_PG_PROBE_SEED={seed})");
    let started = Instant::now();
    let (mut acked_total, mut unacked_total) = (0, 0);
    for round in 0..rounds() {
        let ctx = format!("{ctx}, round {round}");
        let t0 = Instant::now();
        let pair = Pair::start();
        let t_pair = t0.elapsed();
        assert_eq!(
            psql(
                &pair.primary,
                "SELECT sync_state FROM pg_stat_replication WHERE application_name = 's1'"
            ),
            "quorum",
            "{ctx}"
        );
        // Nothing on the server side may cancel the wait for the standby (a cancelled
        // wait reports success): no statement timeout.
        assert_eq!(psql(&pair.primary, "SHOW statement_timeout"), "0", "{ctx}");
        // The schema, created before the child starts.
        drop(
            PgStore::<agentwal::AgentState>::open(
                &url(&pair.primary),
                options(Duration::from_secs(5)),
            )
            .expect("open a PgStore on the primary"),
        );
        let mut child = Command::new(std::env::current_exe().expect("the test binary"))
            .args([
                "--exact",
                "child_host_loss_writer",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_HOST_ENV, &pair.primary)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the writer child");
        let stdout = child.stdout.take().expect("the child's stdout");
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(|l| l.ok())
                .collect::<Vec<String>>()
        });
        std::thread::sleep(Duration::from_millis(400 + rng.below(600)));
        pair.kill_primary();
        // The writer's commit in flight now cannot be acknowledged: no standby answer
        // will come, and the primary is gone.
        std::thread::sleep(Duration::from_millis(200));
        child.kill().expect("kill the writer child");
        child.wait().expect("reap the writer child");
        let mut acked: Vec<(u64, u64)> = Vec::new();
        for line in reader.join().expect("the reader thread") {
            // The harness's "test child_host_loss_writer ... " may precede an ack.
            let Some(at) = line.find("ack ") else {
                continue;
            };
            let mut words = line[at + 4..].split_whitespace();
            if let (Some(n), Some(seq)) = (words.next(), words.next()) {
                acked.push((
                    n.parse().expect("an ack's step"),
                    seq.parse().expect("an ack's seq"),
                ));
            }
        }
        assert!(!acked.is_empty(), "{ctx}: the writer acknowledged nothing");

        let t_kill = t0.elapsed();
        pair.promote();
        let store: PgStore = PgStore::open(&url(&pair.standby), options(Duration::from_secs(5)))
            .expect("open a PgStore on the promoted standby");
        let t_promoted = t0.elapsed();
        let present = check(&store, &acked, &ctx);
        eprintln!(
            "{ctx}: pair up {t_pair:?}, primary killed at {t_kill:?}, promoted and open at {t_promoted:?}, checked at {:?}",
            t0.elapsed()
        );
        acked_total += acked.len();
        unacked_total += present.len() - acked.len();
        eprintln!(
            "{ctx}: {} acked, {} present on the promoted standby ({} landed unacknowledged), 0 lost",
            acked.len(),
            present.len(),
            present.len() - acked.len()
        );
    }
    eprintln!(
        "{ctx}: {} rounds in {:.1} s: {acked_total} acked, {unacked_total} landed unacknowledged, 0 lost",
        rounds(),
        started.elapsed().as_secs_f64()
    );
}

/// Checks the task's history on the promoted standby against the acks; returns the steps
/// present.
fn check(store: &PgStore, acked: &[(u64, u64)], ctx: &str) -> Vec<u64> {
    let steps = |cp: &agentwal::Checkpoint<agentwal::AgentState>| -> Vec<u64> {
        cp.state
            .messages
            .iter()
            .map(|m| m.content.parse().expect("a step number"))
            .collect()
    };
    let latest = store
        .load_latest(TASK)
        .expect("load_latest on the promoted standby");
    let present = latest.as_ref().map(steps).unwrap_or_default();
    let latest_seq = latest.as_ref().map_or(0, |c| c.seq);
    // Linear, one step per seq, no step twice: exactly steps 1..=latest, in order.
    assert_eq!(
        present,
        (1..=latest_seq).collect::<Vec<u64>>(),
        "{ctx}: the history is not steps 1..={latest_seq}"
    );
    // No seq acknowledged twice.
    let mut seqs: Vec<u64> = acked.iter().map(|a| a.1).collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), acked.len(), "{ctx}: a seq acknowledged twice");
    for (n, seq) in acked {
        assert_eq!(
            present.get(*seq as usize - 1),
            Some(n),
            "{ctx}: step {n} acked at seq {seq} is not on the promoted standby (LOST)"
        );
    }
    // Nothing that was never committed: at most the one commit in flight at the kill.
    let last_acked = acked.iter().map(|a| a.1).max().unwrap_or(0);
    assert!(
        latest_seq <= last_acked + 1,
        "{ctx}: seq {latest_seq} present, but the writer's last ack was seq {last_acked}"
    );
    // Every seq loads, to the fold of exactly the steps before it.
    for seq in 1..=latest_seq {
        let cp = store
            .load(TASK, seq)
            .expect("load on the promoted standby")
            .unwrap_or_else(|| panic!("{ctx}: seq {seq} does not load"));
        assert_eq!(steps(&cp), present[..seq as usize], "{ctx}: seq {seq}");
        assert_eq!(
            cp.state.vars.get("n"),
            Some(&agentwal::Value::from(seq as i64)),
            "{ctx}: seq {seq}'s n"
        );
    }
    present
}

#[test]
fn a_deadline_does_not_cut_the_wait_for_the_standby() {
    let _serial = common::serial();
    let pair = Pair::start();
    let deadline = Duration::from_millis(600);
    let store: PgStore = PgStore::open(&url(&pair.primary), options(deadline))
        .expect("open a PgStore on the primary");
    assert_eq!(store.commit(TASK, &step(1)).expect("commit step 1"), 1);
    // The standby stops answering (its host hangs): COMMIT on the primary waits for it.
    let standby_pids = Pair::pids(&pair.standby);
    signal("-STOP", &standby_pids);
    let started = Instant::now();
    let write_id = match store.commit(TASK, &step(2)) {
        Err(Error::Indeterminate { write_id, .. }) => write_id,
        other => panic!(
            "a commit the standby never confirmed must not be acknowledged, nor reported as \
             not landed: {other:?}"
        ),
    };
    assert!(started.elapsed() < deadline + Duration::from_millis(500));
    // The client gave up and dropped its connection; the server did not cancel the wait:
    // the transaction is still open (invisible), so `resolve` waits for it and times out.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        psql(
            &pair.primary,
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
        ),
        "1",
        "the commit's backend is no longer waiting for the standby"
    );
    assert!(
        matches!(store.resolve(&write_id), Err(Error::Postgres { .. })),
        "resolve on the primary must wait for the open transaction"
    );
    assert_eq!(
        store
            .load_latest(TASK)
            .expect("load_latest on the primary")
            .map(|c| c.seq),
        Some(1),
        "the unconfirmed commit is visible on the primary"
    );
    // The primary's host is lost while the standby is still frozen; the standby resumes
    // and is promoted: the write never landed there, and `resolve` there says so.
    pair.kill_primary();
    signal("-CONT", &standby_pids);
    pair.promote();
    let promoted: PgStore = PgStore::open(&url(&pair.standby), options(Duration::from_secs(5)))
        .expect("open a PgStore on the promoted standby");
    // The outcome was unknown, and either answer is right; the promoted server's `resolve`
    // and its history must agree. (The WAL the primary had sent before the kill may still
    // reach the resumed standby from its socket buffer: then the write landed.)
    let resolution = promoted
        .resolve(&write_id)
        .expect("resolve on the promoted standby");
    let latest = promoted
        .load_latest(TASK)
        .expect("load_latest on the promoted standby")
        .map(|c| c.seq);
    match resolution {
        Resolution::Landed { seq: Some(2) } => assert_eq!(latest, Some(2)),
        Resolution::NotLanded => {
            assert_eq!(latest, Some(1));
            assert_eq!(
                promoted
                    .commit(TASK, &step(2))
                    .expect("commit step 2 again"),
                2
            );
        }
        other => panic!("resolve on the promoted standby: {other:?}"),
    }
    eprintln!(
        "deadline vs the standby: the commit ended Indeterminate after {} ms, the wait was not cancelled, the promoted standby resolved it {resolution:?}",
        started.elapsed().as_millis()
    );
}

/// Regression: a commit whose wait for the standby ends because its backend was
/// terminated (`pg_terminate_backend`; a fast shutdown does the same) is committed on the
/// primary only. The client gets no answer, settles the write on a fresh connection and,
/// before the fix, found it `Landed` there at once and acknowledged it. Now settling waits
/// for the standby too, so with the standby frozen the commit ends `Indeterminate`.
#[test]
fn a_terminated_wait_for_the_standby_is_not_acknowledged() {
    let _serial = common::serial();
    let pair = Pair::start();
    let deadline = Duration::from_millis(1500);
    let store: PgStore = PgStore::open(&url(&pair.primary), options(deadline))
        .expect("open a PgStore on the primary");
    assert_eq!(store.commit(TASK, &step(1)).expect("commit step 1"), 1);
    let standby_pids = Pair::pids(&pair.standby);
    signal("-STOP", &standby_pids);
    let outcome = std::thread::scope(|s| {
        let commit = s.spawn(|| store.commit(TASK, &step(2)));
        let until = Instant::now() + Duration::from_secs(1);
        let waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'";
        while psql(&pair.primary, waiting) != "1" {
            assert!(
                Instant::now() < until,
                "the commit never waited for the standby"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        psql(
            &pair.primary,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'",
        );
        commit.join().expect("the commit thread")
    });
    signal("-CONT", &standby_pids);
    assert!(
        matches!(outcome, Err(Error::Indeterminate { .. })),
        "a commit the standby has not confirmed was reported as {outcome:?}"
    );
}

/// A commit whose wait for the standby is cancelled (`pg_cancel_backend`) gets COMMIT
/// success with a WARNING, committed on the primary only. PgStore sees the warning on the
/// connection and settles the write like an unknown outcome, through `resolve`, whose own
/// COMMIT waits for the standby: with the standby frozen throughout the commit ends
/// `Indeterminate`; with the standby thawed within the deadline it returns `Ok`, and only
/// after the thaw.
#[test]
fn a_cancelled_wait_for_the_standby_is_not_acknowledged() {
    let _serial = common::serial();
    let pair = Pair::start();
    let deadline = Duration::from_millis(1500);
    let store: PgStore = PgStore::open(&url(&pair.primary), options(deadline))
        .expect("open a PgStore on the primary");
    assert_eq!(store.commit(TASK, &step(1)).expect("commit step 1"), 1);
    let standby_pids = Pair::pids(&pair.standby);
    let waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'";
    let cancel_the_wait = || {
        let until = Instant::now() + Duration::from_secs(1);
        while psql(&pair.primary, waiting) != "1" {
            assert!(
                Instant::now() < until,
                "the commit never waited for the standby"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        psql(
            &pair.primary,
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'",
        );
    };

    // The standby frozen throughout: never acknowledged.
    signal("-STOP", &standby_pids);
    let outcome = std::thread::scope(|s| {
        let commit = s.spawn(|| store.commit(TASK, &step(2)));
        cancel_the_wait();
        commit.join().expect("the commit thread")
    });
    signal("-CONT", &standby_pids);
    assert!(
        matches!(outcome, Err(Error::Indeterminate { .. })),
        "a commit whose wait for the standby was cancelled, the standby frozen, was reported as \
         {outcome:?}"
    );
    // It committed on the primary; once the standby is back, resolve says so.
    let Err(Error::Indeterminate { write_id, .. }) = outcome else {
        unreachable!()
    };
    assert_eq!(
        store.resolve(&write_id).expect("resolve after the thaw"),
        Resolution::Landed { seq: Some(2) }
    );

    // The standby thawed within the deadline: acknowledged, but only after the thaw.
    signal("-STOP", &standby_pids);
    let (outcome, thawed_at, acked_at) = std::thread::scope(|s| {
        let commit = s.spawn(|| {
            let r = store.commit(TASK, &step(3));
            (r, Instant::now())
        });
        cancel_the_wait();
        std::thread::sleep(Duration::from_millis(300));
        let thawed_at = Instant::now();
        signal("-CONT", &standby_pids);
        let (r, acked_at) = commit.join().expect("the commit thread");
        (r, thawed_at, acked_at)
    });
    assert_eq!(outcome.expect("the commit, the standby thawed"), 3);
    assert!(
        acked_at >= thawed_at,
        "the commit was acknowledged before the standby could have it"
    );
    eprintln!(
        "cancelled wait for the standby: frozen → Indeterminate, resolved Landed after the thaw; \
         thawed → Ok(3) {} ms after the thaw",
        (acked_at - thawed_at).as_millis()
    );
}
