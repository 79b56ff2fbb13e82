//! The `writes` table's bounded lifetime (docs/postgres.md §4): rows older than
//! `PgOptions::write_ids_kept` are pruned by writes, commits keep working, and `resolve` of
//! a pruned id is an error, never a wrong `NotLanded`; recent ids and old-format ids whose
//! rows remain resolve as before.
#![cfg(feature = "postgres")]

mod common;

use std::time::Duration;

use agentwal::postgres::{PgOptions, PgStore, Resolution};
use agentwal::{AgentDelta, Error};

fn write_id_of(schema: &str, task: &str, seq: u64) -> String {
    common::pg::psql(&format!(
        "SELECT write_id FROM {schema}.checkpoints WHERE task = convert_to('{task}', 'UTF8') AND seq = {seq}"
    ))
}

fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

fn step(n: u64) -> AgentDelta {
    common::pg::probe_step(n)
}

#[test]
fn pruned_write_ids_are_an_error_to_resolve_and_fresh_ones_resolve() {
    let options = PgOptions {
        write_ids_kept: Duration::from_secs(1),
        ..PgOptions::default()
    };
    let store: PgStore = common::pg::store("writes_pruned", options);
    let schema = store.options().schema.clone();
    assert_eq!(
        common::pg::psql(&format!("SELECT before_ms FROM {schema}.writes_pruned")),
        "0"
    );

    assert_eq!(store.commit("t", &step(1)).unwrap(), 1);
    let first = write_id_of(&schema, "t", 1);
    assert!(first.split_once('-').is_some(), "a timed id: {first}");
    assert_eq!(
        store.resolve(&first).unwrap(),
        Resolution::Landed { seq: Some(1) }
    );
    // An id of the format before schema version 2 (32 hex digits), whose row exists.
    let old = "0123456789abcdef0123456789abcdef";
    common::pg::psql(&format!(
        "INSERT INTO {schema}.writes (write_id, task, seq, landed) VALUES ('{old}', 'x', 1, true)"
    ));

    std::thread::sleep(Duration::from_millis(1500));
    // Writes after the window prune: 64 writes per prune, and the window is 1 s.
    for n in 2..=140u64 {
        assert_eq!(store.commit("t", &step(n)).unwrap(), n);
    }
    let before_ms: u128 =
        common::pg::psql(&format!("SELECT before_ms FROM {schema}.writes_pruned"))
            .parse()
            .unwrap();
    assert!(before_ms > 0, "the watermark was raised");
    assert_eq!(
        common::pg::psql(&format!(
            "SELECT count(*) FROM {schema}.writes WHERE write_id IN ('{first}', '{old}')"
        )),
        "0",
        "the first write's row and the old-format row were pruned"
    );
    let rows: u64 = common::pg::psql(&format!("SELECT count(*) FROM {schema}.writes"))
        .parse()
        .unwrap();
    assert!(rows < 140, "{rows} rows of writes left of 141");

    // The landed, pruned write: an error saying so, never NotLanded.
    match store.resolve(&first) {
        Err(Error::Postgres { message, .. }) => {
            assert!(message.contains("no longer recorded"), "{message}")
        }
        other => panic!("resolve of a pruned id: {other:?}"),
    }
    // Asking again gives the same answer (nothing was inserted).
    assert!(matches!(store.resolve(&first), Err(Error::Postgres { .. })));
    // An old-format id once something was pruned: it may have landed, so an error too.
    assert!(matches!(store.resolve(old), Err(Error::Postgres { .. })));

    // A recent write still resolves; a recent id never sent is NotLanded.
    let last = write_id_of(&schema, "t", 140);
    assert_eq!(
        store.resolve(&last).unwrap(),
        Resolution::Landed { seq: Some(140) }
    );
    let never = format!("{}-{:032x}", now_ms(), 7);
    assert_eq!(store.resolve(&never).unwrap(), Resolution::NotLanded);
    assert_eq!(store.resolve(&never).unwrap(), Resolution::NotLanded);
    // An old-format id whose row exists still resolves from it.
    let old2 = "fedcba9876543210fedcba9876543210";
    common::pg::psql(&format!(
        "INSERT INTO {schema}.writes (write_id, task, seq, landed) VALUES ('{old2}', 'x', 9, true)"
    ));
    assert_eq!(
        store.resolve(old2).unwrap(),
        Resolution::Landed { seq: Some(9) }
    );
    // Commits keep working and the history is whole.
    assert_eq!(store.commit("t", &step(141)).unwrap(), 141);
    assert_eq!(store.list_checkpoints("t").unwrap().len(), 141);
}

#[test]
fn a_schema_at_version_1_is_migrated_to_the_current_version_and_resolves_as_before() {
    let schema = common::pg::fresh_schema("writes_v1");
    let options = PgOptions {
        schema: schema.clone(),
        ..PgOptions::default()
    };
    let store: PgStore = PgStore::open(&common::pg::url(), options.clone()).unwrap();
    store.commit("t", &step(1)).unwrap();
    let id = write_id_of(&schema, "t", 1);
    drop(store);
    // Back to version 1 (as a build before pruning left it), with an old-format id.
    common::pg::psql(&format!(
        "DROP TABLE {schema}.writes_pruned; DROP INDEX {schema}.writes_at; \
         UPDATE {schema}.schema_version SET version = 1; \
         INSERT INTO {schema}.writes (write_id, task, seq, landed) \
         VALUES ('00000000000000000000000000000001', 't', 1, true)"
    ));
    let store: PgStore = PgStore::open(&common::pg::url(), options.clone()).unwrap();
    assert_eq!(
        common::pg::psql(&format!("SELECT version FROM {schema}.schema_version")),
        "4"
    );
    assert_eq!(
        store.resolve("00000000000000000000000000000001").unwrap(),
        Resolution::Landed { seq: Some(1) }
    );
    assert_eq!(
        store.resolve(&id).unwrap(),
        Resolution::Landed { seq: Some(1) }
    );
    assert_eq!(
        store.resolve("00000000000000000000000000000002").unwrap(),
        Resolution::NotLanded
    );
    // Opening again runs no migration twice.
    let again: PgStore = PgStore::open(&common::pg::url(), options).unwrap();
    assert_eq!(again.commit("t", &step(2)).unwrap(), 2);
}

