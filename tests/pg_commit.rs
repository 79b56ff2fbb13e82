//! The one-statement commit (docs/postgres.md §2): a steady-state commit is one round trip;
//! a stale hint (another handle wrote the task) costs one more and gives the history a
//! single writer gives; a schema of version 2 (no commit function) is upgraded in place by
//! the first handles that open it, at once or not, and a schema of version 3 gets version
//! 4's commit function. The usual case is the client's one statement alone (the function
//! renamed away, it still commits), and the function settles what the statement cannot.
#![cfg(feature = "postgres")]

mod common;

use agentwal::postgres::{PgOptions, PgStore};
use agentwal::{AgentDelta, Error};

fn step(n: u64) -> AgentDelta {
    common::pg::probe_step(n)
}

fn options(schema: &str, snapshot_every: u32) -> PgOptions {
    PgOptions {
        schema: schema.to_string(),
        snapshot_every,
        ..PgOptions::default()
    }
}

#[test]
fn a_steady_state_commit_is_one_round_trip() {
    let store: PgStore = common::pg::store("one_round_trip", PgOptions::default());
    // A new task: the function creates its row. The first commit on a connection
    // prepares its two statements too (the usual case's and the function's call).
    assert_eq!(store.commit("t", &step(1)).unwrap(), 1);
    assert_eq!(store.commit_round_trips(), 3);
    for n in 2..=30 {
        let before = store.commit_round_trips();
        assert_eq!(store.commit("t", &step(n)).unwrap(), n);
        assert_eq!(store.commit_round_trips() - before, 1, "commit {n}");
    }
    let before = store.commit_round_trips();
    assert_eq!(store.commit_if("t", 30, &step(31)).unwrap(), 31);
    assert_eq!(store.commit_round_trips() - before, 1);
    // A conflict is answered by the same call, and leaves the hint right.
    let before = store.commit_round_trips();
    let r = store.commit_if("t", 30, &step(32));
    assert!(
        matches!(
            r,
            Err(Error::Conflict {
                expected: 30,
                actual: 31,
                ..
            })
        ),
        "{r:?}"
    );
    assert_eq!(store.commit("t", &step(32)).unwrap(), 32);
    assert_eq!(store.commit_round_trips() - before, 2);
    // A conflicting commit_if on a new task leaves no row.
    assert!(matches!(
        store.commit_if("new", 3, &step(1)),
        Err(Error::Conflict { actual: 0, .. })
    ));
    assert!(!store.tasks().unwrap().iter().any(|t| t == "new"));
}

#[test]
fn the_usual_case_is_the_one_statement_the_function_settles_the_rest() {
    let schema = common::pg::fresh_schema("fast_path");
    let url = common::pg::url();
    let a: PgStore = PgStore::open(&url, options(&schema, 1024)).unwrap();
    let b: PgStore = PgStore::open(&url, options(&schema, 1024)).unwrap();
    assert_eq!(a.commit("t", &step(1)).unwrap(), 1);
    assert_eq!(b.commit("t", &step(2)).unwrap(), 2);
    // Without the function, whatever still commits went through the statement alone.
    let function = format!("{schema}.agentwal_commit");
    let args = common::pg::psql(&format!(
        "SELECT pg_get_function_identity_arguments('{function}'::regproc)"
    ));
    common::pg::psql(&format!(
        "ALTER FUNCTION {function}({args}) RENAME TO agentwal_commit_away"
    ));
    for n in 3..=10 {
        assert_eq!(a.commit("t", &step(n)).unwrap(), n, "steady state");
    }
    // b's hint is stale: the statement answers with the row, and b commits on it.
    let before = b.commit_round_trips();
    assert_eq!(b.commit("t", &step(11)).unwrap(), 11);
    assert_eq!(b.commit_round_trips() - before, 2);
    assert_eq!(b.commit_if("t", 11, &step(12)).unwrap(), 12);
    // A conflict on a known row is answered by the statement too.
    assert!(matches!(
        a.commit_if("t", 10, &step(13)),
        Err(Error::Conflict {
            expected: 10,
            actual: 12,
            ..
        })
    ));
    // A new task needs the function: its absence now shows.
    let new_task = a.commit("new", &step(1));
    assert!(new_task.is_err(), "{new_task:?}");
    common::pg::psql(&format!(
        "ALTER FUNCTION {schema}.agentwal_commit_away({args}) RENAME TO agentwal_commit"
    ));
    assert_eq!(a.commit("new", &step(1)).unwrap(), 1);
    // What the statement wrote reads as what the function writes.
    let reference: PgStore = common::pg::store("fast_path_reference", options("x", 1024));
    alternate(&[&reference], "t", 12);
    assert_same_history((&a, "t"), (&reference, "t"), 12);
}

