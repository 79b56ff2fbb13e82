//! What only the PostgreSQL backend has: programs of different schema versions on one
//! database, concurrent migrations, bad options, an unreachable server within the deadline,
//! and `resolve`.
#![cfg(feature = "postgres")]

mod common;

use std::time::{Duration, Instant};

use agentwal::postgres::{PgOptions, PgStore, Resolution};
use agentwal::{AgentState, Error};
use common::states::{CounterV1, CounterV2, CounterV2Migrating};

fn open<S: agentwal::State>(schema: &str) -> PgStore<S> {
    let options = PgOptions {
        schema: schema.to_string(),
        ..PgOptions::default()
    };
    PgStore::open(&common::pg::url(), options).unwrap()
}

#[test]
fn schema_version_mismatch_is_an_error_or_a_migration_never_garbage() {
    let schema = common::pg::fresh_schema("versions");
    let v1: PgStore<CounterV1> = open(&schema);
    v1.commit("t", &5).unwrap();
    v1.commit("t", &7).unwrap();
    let v2: PgStore<CounterV2> = open(&schema);
    let mismatch = |r: &agentwal::Result<_>| {
        matches!(
            r,
            Err(Error::SchemaMismatch {
                found: 1,
                expected: 2
            })
        )
    };
    assert!(mismatch(&v2.load_latest("t").map(|_| ())));
    // A commit of the new version refuses to append to a history it cannot read ...
    assert!(mismatch(&v2.commit("t", &(1, "x".into())).map(|_| ())));
    assert_eq!(v1.load_latest("t").unwrap().unwrap().seq, 2);
    // ... and, with a migration, rebuilds the state and writes it as a snapshot.
    let v2m: PgStore<CounterV2Migrating> = open(&schema);
    let s = v2m.load_latest("t").unwrap().unwrap().state;
    assert_eq!((s.0.total, s.0.label.as_str()), (12, "migrated"));
    assert_eq!(v2m.commit("t", &(1, "new".into())).unwrap(), 3);
    assert!(v2m.list_checkpoints("t").unwrap()[2].snapshot);
    // After it, the program without hooks reads the task.
    let s = v2.load_latest("t").unwrap().unwrap().state;
    assert_eq!((s.total, s.label.as_str()), (13, "new"));
    assert_eq!(v2.commit("t", &(2, "v2".into())).unwrap(), 4);
}

#[test]
fn handles_opening_at_once_migrate_one_after_another() {
    let schema = common::pg::fresh_schema("concurrent_open");
    std::thread::scope(|s| {
        for t in 0..4 {
            let schema = &schema;
            s.spawn(move || {
                let store: PgStore = open(schema);
                store
                    .commit(&format!("t{t}"), &agentwal::AgentDelta::default())
                    .unwrap();
            });
        }
    });
    let store: PgStore = open(&schema);
    assert_eq!(store.tasks().unwrap().len(), 4);
}

