//! The commit function: `agentwal_commit`, created in the schema (schema version 3; its
//! usual case one conditional `UPDATE` since version 4), does a whole commit in one
//! statement, so a commit is one round trip and one implicit transaction (docs/postgres.md
//! §2). It holds no rule of its own beyond the checks: the client decides delta or snapshot
//! and the new counters from its hint of the task's row, and the function writes only if
//! the row is the one the decision was made for.

use tokio_postgres::Row;
use tokio_postgres::types::Type;

use super::conn::{Attempt, Fail, RowExt};
use super::hint::Hint;
use super::statements::{self, Session};
use crate::store::policy::SnapshotCounters;

/// Creates (or replaces) the commit function. Arguments: task, writer's epoch (NULL: no
/// lease), `commit_if`'s expected seq (NULL: none); the row the decision was made for
/// (latest seq, snapshot bytes, deltas and delta bytes since the snapshot, schema versions;
/// a NULL latest seq only reads the row); the write id, the client's time, the schema
/// version, snapshot or delta, the body; the row's new counters and versions; retention's
/// keep-count bound (NULL: no retention) and age cutoff (NULL: none).
///
/// Steps: the fence check (the lease row read `FOR SHARE`, as `FENCE_SQL`, judged as
/// `judge_fence`); when the row was decided on and `commit_if` expects its seq (or nothing),
/// one conditional `UPDATE` of the task row that matches only the row decided on (schema
/// version 4). Otherwise, or if it matched nothing, the checked path: the task row locked
/// `FOR UPDATE` (an absent row reads as an empty one, and is created only if the commit goes
/// ahead; a concurrent creator's row makes the function start again on it); `commit_if`'s
/// check; the row against the decision's (`stale`: nothing written, the row's values
/// returned); the row's update. Then the write id (as `RECORD_WRITE_SQL`), the checkpoint and
/// retention (as the prune of docs/postgres.md §2). Status: `ok`, `stale`, `conflict` or `fenced`; with the lease
/// (epoch, live) and the row as it now is (for `fenced`: NULLs).
pub(super) const CREATE_FUNCTION_SQL: &str = r#"
CREATE OR REPLACE FUNCTION agentwal_commit(
    p_task bytea, p_epoch bigint, p_expected bigint,
    p_latest bigint, p_snapshot_bytes bigint, p_deltas integer, p_delta_bytes bigint,
    p_versions integer[],
    p_write_id text, p_now_ms bigint, p_schema_version integer, p_snapshot boolean,
    p_body bytea,
    p_new_snapshot_bytes bigint, p_new_deltas integer, p_new_delta_bytes bigint,
    p_new_versions integer[],
    p_by_count bigint, p_cutoff_ms bigint,
    OUT o_status text, OUT o_epoch bigint, OUT o_live boolean,
    OUT o_latest bigint, OUT o_created_at_ms bigint, OUT o_snapshot_bytes bigint,
    OUT o_deltas integer, OUT o_delta_bytes bigint, OUT o_versions integer[])
LANGUAGE plpgsql AS $fn$
DECLARE
    r tasks%ROWTYPE;
    v_new boolean;
    v_seq bigint;
    v_at bigint;
    v_done boolean := false;
