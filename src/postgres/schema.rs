//! The tables, the commit function and their migrations (docs/postgres.md §1). Migrations
//! run outside transactions, one statement at a time, each safe to run again (`IF NOT
//! EXISTS`, `CREATE OR REPLACE`), under a session advisory lock so that handles opening at
//! once migrate one after another: a crash midway leaves a version that the next open
//! finishes. The usual open, of a schema at this build's version, is one statement and
//! takes no lock: a migration raises the version only after its statements committed, so a
//! schema that reads as current is.

use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

use super::commit_fn::CREATE_FUNCTION_SQL;
use super::conn::{Attempt, Fail, RowExt};
use crate::error::Error;

/// The schema version this build writes and reads.
pub(crate) const SCHEMA_VERSION: i32 = 4;

/// The statements taking the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&[&str]] = &[
    &[
        // One row per task that has a checkpoint or a tool call: the snapshot policy's
        // counters, the schema versions of the records its latest state folds from (docs/store.md §6),
        // and the row every write of the task locks first.
        "CREATE TABLE IF NOT EXISTS tasks (
        task bytea PRIMARY KEY,
        latest_seq bigint NOT NULL,
        latest_created_at_ms bigint NOT NULL,
        snapshot_bytes bigint NOT NULL,
        deltas_since_snapshot integer NOT NULL,
        delta_bytes_since_snapshot bigint NOT NULL,
        versions_since_snapshot integer[] NOT NULL
    )",
        // A checkpoint's body is the postcard encoding of the delta or the state, exactly as
        // in a local store's record; `origin_*` only on seq 1 of a fork.
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
        // Never deleted with the task: an epoch must only grow, or a fenced writer could match
        // a later lease's epoch.
        "CREATE TABLE IF NOT EXISTS leases (
        task bytea PRIMARY KEY,
        epoch bigint NOT NULL,
        holder text NOT NULL,
        expires_at timestamptz NOT NULL
    )",
        // Every write transaction inserts its write id here; `resolve` inserts the id as not
        // landed, which either waits for the write's transaction to end or keeps it from ever
        // committing (docs/postgres.md §4).
        "CREATE TABLE IF NOT EXISTS writes (
        write_id text PRIMARY KEY,
        task bytea,
        seq bigint,
        landed boolean NOT NULL,
        at timestamptz NOT NULL DEFAULT clock_timestamp()
    )",
    ],
    // Version 2: `writes` is pruned (docs/postgres.md §4). The watermark: every write id created
    // (by the milliseconds its id starts with) before `before_ms` may have been deleted, so
    // `resolve` refuses to declare such an id not landed. 0: nothing pruned yet.
    &[
        "CREATE TABLE IF NOT EXISTS writes_pruned (
        id integer PRIMARY KEY CHECK (id = 1),
        before_ms bigint NOT NULL
    )",
        "INSERT INTO writes_pruned (id, before_ms) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
        "CREATE INDEX IF NOT EXISTS writes_at ON writes (at)",
    ],
    // Version 3: the commit function, a whole commit in one statement (docs/postgres.md §2).
    // It creates today's text, which version 4 then creates again: the same statement.
    &[CREATE_FUNCTION_SQL],
    // Version 4: the commit function's usual case is one conditional UPDATE of the task's
    // row instead of a row lock and then an UPDATE (same answers, one WAL record less).
    &[CREATE_FUNCTION_SQL],
];

/// The schema's version as stored, `None` if it has no `schema_version` table (or no
/// schema); one statement.
pub(super) async fn stored_version(c: &Client) -> Attempt<Option<i32>> {
    match c
        .query_typed_opt("SELECT version FROM schema_version WHERE id = 1", &[])
        .await
    {
        Ok(row) => row.map(|r| r.col(0)).transpose(),
        Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Creates the schema or brings it to [`SCHEMA_VERSION`], for a schema that was not at it
/// when the caller read its version ([`stored_version`]): under the schema's advisory
/// lock, so that handles opening at once migrate one after another.
pub(super) async fn migrate(c: &mut Client, schema: &str) -> Attempt<()> {
    let key = format!("agentwal:{schema}");
    c.execute("SELECT pg_advisory_lock(hashtext($1))", &[&key])
        .await?;
    migrate_locked(c, schema).await?;
    c.execute("SELECT pg_advisory_unlock(hashtext($1))", &[&key])
        .await?;
    Ok(())
}

async fn migrate_locked(c: &mut Client, schema: &str) -> Attempt<()> {
    // The name was checked to be letters, digits and '_' (PgOptions::validate).
    c.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
        .await?;
    c.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_version (
            id integer PRIMARY KEY CHECK (id = 1),
            version integer NOT NULL
        )",
    )
    .await?;
    c.execute(
        "INSERT INTO schema_version (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
        &[],
    )
    .await?;
    let found: i32 = c
        .query_one("SELECT version FROM schema_version WHERE id = 1", &[])
        .await?
        .col(0)?;
    if found > SCHEMA_VERSION {
        return Err(Fail::Api(Error::Postgres {
            context: "checking the schema version".into(),
            message: format!(
                "schema {schema:?} is at version {found}, newer than this build's {SCHEMA_VERSION}; upgrade agentwal"
            ),
        }));
    }
    for (from, statements) in MIGRATIONS.iter().enumerate().skip(found.max(0) as usize) {
        for statement in *statements {
            c.batch_execute(statement).await?;
        }
        let to = from as i32 + 1;
        c.execute(
            "UPDATE schema_version SET version = $1 WHERE id = 1",
            &[&to],
        )
        .await?;
    }
    Ok(())
}

/// What a read-only open checks instead of migrating: the schema holds agentwal's tables at
/// this build's version. Creates nothing; every refusal says what to do.
pub(super) async fn check_readable(c: &mut Client, schema: &str) -> Attempt<()> {
    let refuse = |message: String| {
        Fail::Api(Error::Postgres {
            context: format!("opening schema {schema:?} read-only"),
            message,
        })
    };
    let row = c
        .query_one(
            "SELECT to_regclass(format('%I.schema_version', $1::text))::text IS NOT NULL,
                    to_regclass(format('%I.tasks', $1::text))::text IS NOT NULL",
            &[&schema],
        )
        .await?;
    if !row.col::<bool>(0)? || !row.col::<bool>(1)? {
        return Err(refuse(format!(
            "this database has no agentwal tables in schema {schema:?}: nothing to read, and a \
             read-only open creates nothing (a writer's PgStore::open or `agentwal migrate DIR URL` \
             creates them; another schema: --schema NAME, PgOptions::schema)"
        )));
    }
    let found = stored_version(c).await?.unwrap_or(0);
    if found > SCHEMA_VERSION {
        return Err(refuse(format!(
            "schema {schema:?} is at version {found}, newer than this build's {SCHEMA_VERSION}; upgrade agentwal"
        )));
    }
    if found < SCHEMA_VERSION {
        return Err(refuse(format!(
            "schema {schema:?} is at version {found}, older than this build's {SCHEMA_VERSION}; a \
             read-only open does not migrate it: open it once with a writer (PgStore::open) first"
        )));
    }
    Ok(())
}