/// Seqs 1 to `n` of task `x.1` on `x.0` hold the states of those of `y.1` on `y.0`, and
/// `x.0` verifies clean.
fn assert_same_history(x: (&PgStore, &str), y: (&PgStore, &str), n: u64) {
    for seq in 1..=n {
        let xs = x.0.load(x.1, seq).unwrap().unwrap();
        let ys = y.0.load(y.1, seq).unwrap().unwrap();
        assert_eq!(xs.state, ys.state, "seq {seq}");
    }
    let problems =
        x.0.verify_with(agentwal::BodyCheck::Require)
            .unwrap()
            .problems;
    assert!(problems.is_empty(), "{problems:?}");
}

/// Commits `n` deltas to `task`, alternating between `handles`; each returns the next seq.
fn alternate(handles: &[&PgStore], task: &str, n: u64) {
    for i in 1..=n {
        let h = handles[(i as usize) % handles.len()];
        assert_eq!(h.commit(task, &step(i)).unwrap(), i, "commit {i}");
    }
}

#[test]
fn handles_taking_turns_on_a_task_give_the_history_of_a_single_writer() {
    let schema = common::pg::fresh_schema("turns");
    let url = common::pg::url();
    // Every third checkpoint a snapshot: the decision is made on stale hints again and
    // again.
    let a: PgStore = PgStore::open(&url, options(&schema, 3)).unwrap();
    let b: PgStore = PgStore::open(&url, options(&schema, 3)).unwrap();
    let c: PgStore = PgStore::open(&url, options(&schema, 3)).unwrap();
    alternate(&[&a, &b, &c], "shared", 40);
    alternate(&[&a], "alone", 40);
    let shared = a.list_checkpoints("shared").unwrap();
    let alone = a.list_checkpoints("alone").unwrap();
    let shape = |l: &[agentwal::CheckpointInfo]| {
        l.iter()
            .map(|i| (i.seq, i.snapshot, i.bytes))
            .collect::<Vec<_>>()
    };
    assert_eq!(shape(&shared), shape(&alone));
    assert!(shared.iter().filter(|i| i.snapshot).count() >= 10);
    assert_same_history((&b, "shared"), (&b, "alone"), 40);

    // Two handles taking turns: each commit finds its hint stale (one call), then commits
    // (a second); no snapshot is due with the default policy.
    let d: PgStore = PgStore::open(&url, options(&schema, 1024)).unwrap();
    let e: PgStore = PgStore::open(&url, options(&schema, 1024)).unwrap();
    alternate(&[&d, &e], "pair", 4);
    for i in 5..=20 {
        let h = if i % 2 == 0 { &d } else { &e };
        let before = h.commit_round_trips();
        assert_eq!(h.commit("pair", &step(i)).unwrap(), i);
        assert_eq!(h.commit_round_trips() - before, 2, "commit {i}");
    }
}