BEGIN
    SELECT l.epoch, l.expires_at > clock_timestamp() INTO o_epoch, o_live
        FROM leases l WHERE l.task = p_task FOR SHARE;
    IF NOT (CASE WHEN o_epoch IS NULL THEN p_epoch IS NULL
                 WHEN p_epoch IS NULL THEN NOT o_live
                 ELSE o_epoch = p_epoch END) THEN
        o_status := 'fenced';
        RETURN;
    END IF;
    -- The usual case, the row as decided on: one conditional UPDATE takes the row lock
    -- and checks the row at once (a concurrent writer's update makes it match nothing:
    -- READ COMMITTED re-reads the row it waited for). Anything else takes the checked
    -- path below, which tells stale from conflict from a new task.
    IF p_latest IS NOT NULL AND (p_expected IS NULL OR p_expected = p_latest) THEN
        UPDATE tasks t SET latest_seq = p_latest + 1,
            latest_created_at_ms = greatest(p_now_ms, t.latest_created_at_ms),
            snapshot_bytes = p_new_snapshot_bytes, deltas_since_snapshot = p_new_deltas,
            delta_bytes_since_snapshot = p_new_delta_bytes,
            versions_since_snapshot = p_new_versions
        WHERE t.task = p_task AND t.latest_seq = p_latest
            AND t.snapshot_bytes = p_snapshot_bytes AND t.deltas_since_snapshot = p_deltas
            AND t.delta_bytes_since_snapshot = p_delta_bytes
            AND t.versions_since_snapshot = p_versions
        RETURNING t.latest_seq, t.latest_created_at_ms INTO v_seq, v_at;
        v_done := FOUND;
    END IF;
    IF NOT v_done THEN
        SELECT t.* INTO r FROM tasks t WHERE t.task = p_task FOR UPDATE;
        v_new := NOT FOUND;
        IF v_new THEN
            r.task := p_task; r.latest_seq := 0; r.latest_created_at_ms := 0;
            r.snapshot_bytes := 0; r.deltas_since_snapshot := 0;
            r.delta_bytes_since_snapshot := 0; r.versions_since_snapshot := '{}';
        END IF;
        o_latest := r.latest_seq; o_created_at_ms := r.latest_created_at_ms;
        o_snapshot_bytes := r.snapshot_bytes; o_deltas := r.deltas_since_snapshot;
        o_delta_bytes := r.delta_bytes_since_snapshot; o_versions := r.versions_since_snapshot;
        IF p_expected IS NOT NULL AND p_expected <> r.latest_seq THEN
            o_status := 'conflict';
            RETURN;
        END IF;
        IF (r.latest_seq, r.snapshot_bytes, r.deltas_since_snapshot,
            r.delta_bytes_since_snapshot, r.versions_since_snapshot)
           IS DISTINCT FROM (p_latest, p_snapshot_bytes, p_deltas, p_delta_bytes, p_versions) THEN
            o_status := 'stale';
            RETURN;
        END IF;
        IF v_new THEN
            INSERT INTO tasks (task, latest_seq, latest_created_at_ms, snapshot_bytes,
                deltas_since_snapshot, delta_bytes_since_snapshot, versions_since_snapshot)
            VALUES (p_task, 0, 0, 0, 0, 0, '{}') ON CONFLICT (task) DO NOTHING;
            IF NOT FOUND THEN
                SELECT * INTO o_status, o_epoch, o_live, o_latest, o_created_at_ms,
                    o_snapshot_bytes, o_deltas, o_delta_bytes, o_versions
                FROM agentwal_commit(p_task, p_epoch, p_expected, p_latest, p_snapshot_bytes,
                    p_deltas, p_delta_bytes, p_versions, p_write_id, p_now_ms,
                    p_schema_version, p_snapshot, p_body, p_new_snapshot_bytes, p_new_deltas,
                    p_new_delta_bytes, p_new_versions, p_by_count, p_cutoff_ms);
                RETURN;
            END IF;
        END IF;
        v_seq := r.latest_seq + 1;
        v_at := greatest(p_now_ms, r.latest_created_at_ms);
        UPDATE tasks SET latest_seq = v_seq, latest_created_at_ms = v_at,
            snapshot_bytes = p_new_snapshot_bytes, deltas_since_snapshot = p_new_deltas,
            delta_bytes_since_snapshot = p_new_delta_bytes,
            versions_since_snapshot = p_new_versions
        WHERE task = p_task;
    END IF;
    INSERT INTO writes (write_id, task, seq, landed) VALUES (p_write_id, p_task, v_seq, true);
    INSERT INTO checkpoints (task, seq, created_at_ms, schema_version, snapshot, body,
        origin_task, origin_seq, write_id)
    VALUES (p_task, v_seq, v_at, p_schema_version, p_snapshot, p_body, NULL, NULL,
        p_write_id);
    IF p_by_count IS NOT NULL THEN
        DELETE FROM checkpoints c WHERE c.task = p_task AND c.seq < (
            SELECT max(s.seq) FROM checkpoints s
            WHERE s.task = p_task AND s.snapshot AND s.seq <= greatest(
                p_by_count,
                CASE WHEN p_cutoff_ms IS NULL THEN 0 ELSE coalesce(
                    (SELECT min(y.seq) FROM checkpoints y
                     WHERE y.task = p_task AND y.created_at_ms >= p_cutoff_ms), v_seq) END));
    END IF;
    o_status := 'ok'; o_latest := v_seq; o_created_at_ms := v_at;
    o_snapshot_bytes := p_new_snapshot_bytes; o_deltas := p_new_deltas;
    o_delta_bytes := p_new_delta_bytes; o_versions := p_new_versions;
END
$fn$"#;

/// The call of the commit function, prepared once per connection.
pub(super) const CALL_SQL: &str = "SELECT * FROM agentwal_commit($1, $2, $3, $4, $5, $6, $7, \
     $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)";

/// The parameter types of [`CALL_SQL`].
pub(super) const CALL_TYPES: &[Type] = &[
    Type::BYTEA,
    Type::INT8,
    Type::INT8,
    Type::INT8,
    Type::INT8,
    Type::INT4,
    Type::INT8,
    Type::INT4_ARRAY,
    Type::TEXT,
    Type::INT8,
    Type::INT4,
    Type::BOOL,
    Type::BYTEA,
    Type::INT8,
    Type::INT4,
    Type::INT8,
    Type::INT4_ARRAY,
    Type::INT8,
    Type::INT8,
];