#[test]
fn bad_options_and_an_unreachable_server_are_clear_errors() {
    for schema in ["", "1abc", "a-b", "x\"y", &"s".repeat(64)] {
        let options = PgOptions {
            schema: schema.to_string(),
            ..PgOptions::default()
        };
        assert!(
            matches!(
                PgStore::<AgentState>::open(&common::pg::url(), options),
                Err(Error::InvalidArgument(_))
            ),
            "schema {schema:?}"
        );
    }
    let zero = PgOptions {
        snapshot_every: 0,
        ..PgOptions::default()
    };
    assert!(matches!(
        PgStore::<AgentState>::open(&common::pg::url(), zero),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        PgStore::<AgentState>::open("postgresql://[bad", PgOptions::default()),
        Err(Error::InvalidArgument(_))
    ));
    // No server there: the open keeps trying until its deadline, then says so.
    let nowhere = tempfile::tempdir().unwrap();
    let options = PgOptions {
        deadline: Duration::from_millis(400),
        ..PgOptions::default()
    };
    let started = Instant::now();
    let url = format!(
        "host={} user=postgres dbname=postgres",
        nowhere.path().display()
    );
    let result = PgStore::<AgentState>::open(&url, options);
    assert!(matches!(result, Err(Error::Postgres { .. })), "{result:?}");
    assert!(
        started.elapsed() < Duration::from_millis(1400),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn resolve_declares_an_unknown_write_not_landed_for_good() {
    let store: PgStore = common::pg::store("resolve", PgOptions::default());
    assert_eq!(
        store.resolve("no-such-write").unwrap(),
        Resolution::NotLanded
    );
    // Asking again gives the same answer: the id is now recorded as not landed.
    assert_eq!(
        store.resolve("no-such-write").unwrap(),
        Resolution::NotLanded
    );
}

#[test]
fn tables_of_another_program_are_an_error_not_a_panic() {
    // A schema that already holds a `tasks` table of another shape: the migration's
    // `CREATE TABLE IF NOT EXISTS` leaves it, and agentwal must then refuse, not panic.
    let schema = common::pg::fresh_schema("foreign_tables");
    let bin = std::env::var("AGENTWAL_PG_BIN").expect("AGENTWAL_PG_BIN (set by pg-cluster.sh)");
    let sql = format!(
        "CREATE SCHEMA {schema}; CREATE TABLE {schema}.tasks (task bytea PRIMARY KEY, latest_seq text,
             latest_created_at_ms text, snapshot_bytes text, deltas_since_snapshot text,
             delta_bytes_since_snapshot text, versions_since_snapshot text);
         INSERT INTO {schema}.tasks VALUES ('\\x74', 'one', '0', '0', '0', '0', '{{}}')"
    );
    let status = std::process::Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(format!("{bin}/psql"))
        .args([
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            &common::pg::host(),
            "-d",
            "postgres",
            "-c",
            &sql,
        ])
        .status()
        .expect("run psql");
    assert!(status.success(), "psql failed");
    let store: PgStore = open(&schema);
    let r = store.commit("t", &agentwal::AgentDelta::default());
    assert!(matches!(r, Err(Error::Postgres { .. })), "{r:?}");
    assert!(matches!(
        store.load_latest("t"),
        Err(Error::Postgres { .. })
    ));
}

/// Each thread holds at most one connection at a time, so a handle whose pool keeps as
/// many idle connections as there are threads opens no session after the first of each
/// thread: a burst of calls does not close connections that the next burst opens again.
/// (Bursts, in rounds behind a barrier, are what churned a smaller pool: calls that follow
/// one another steadily keep their connections busy and never overflow it.)
#[test]
fn bursts_of_calls_reuse_their_sessions_and_idle_ones_close_after_their_time() {
    const THREADS: usize = 16;
    const ROUNDS: usize = 30;
    let schema = common::pg::fresh_schema("pool");
    let options = PgOptions {
        schema: schema.clone(),
        pool_idle_time_max: Duration::from_secs(1),
        ..PgOptions::default()
    };
    assert!(
        options.pool_idle_max >= THREADS,
        "the default pool covers the threads"
    );
    let store: PgStore<CounterV1> = PgStore::open(&common::pg::url(), options).unwrap();
    let (_, opened_at_open) = store.pool_counts();
    let barrier = std::sync::Barrier::new(THREADS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (store, barrier) = (&store, &barrier);
            s.spawn(move || {
                for _ in 0..ROUNDS {
                    barrier.wait();
                    store.commit(&format!("t{t}"), &1).unwrap();
                }
            });
        }
    });
    let (idle, opened) = store.pool_counts();
    let opened_by_commits = opened - opened_at_open;
    assert!(
        opened_by_commits <= THREADS as u64,
        "{THREADS} threads opened {opened_by_commits} sessions in {ROUNDS} rounds of commits"
    );
    assert!((1..=THREADS).contains(&idle), "{idle} idle connections");
    // After their idle time, the next call that gives a connection back closes the rest.
    std::thread::sleep(Duration::from_millis(1500));
    store.commit("t0", &1).unwrap();
    assert_eq!(
        store.pool_counts().0,
        1,
        "stale idle connections were closed"
    );
    let latest = store.load_latest("t0").unwrap().unwrap();
    assert_eq!(latest.seq, ROUNDS as u64 + 1);
    assert_eq!(latest.state.total, ROUNDS as i64 + 1);
}