#[test]
fn a_deleted_task_is_created_again_by_a_handle_with_an_old_hint() {
    let schema = common::pg::fresh_schema("deleted_hint");
    let url = common::pg::url();
    let a: PgStore = PgStore::open(&url, options(&schema, 4)).unwrap();
    let b: PgStore = PgStore::open(&url, options(&schema, 4)).unwrap();
    alternate(&[&a], "t", 7);
    b.delete_task("t").unwrap();
    // a's hint says seq 7 with a snapshot due; the task is new.
    assert_eq!(a.commit("t", &step(100)).unwrap(), 1);
    assert_eq!(a.commit("t", &step(101)).unwrap(), 2);
    let fresh = a.list_checkpoints("t").unwrap();
    assert_eq!(fresh.len(), 2);
    let state = b.load_latest("t").unwrap().unwrap();
    let direct: PgStore = common::pg::store("deleted_hint_direct", options("x", 4));
    direct.commit("t", &step(100)).unwrap();
    direct.commit("t", &step(101)).unwrap();
    assert_eq!(state.state, direct.load_latest("t").unwrap().unwrap().state);
}

/// The statements of schema version 2 (the build before the commit function), as that
/// build ran them: the fixture of an existing older schema.
const V2_DDL: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS schema_version (
        id integer PRIMARY KEY CHECK (id = 1),
        version integer NOT NULL
    )",
    "INSERT INTO schema_version (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
    "CREATE TABLE IF NOT EXISTS tasks (
        task bytea PRIMARY KEY,
        latest_seq bigint NOT NULL,
        latest_created_at_ms bigint NOT NULL,
        snapshot_bytes bigint NOT NULL,
        deltas_since_snapshot integer NOT NULL,
        delta_bytes_since_snapshot bigint NOT NULL,
        versions_since_snapshot integer[] NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS checkpoints (
        task bytea NOT NULL,
        seq bigint NOT NULL,
        created_at_ms bigint NOT NULL,
        schema_version integer NOT NULL,
        snapshot boolean NOT NULL,
        body bytea NOT NULL,
        origin_task bytea,
        origin_seq bigint,
        write_id text NOT NULL,
        PRIMARY KEY (task, seq)
    )",
    "CREATE TABLE IF NOT EXISTS calls (
        task bytea NOT NULL,
        call_id bytea NOT NULL,
        tool bytea NOT NULL,
        args bytea NOT NULL,
        result bytea,
        begun bigserial NOT NULL,
        created_at_ms bigint NOT NULL,
        PRIMARY KEY (task, call_id)
    )",
    "CREATE TABLE IF NOT EXISTS leases (
        task bytea PRIMARY KEY,
        epoch bigint NOT NULL,
        holder text NOT NULL,
        expires_at timestamptz NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS writes (
        write_id text PRIMARY KEY,
        task bytea,
        seq bigint,
        landed boolean NOT NULL,
        at timestamptz NOT NULL DEFAULT clock_timestamp()
    )",
    "CREATE TABLE IF NOT EXISTS writes_pruned (
        id integer PRIMARY KEY CHECK (id = 1),
        before_ms bigint NOT NULL
    )",
    "INSERT INTO writes_pruned (id, before_ms) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
    "CREATE INDEX IF NOT EXISTS writes_at ON writes (at)",
    "UPDATE schema_version SET version = 2 WHERE id = 1",
];

/// A fresh schema made by version 2's statements, with one task (seq 1 to 3, as version 2
/// wrote them: three deltas of `step`, the row's counters to match).
fn v2_schema(name: &str) -> String {
    let schema = common::pg::fresh_schema(name);
    let mut sql = format!("CREATE SCHEMA {schema}; SET search_path = {schema};");
    for s in V2_DDL {
        sql.push_str(s);
        sql.push(';');
    }
    common::pg::psql(&sql);
    // The task's rows, written through this build into a scratch schema and copied over.
    let scratch: PgStore = common::pg::store(&format!("{name}_src"), PgOptions::default());
    for n in 1..=3 {
        scratch.commit("old", &step(n)).unwrap();
    }
    let src = scratch.options().schema.clone();
    common::pg::psql(&format!(
        "INSERT INTO {schema}.tasks SELECT * FROM {src}.tasks;
         INSERT INTO {schema}.checkpoints SELECT * FROM {src}.checkpoints;
         INSERT INTO {schema}.writes SELECT * FROM {src}.writes;"
    ));
    schema
}

