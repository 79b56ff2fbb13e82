//! The wait for the standby: a deadline never cuts it, and neither a terminated nor a
//! cancelled wait is acknowledged (docs/postgres.md §5).

use std::time::{Duration, Instant};

use crate::common::pg::{probe_step as step, signal};
use agentwal::Error;
use agentwal::postgres::{PgStore, Resolution};

use crate::cluster::{Pair, TASK, options, psql, url};
use crate::common;

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