/// The reads a connection repeats (a task's latest checkpoint, its latest state) run by
/// their text the first time, prepared in the same flight the second, prepared after: each
/// run answers what the text would, other handles' commits included, and a schema dropped
/// and created again under the open handle gives an error or the new rows, never the old.
#[test]
fn hot_reads_prepared_on_a_connection_answer_what_their_text_does() {
    let schema = common::pg::fresh_schema("hot_reads");
    let a: PgStore = open(&schema);
    let b: PgStore = open(&schema);
    for n in 1..=3 {
        a.commit("t", &common::pg::probe_step(n)).unwrap();
    }
    // One caller at a time: every read of `a` runs on its one pooled connection.
    for run in 0..5u64 {
        let seq = 3 + run;
        let info = a.latest_info("t").unwrap().expect("t has checkpoints");
        assert_eq!(info.seq, seq, "run {run}");
        let latest = a.load_latest("t").unwrap().expect("t has checkpoints");
        assert_eq!(latest.seq, seq, "run {run}");
        let by_fold = a.load("t", seq).unwrap().expect("seq is retained");
        assert_eq!(latest.state, by_fold.state, "run {run}");
        assert_eq!(a.latest_info("absent").unwrap(), None, "run {run}");
        assert!(a.load_latest("absent").unwrap().is_none(), "run {run}");
        b.commit("t", &common::pg::probe_step(seq + 1)).unwrap();
    }
    assert_eq!(a.pool_counts().1, 1, "the reads above shared one session");

    common::pg::psql(&format!("DROP SCHEMA {schema} CASCADE"));
    let c: PgStore = open(&schema);
    c.commit("t", &common::pg::probe_step(100)).unwrap();
    // The server plans `a`'s prepared statements again on the new tables; were their
    // columns to differ, the first read would fail and its connection be dropped: either
    // way, never the old rows.
    for read in 0..2 {
        match a.latest_info("t") {
            Ok(info) => assert_eq!(info.map(|i| i.seq), Some(1), "read {read}"),
            Err(e) => assert!(read == 0, "read {read}: {e}"),
        }
        match a.load_latest("t") {
            Ok(cp) => assert_eq!(cp.map(|c| c.seq), Some(1), "read {read}"),
            Err(e) => assert!(read == 0, "read {read}: {e}"),
        }
    }
}