#[test]
fn a_schema_of_version_2_is_upgraded_in_place_and_commits() {
    let schema = v2_schema("upgrade_v2");
    let url = common::pg::url();
    // Not readable as it is: a writer must open it first.
    assert!(matches!(
        PgStore::<agentwal::AgentState>::open_read_only(&url, options(&schema, 1024)),
        Err(Error::Postgres { .. })
    ));
    let store: PgStore = PgStore::open(&url, options(&schema, 1024)).unwrap();
    assert_eq!(
        common::pg::psql(&format!("SELECT version FROM {schema}.schema_version")),
        "4"
    );
    assert_eq!(store.commit("old", &step(4)).unwrap(), 4);
    assert_eq!(store.commit("new", &step(1)).unwrap(), 1);
    assert_old_task_as_written_directly(&store, 4, "upgrade_v2_ref");
    // Opening again changes nothing; a read-only open now succeeds.
    let again: PgStore = PgStore::open(&url, options(&schema, 1024)).unwrap();
    assert_eq!(again.commit("old", &step(5)).unwrap(), 5);
    PgStore::<agentwal::AgentState>::open_read_only(&url, options(&schema, 1024)).unwrap();
}

#[test]
fn handles_opening_a_version_2_schema_at_once_all_upgrade_and_commit() {
    let schema = v2_schema("upgrade_at_once");
    let url = common::pg::url();
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let (schema, url) = (schema.clone(), url.clone());
            std::thread::spawn(move || {
                let store: PgStore = PgStore::open(&url, options(&schema, 1024)).unwrap();
                let task = format!("task{i}");
                for n in 1..=5 {
                    assert_eq!(store.commit(&task, &step(n)).unwrap(), n);
                }
                store.commit("old", &step(100 + i)).unwrap()
            })
        })
        .collect();
    let mut seqs: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    seqs.sort();
    assert_eq!(seqs, (4..12).collect::<Vec<u64>>());
    assert_eq!(
        common::pg::psql(&format!("SELECT version FROM {schema}.schema_version")),
        "4"
    );
    assert_eq!(
        common::pg::psql(&format!(
            "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = '{schema}' AND p.proname = 'agentwal_commit'"
        )),
        "1"
    );
}

/// A schema of version 3: version 2's tables and rows, and the commit function as version 3
/// created it (a row lock, then the checks).
fn v3_schema(name: &str) -> String {
    let schema = v2_schema(name);
    let function = include_str!("fixtures/pg-commit-fn-v3.sql");
    common::pg::psql(&format!(
        "SET search_path = {schema}; {function};
         UPDATE schema_version SET version = 3 WHERE id = 1;"
    ));
    schema
}

/// How many `agentwal_commit` functions of `schema` hold version 4's conditional UPDATE.
fn functions_with_fast_path(schema: &str) -> String {
    common::pg::psql(&format!(
        "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = '{schema}' AND p.proname = 'agentwal_commit'
           AND p.prosrc LIKE '%v_done := FOUND%'"
    ))
}