/// One call's arguments.
pub(super) struct Call<'a> {
    pub task: &'a str,
    pub epoch: Option<u64>,
    pub expected: Option<u64>,
    /// The row the decision was made for. (The function also takes none, and then only
    /// reads the row; no call of this build asks for that.)
    pub decided_on: &'a Hint,
    pub write_id: &'a str,
    pub now_ms: u64,
    pub schema_version: u32,
    pub snapshot: bool,
    pub body: &'a [u8],
    /// The row's counters and versions after this checkpoint.
    pub after: (SnapshotCounters, &'a [i32]),
    /// Retention: the keep-count bound (`None`: no retention) and the age cutoff.
    pub prune: Option<(u64, Option<u64>)>,
}

/// What the function answered: the status, and for all but `Fenced` the task's row as it
/// now is.
pub(super) enum Answer {
    /// Committed; the row after the commit.
    Ok(Hint),
    /// The row is not the one the decision was made for; nothing was written.
    Stale(Hint),
    /// `commit_if`'s expected seq is not the row's latest; nothing was written.
    Conflict(Hint),
    /// The fence check refused the write: the lease as read, `(epoch, live)`.
    Fenced(Option<(u64, bool)>),
}

/// `v` as a PostgreSQL `bigint` (clamped: the counters never get near the bound).
pub(super) fn int(v: u64) -> i64 {
    v.min(i64::MAX as u64) as i64
}

/// The task's row as an answer carries it, in its columns 3 to 8 (the commit function's
/// answer and the usual case's statement's alike).
pub(super) fn answered_row(row: &Row) -> Attempt<Hint> {
    let u = |i: usize| row.col::<i64>(i).map(|v| v as u64);
    Ok(Hint {
        latest_seq: u(3)?,
        latest_created_at_ms: u(4)?,
        counters: SnapshotCounters {
            snapshot_bytes: u(5)?,
            deltas_since_snapshot: row.col::<i32>(6)? as u32,
            delta_bytes_since_snapshot: u(7)?,
        },
        versions: row.col(8)?,
    })
}

/// Calls the commit function: one statement, one round trip.
pub(super) async fn call(c: &impl Session, a: &Call<'_>) -> Attempt<Answer> {
    let d = a.decided_on;
    let (after, after_versions) = a.after;
    let by_count = a.prune.map(|(n, _)| int(n));
    let cutoff = a.prune.and_then(|(_, c)| c).map(int);
    let row = statements::query_opt(
        c,
        CALL_SQL,
        &[
            (&a.task.as_bytes(), Type::BYTEA),
            (&a.epoch.map(int), Type::INT8),
            (&a.expected.map(int), Type::INT8),
            (&int(d.latest_seq), Type::INT8),
            (&int(d.counters.snapshot_bytes), Type::INT8),
            (&(d.counters.deltas_since_snapshot as i32), Type::INT4),
            (&int(d.counters.delta_bytes_since_snapshot), Type::INT8),
            (&d.versions.as_slice(), Type::INT4_ARRAY),
            (&a.write_id, Type::TEXT),
            (&int(a.now_ms), Type::INT8),
            (&(a.schema_version as i32), Type::INT4),
            (&a.snapshot, Type::BOOL),
            (&a.body, Type::BYTEA),
            (&int(after.snapshot_bytes), Type::INT8),
            (&(after.deltas_since_snapshot as i32), Type::INT4),
            (&int(after.delta_bytes_since_snapshot), Type::INT8),
            (&after_versions, Type::INT4_ARRAY),
            (&by_count, Type::INT8),
            (&cutoff, Type::INT8),
        ],
    )
    .await?;
    let Some(row) = row else {
        return Err(unexpected("no row"));
    };
    let lease = match row.col::<Option<i64>>(1)? {
        Some(epoch) => Some((epoch as u64, row.col::<Option<bool>>(2)?.unwrap_or(false))),
        None => None,
    };
    let status = row.col::<&str>(0)?;
    if status == "fenced" {
        return Ok(Answer::Fenced(lease));
    }
    let hint = answered_row(&row)?;
    match status {
        "ok" => Ok(Answer::Ok(hint)),
        "stale" => Ok(Answer::Stale(hint)),
        "conflict" => Ok(Answer::Conflict(hint)),
        other => Err(unexpected(&format!("status {other:?}"))),
    }
}

/// An answer of the commit function that this build did not expect.
fn unexpected(what: &str) -> Fail {
    Fail::Api(crate::error::Error::Postgres {
        context: "committing a checkpoint".into(),
        message: format!(
            "the commit function (agentwal_commit) answered {what}; is the schema this build's (PgOptions::schema)?"
        ),
    })
}