#[test]
fn write_ids_kept_of_zero_is_refused() {
    let options = PgOptions {
        write_ids_kept: Duration::ZERO,
        ..PgOptions::default()
    };
    let r = PgStore::<agentwal::AgentState>::open("host=/nonexistent", options);
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
}

#[test]
fn a_prune_that_meets_a_held_watermark_gives_up_at_its_lock_timeout_and_the_write_stands() {
    use std::io::Write;
    use std::process::{Command, Stdio};

    let options = PgOptions {
        write_ids_kept: Duration::from_secs(1),
        ..PgOptions::default()
    };
    let store: PgStore = common::pg::store("prune_lock", options);
    let schema = store.options().schema.clone();
    let watermark = || common::pg::psql(&format!("SELECT before_ms FROM {schema}.writes_pruned"));
    // A session that holds the watermark row as a resolve does while it waits for an open
    // write (`FOR SHARE`), in a transaction left open until it is told to commit.
    let mut holder = Command::new("runuser")
        .args(["-u", "postgres", "--", "psql", "-h", &common::pg::host()])
        .args([
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-qAt",
            "-v",
            "ON_ERROR_STOP=1",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("run psql");
    let mut to_holder = holder.stdin.take().expect("psql's stdin");
    writeln!(
        to_holder,
        "BEGIN; SELECT before_ms FROM {schema}.writes_pruned FOR SHARE;"
    )
    .unwrap();
    to_holder.flush().unwrap();
    // The holder's lock is taken once a prune waits for it: check that the row is locked.
    let locked = format!(
        "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = '{schema}' AND c.relname = 'writes_pruned' AND l.granted"
    );
    let started = std::time::Instant::now();
    while common::pg::psql(&locked) == "0" {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the holder never locked"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1200));

    // The 64th write prunes: it meets the lock, gives up after its `lock_timeout` (100 ms,
    // not the prune's 1 s bound), and the write's `Ok` stands.
    let mut slowest = Duration::ZERO;
    for n in 1..=64u64 {
        let t = std::time::Instant::now();
        assert_eq!(store.commit("t", &step(n)).unwrap(), n);
        slowest = slowest.max(t.elapsed());
    }
    assert!(
        slowest < Duration::from_millis(900),
        "a commit took {slowest:?}"
    );
    assert_eq!(
        watermark(),
        "0",
        "the prune held back by the lock changed nothing"
    );

    writeln!(to_holder, "COMMIT;").unwrap();
    drop(to_holder);
    assert!(holder.wait().unwrap().success());
    // The next prune, unhindered, raises the watermark and deletes what aged.
    for n in 65..=128u64 {
        assert_eq!(store.commit("t", &step(n)).unwrap(), n);
    }
    assert_ne!(watermark(), "0", "the next prune ran");
    assert_eq!(store.list_checkpoints("t").unwrap().len(), 128);
}

#[test]
fn a_prune_deletes_by_key_and_never_scans_the_whole_table() {
    let options = PgOptions {
        write_ids_kept: Duration::from_secs(60),
        ..PgOptions::default()
    };
    let store: PgStore = common::pg::store("prune_plan", options);
    let schema = store.options().schema.clone();
    // A busy fleet's week of write ids: most of them young, a few thousand aged out.
    let now = now_ms() as i64;
    common::pg::psql(&format!(
        "INSERT INTO {schema}.writes (write_id, task, seq, landed, at) \
         SELECT ({now} - g * 10)::text || '-' || md5(g::text), 'x', g, true, \
                to_timestamp(({now} - g * 10) / 1000.0) \
         FROM generate_series(1, 20000) g; \
         ANALYZE {schema}.writes"
    ));
    // Rows written two minutes or more before `now`: aged out whenever the prune runs,
    // and the oldest, which the index on `at` gives it first.
    let old = || {
        common::pg::psql(&format!(
            "SELECT count(*) FROM {schema}.writes WHERE at < to_timestamp(({now} - 120000) / 1000.0)"
        ))
        .parse::<u64>()
        .unwrap()
    };
    assert_eq!(old(), 8000);
    let plan = common::pg::psql(&format!(
        "SET search_path = {schema}; EXPLAIN (COSTS OFF) {}",
        agentwal::postgres::prune_statement(60_000)
    ));
    assert!(!plan.contains("Seq Scan"), "{plan}");
    assert!(plan.contains("writes_pkey"), "deleted by key: {plan}");
    // And it prunes: 1000 rows per 64 writes.
    for n in 1..=64u64 {
        assert_eq!(store.commit("t", &step(n)).unwrap(), n);
    }
    assert_eq!(old(), 7000);
}