#[test]
fn a_schema_of_version_3_gets_the_new_commit_function_and_commits_on() {
    let schema = v3_schema("upgrade_v3");
    let url = common::pg::url();
    assert_eq!(functions_with_fast_path(&schema), "0");
    let first: PgStore = PgStore::open(&url, options(&schema, 1024)).unwrap();
    assert_eq!(
        common::pg::psql(&format!("SELECT version FROM {schema}.schema_version")),
        "4"
    );
    assert_eq!(functions_with_fast_path(&schema), "1");
    assert_eq!(first.commit("old", &step(4)).unwrap(), 4);
    // A second handle: its first commit of "old" has no hint (the checked path, `stale`),
    // then a hint the first handle's next commit makes stale.
    let other: PgStore = PgStore::open(&url, options(&schema, 1024)).unwrap();
    assert_eq!(other.commit("old", &step(5)).unwrap(), 5);
    assert_eq!(first.commit("old", &step(6)).unwrap(), 6);
    assert_eq!(other.commit("old", &step(7)).unwrap(), 7);
    assert!(matches!(
        other.commit_if("old", 6, &step(8)),
        Err(Error::Conflict { actual: 7, .. })
    ));
    assert_old_task_as_written_directly(&other, 7, "upgrade_v3_ref");
}

/// `store`'s task "old" holds the state of `step(1..=steps)` committed to a fresh schema
/// (`reference`), and `store` verifies clean.
fn assert_old_task_as_written_directly(store: &PgStore, steps: u64, reference: &str) {
    let direct: PgStore = common::pg::store(reference, PgOptions::default());
    for n in 1..=steps {
        direct.commit("old", &step(n)).unwrap();
    }
    assert_eq!(
        store.load_latest("old").unwrap().unwrap().state,
        direct.load_latest("old").unwrap().unwrap().state
    );
    assert!(
        store
            .verify_with(agentwal::BodyCheck::Require)
            .unwrap()
            .problems
            .is_empty()
    );
}

/// How each checkpoint body of `schema` whose task id `matches` (an SQL condition on
/// `task`) is compressed (`pglz`, `lz4`, or empty for one stored as it is), by task and seq.
fn body_compression(schema: &str, matches: &str) -> Vec<String> {
    common::pg::psql(&format!(
        "SELECT string_agg(coalesce(pg_column_compression(body), ''), ',' ORDER BY task, seq) \
         FROM \"{schema}\".checkpoints WHERE {matches}"
    ))
    .split(',')
    .map(str::to_string)
    .collect()
}

/// A delta whose message (8 KB of text) the server compresses when it stores it.
fn big_step(n: u64) -> AgentDelta {
    let text = format!("step {n}: ").repeat(800);
    AgentDelta::default()
        .message(agentwal::Message::user(text))
        .set("n", n as i64)
}

#[test]
fn large_values_are_compressed_with_lz4_where_the_server_has_it_and_read_either_way() {
    let lz4_supported = common::pg::psql(
        "SELECT coalesce((SELECT 'lz4' = ANY(enumvals) FROM pg_settings \
         WHERE name = 'default_toast_compression'), false)",
    ) == "t";
    let pglz_handle: PgStore = common::pg::store(
        "toast",
        PgOptions {
            toast_lz4: false,
            ..PgOptions::default()
        },
    );
    assert!(!pglz_handle.values_lz4());
    let schema = pglz_handle.options().schema.clone();
    for n in 1..=3 {
        pglz_handle.commit("t", &big_step(n)).unwrap();
    }
    const T: &str = "task = convert_to('t', 'UTF8')";
    assert_eq!(body_compression(&schema, T), ["pglz"; 3]);
    // A handle with the default, on the same schema, after the other.
    let lz4_handle: PgStore = PgStore::open(&common::pg::url(), options(&schema, 64)).unwrap();
    assert_eq!(lz4_handle.values_lz4(), lz4_supported);
    // Sessions it opens later (concurrent calls) are switched too, not only the first.
    std::thread::scope(|s| {
        for t in 0..4 {
            let h = &lz4_handle;
            s.spawn(move || h.commit(&format!("u{t}"), &big_step(1)).unwrap());
        }
    });
    for n in 4..=6 {
        lz4_handle.commit("t", &big_step(n)).unwrap();
    }
    let expected = if lz4_supported { "lz4" } else { "pglz" };
    assert_eq!(
        body_compression(&schema, T),
        ["pglz", "pglz", "pglz", expected, expected, expected]
    );
    assert_eq!(
        body_compression(&schema, &format!("NOT {T}")),
        [expected; 4]
    );
    // Both handles read both kinds of body, into the same state.
    for h in [&pglz_handle, &lz4_handle] {
        let latest = h.load_latest("t").unwrap().unwrap();
        assert_eq!(latest.seq, 6);
        assert_eq!(latest.state.messages.len(), 6);
        assert_eq!(
            latest.state.messages[0].content,
            big_step(1).messages[0].content
        );
    }
}

