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

#[path = "../common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentwal::postgres::PgStore;
use common::pg::{probe_seed as seed, probe_step as step};
use common::rng::Rng;

mod cluster;
mod standby_waits;

use cluster::{CHILD_HOST_ENV, Pair, TASK, options, psql, rounds, url};

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