/// `catch_up` builds the latest checkpoint from a loaded one and the deltas after it,
/// exactly as a load would read it, and leaves the handle's hint as a load does (the next
/// commit is one round trip); where it cannot (a snapshot after the base, which retention's
/// deletes always follow; the task deleted or written again) it answers `None`, never a
/// state the store does not hold.
#[test]
fn catch_up_gives_the_latest_state_from_the_deltas_after_a_base_or_none() {
    let schema = common::pg::fresh_schema("catch_up");
    let options = |snapshot_every| PgOptions {
        schema: schema.clone(),
        snapshot_every,
        ..PgOptions::default()
    };
    // No snapshot in the first 60 checkpoints of `a`'s tasks.
    let a: PgStore = PgStore::open(&common::pg::url(), options(1000)).unwrap();
    let b: PgStore = PgStore::open(&common::pg::url(), options(1000)).unwrap();
    let step = common::pg::probe_step;
    for n in 1..=3 {
        a.commit("t", &step(n)).unwrap();
    }
    let base = a.load_latest("t").unwrap().unwrap();
    let same = a
        .catch_up(&base)
        .unwrap()
        .expect("nothing new: the base itself");
    assert_eq!(
        (same.seq, same.created_at_ms),
        (base.seq, base.created_at_ms)
    );
    assert!(std::sync::Arc::ptr_eq(&same.state, &base.state));
    let mut older = base.clone();
    for n in 4..=40 {
        b.commit("t", &step(n)).unwrap();
        if n % 9 == 0 {
            older = a.load_latest("t").unwrap().unwrap();
        }
        for from in [&base, &older] {
            let up = a
                .catch_up(from)
                .unwrap()
                .expect("deltas only since the base");
            assert_eq!(Some(&up), a.load_latest("t").unwrap().as_ref(), "seq {n}");
        }
    }
    // `b` moves on past `a`'s last read; caught up, `a` commits on in one round trip:
    // the catch-up left its hint right.
    b.commit("t", &step(41)).unwrap();
    let up = a.catch_up(&base).unwrap().unwrap();
    let before = a.commit_round_trips();
    assert_eq!(a.commit_if("t", up.seq, &step(42)).unwrap(), 42);
    assert_eq!(a.commit_round_trips() - before, 1);
    // A fork's first checkpoint (a snapshot) is a base like any other.
    a.fork("t", 20, "u").unwrap();
    let forked = a.load_latest("u").unwrap().unwrap();
    for n in 1..=4 {
        b.commit("u", &step(200 + n)).unwrap();
    }
    assert_eq!(a.catch_up(&forked).unwrap(), a.load_latest("u").unwrap());
    // A base that is not the stored checkpoint at its seq (another creation time).
    let mut forged = base.clone();
    forged.created_at_ms += 1;
    assert_eq!(a.catch_up(&forged).unwrap(), None);
    // A base past the latest (the task written again, shorter).
    let mut ahead = base.clone();
    ahead.seq = 43;
    assert_eq!(a.catch_up(&ahead).unwrap(), None);

    // Deleted, then written again from seq 1: its checkpoint at the base's seq is another.
    a.delete_task("t").unwrap();
    assert_eq!(a.catch_up(&base).unwrap(), None);
    for n in 1..=5 {
        a.commit("t", &step(100 + n)).unwrap();
    }
    assert_eq!(a.catch_up(&base).unwrap(), None);

    // A snapshot after the base: loading it whole is as cheap, so `None`.
    let s: PgStore = PgStore::open(&common::pg::url(), options(2)).unwrap();
    for n in 1..=2 {
        s.commit("u", &step(n)).unwrap();
    }
    let early = s.load_latest("u").unwrap().unwrap();
    for n in 3..=12 {
        s.commit("u", &step(n)).unwrap();
    }
    assert_eq!(s.catch_up(&early).unwrap(), None);
    let late = s.load_latest("u").unwrap().unwrap();
    assert_eq!(s.catch_up(&late).unwrap(), Some(late.clone()));
}

/// A base loaded through a state's migration catches up over deltas an older program
/// keeps writing, each migrated as a load migrates it.
#[test]
fn catch_up_migrates_the_deltas_of_an_older_program() {
    let schema = common::pg::fresh_schema("catch_up_migrating");
    let v1: PgStore<CounterV1> = open(&schema);
    let v2m: PgStore<CounterV2Migrating> = open(&schema);
    v1.commit("t", &5).unwrap();
    let base = v2m.load_latest("t").unwrap().unwrap();
    v1.commit("t", &7).unwrap();
    v1.commit("t", &11).unwrap();
    let up = v2m.catch_up(&base).unwrap().expect("v1's deltas, migrated");
    assert_eq!(
        (up.state.0.total, up.state.0.label.as_str()),
        (23, "migrated")
    );
    assert_eq!(Some(up), v2m.load_latest("t").unwrap());
}

/// The largest "Rows Removed by Filter" of an `EXPLAIN ANALYZE` output.
fn most_rows_filtered(plan: &str) -> u64 {
    plan.lines()
        .filter_map(|l| l.trim().strip_prefix("Rows Removed by Filter: "))
        .map(|n| n.trim().parse::<u64>().unwrap())
        .max()
        .unwrap_or(0)
}