/// The one-statement load of the latest state refuses rows that contradict the task's row
/// (deleted behind agentwal's back) with an error naming the task, never a state folded
/// from what is left, and never a panic.
#[test]
fn a_latest_load_from_missing_rows_is_an_error_not_a_state() {
    let store: PgStore = common::pg::store("missing_rows", options("", 4));
    let schema = store.options().schema.clone();
    for n in 1..=10 {
        store.commit("gap", &step(n)).unwrap();
        store.commit("gone", &step(n)).unwrap();
    }
    let fresh = || PgStore::<agentwal::AgentState>::open(&common::pg::url(), options(&schema, 4));
    assert_eq!(
        fresh().unwrap().load_latest("gap").unwrap().unwrap().seq,
        10
    );
    // A delta in the middle of the fold, and every row of the other task.
    common::pg::psql(&format!(
        "DELETE FROM \"{schema}\".checkpoints WHERE task = convert_to('gap', 'UTF8') AND seq = 9; \
         DELETE FROM \"{schema}\".checkpoints WHERE task = convert_to('gone', 'UTF8')"
    ));
    for task in ["gap", "gone"] {
        match fresh().unwrap().load_latest(task) {
            Err(Error::Postgres { message, .. }) => {
                assert!(message.contains("inconsistent"), "{task}: {message}")
            }
            other => panic!("{task}: {other:?}"),
        }
    }
}

#[test]
fn a_snapshot_commit_reads_the_row_and_the_state_in_one_round_trip() {
    let schema = common::pg::fresh_schema("snapshot_trips");
    let url = common::pg::url();
    let a: PgStore = PgStore::open(&url, options(&schema, 4)).unwrap();
    assert_eq!(a.commit("t", &step(1)).unwrap(), 1);
    let mut trips = vec![];
    for n in 2..=16 {
        let before = a.commit_round_trips();
        assert_eq!(a.commit("t", &step(n)).unwrap(), n);
        trips.push((n, a.commit_round_trips() - before));
    }
    let snapshots: Vec<u64> = a
        .list_checkpoints("t")
        .unwrap()
        .iter()
        .filter(|i| i.snapshot)
        .map(|i| i.seq)
        .collect();
    assert_eq!(snapshots, [4, 8, 12, 16]);
    for (n, t) in trips {
        // A snapshot: one statement reads the row and the state, one writes. A delta: one.
        let expected = if snapshots.contains(&n) { 2 } else { 1 };
        assert_eq!(t, expected, "commit {n}");
    }
    // A snapshot due on a stale hint costs no more: the read gives the row as it is.
    let b: PgStore = PgStore::open(&url, options(&schema, 4)).unwrap();
    for n in 17..=19 {
        assert_eq!(a.commit("t", &step(n)).unwrap(), n);
    }
    let before = b.commit_round_trips();
    assert_eq!(b.commit("t", &step(20)).unwrap(), 20);
    // b has no hint of t: it prepares its two statements (2) and calls the function,
    // whose answer (stale) gives the row (1), on which a snapshot is due: then the read and
    // the write (2).
    assert_eq!(b.commit_round_trips() - before, 5);
    let last = b.list_checkpoints("t").unwrap();
    assert!(last.last().unwrap().snapshot);
    let reference: PgStore = common::pg::store("snapshot_trips_ref", options("x", 1024));
    alternate(&[&reference], "t", 20);
    assert_same_history((&b, "t"), (&reference, "t"), 20);
}