#[test]
fn a_load_finds_its_fold_base_without_reading_the_tasks_whole_history() {
    let schema = common::pg::fresh_schema("fold_base_plan");
    let options = PgOptions {
        schema: schema.clone(),
        snapshot_every: 50,
        ..PgOptions::default()
    };
    let store: PgStore = PgStore::open(&common::pg::url(), options).unwrap();
    for n in 1..=1200u64 {
        store.commit("long", &common::pg::probe_step(n)).unwrap();
    }
    for task in 0..200 {
        store
            .commit(&format!("short-{task}"), &common::pg::probe_step(1))
            .unwrap();
    }
    common::pg::psql(&format!("ANALYZE {schema}.checkpoints"));
    // The plan a pooled connection gets from a prepared statement's sixth run on (generic),
    // and the plan of a statement sent with its values (custom).
    for mode in ["force_generic_plan", "force_custom_plan"] {
        let plan = common::pg::psql(&format!(
            "SET search_path = {schema}; SET plan_cache_mode = {mode}; \
             PREPARE latest(bytea) AS {}; \
             EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) \
             EXECUTE latest(convert_to('long', 'UTF8'))",
            agentwal::postgres::latest_statement()
        ));
        // The rows since the newest snapshot (fewer than 50), never the 1,200 of the task.
        assert!(most_rows_filtered(&plan) < 50, "{mode}: {plan}");
        assert!(!plan.contains("Aggregate"), "{mode}: {plan}");
    }
    let latest = store.load_latest("long").unwrap().unwrap();
    assert_eq!(latest.seq, 1200);
}

/// A handle that has no hint of a task (a new handle, or one that forgot it) decides on the
/// row of a task that does not exist: a snapshot due there is prepared on the row read
/// with the state, never on that guess.
#[test]
fn a_handle_without_a_hint_prepares_its_snapshot_on_the_row_it_reads() {
    let schema = common::pg::fresh_schema("cold_hint");
    let options = |snapshot_every| PgOptions {
        schema: schema.clone(),
        snapshot_every,
        ..PgOptions::default()
    };
    let url = common::pg::url();
    // Every checkpoint a snapshot, from every handle.
    let a: PgStore = PgStore::open(&url, options(1)).unwrap();
    for n in 1..=3 {
        a.commit("t", &common::pg::probe_step(n)).unwrap();
    }
    let b: PgStore = PgStore::open(&url, options(1)).unwrap();
    assert_eq!(b.commit("t", &common::pg::probe_step(4)).unwrap(), 4);
    let infos = b.list_checkpoints("t").unwrap();
    assert!(infos.iter().all(|i| i.snapshot), "{infos:?}");
    let mut expected = AgentState::default();
    for n in 1..=4 {
        agentwal::State::apply(&mut expected, &common::pg::probe_step(n));
    }
    assert_eq!(*b.load_latest("t").unwrap().unwrap().state, expected);

    // A history of another schema version: the first commit of a new handle of the new
    // program, with a snapshot due on the guess, refuses rather than append to it ...
    let v1: PgStore<CounterV1> = open(&schema);
    v1.commit("c", &5).unwrap();
    let v2: PgStore<CounterV2> = PgStore::open(&url, options(1)).unwrap();
    let r = v2.commit("c", &(1, "x".into()));
    assert!(
        matches!(
            r,
            Err(Error::SchemaMismatch {
                found: 1,
                expected: 2
            })
        ),
        "{r:?}"
    );
    assert_eq!(v1.list_checkpoints("c").unwrap().len(), 1);
    // ... and a writer fenced off the task learns that first, as its write would tell it.
    v1.acquire("c", "another worker", Duration::from_secs(60))
        .unwrap();
    let v2: PgStore<CounterV2> = PgStore::open(&url, options(1)).unwrap();
    let r = v2.commit("c", &(1, "x".into()));
    assert!(matches!(r, Err(Error::Fenced { .. })), "{r:?}");
}
