//! The commit's usual case as one prepared statement, sent by the client before the
//! commit function (`commit_fn.rs`): when the call carries the task's row as it decided on
//! it, the statement's conditional `UPDATE` of that row, the `writes` row and the
//! checkpoint are one executor run, where the function's PL/pgSQL runs each as a statement
//! of its own (measured in bench-results/design-measurements.md: about a tenth fewer
//! server instructions per commit). It writes exactly what the function's usual case
//! writes, under the same checks. Whatever it cannot settle (a new or absent task, a fence
//! that refuses, a row changed between its snapshot and its `UPDATE`) goes to the function,
//! which settles every case (docs/postgres.md §2).

use tokio_postgres::types::Type;

use super::commit_fn::{Answer, Call, answered_row, int};
use super::conn::{Attempt, RowExt};
use super::hint::Hint;
use super::statements::{self, Session};

/// The statement. Arguments: task, writer's epoch (NULL: no lease); the row decided on
/// (latest seq, snapshot bytes, deltas and delta bytes since the snapshot, schema
/// versions); write id, the client's time, schema version, snapshot or delta, body; the
/// row's new counters and versions.
///
/// The lease row is read `FOR SHARE` (the fence check of `FENCE_SQL`, judged as the
/// function judges it: no lease admits only a writer without one, a lease admits its
/// epoch, or anyone once expired if the writer holds none) and the task row is updated
/// only if it is the row decided on and the fence admits the writer. Its row, none if the
/// task has no row: the new latest seq and time if it wrote (NULLs if not); the fence's
/// verdict; the task row as the statement's snapshot saw it.
pub(super) const FAST_SQL: &str = "\
WITH f AS (SELECT CASE WHEN $2::int8 IS NULL THEN NOT (l.expires_at > clock_timestamp()) \
                       ELSE l.epoch = $2 END AS admits \
           FROM leases l WHERE l.task = $1 FOR SHARE), \
u AS (UPDATE tasks t SET latest_seq = $3 + 1, \
        latest_created_at_ms = greatest($9, t.latest_created_at_ms), \
        snapshot_bytes = $13, deltas_since_snapshot = $14, \
        delta_bytes_since_snapshot = $15, versions_since_snapshot = $16 \
      WHERE t.task = $1 AND t.latest_seq = $3 AND t.snapshot_bytes = $4 \
        AND t.deltas_since_snapshot = $5 AND t.delta_bytes_since_snapshot = $6 \
        AND t.versions_since_snapshot = $7 AND coalesce((SELECT admits FROM f), $2 IS NULL) \
      RETURNING t.latest_seq, t.latest_created_at_ms), \
w AS (INSERT INTO writes (write_id, task, seq, landed) \
      SELECT $8, $1, u.latest_seq, true FROM u), \
c AS (INSERT INTO checkpoints (task, seq, created_at_ms, schema_version, snapshot, body, \
        origin_task, origin_seq, write_id) \
      SELECT $1, u.latest_seq, u.latest_created_at_ms, $10, $11, $12, NULL, NULL, $8 FROM u) \
SELECT u.latest_seq, u.latest_created_at_ms, coalesce((SELECT admits FROM f), $2 IS NULL), \
       r.latest_seq, r.latest_created_at_ms, r.snapshot_bytes, r.deltas_since_snapshot, \
       r.delta_bytes_since_snapshot, r.versions_since_snapshot \
FROM tasks r LEFT JOIN u ON true WHERE r.task = $1";

/// The parameter types of [`FAST_SQL`].
pub(super) const FAST_TYPES: &[Type] = &[
    Type::BYTEA,
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
];

/// The row a call decided on, if the statement may take it: a task that exists (seq > 0),
/// `commit_if` expecting that seq or nothing, and no retention to apply (the function
/// prunes).
pub(super) fn eligible<'a>(a: &Call<'a>) -> Option<&'a Hint> {
    let hint = a.decided_on;
    let expected_ok = a.expected.is_none_or(|e| e == hint.latest_seq);
    (hint.latest_seq > 0 && expected_ok && a.prune.is_none()).then_some(hint)
}

/// Runs the statement for a call [`eligible`] admitted (`hint`): its answer, or `None`
/// when the commit function must settle the call (nothing was written).
pub(super) async fn call(c: &impl Session, a: &Call<'_>, hint: &Hint) -> Attempt<Option<Answer>> {
    let (after, after_versions) = a.after;
    let row = statements::query_opt(
        c,
        FAST_SQL,
        &[
            (&a.task.as_bytes(), Type::BYTEA),
            (&a.epoch.map(int), Type::INT8),
            (&int(hint.latest_seq), Type::INT8),
            (&int(hint.counters.snapshot_bytes), Type::INT8),
            (&(hint.counters.deltas_since_snapshot as i32), Type::INT4),
            (&int(hint.counters.delta_bytes_since_snapshot), Type::INT8),
            (&hint.versions.as_slice(), Type::INT4_ARRAY),
            (&a.write_id, Type::TEXT),
            (&int(a.now_ms), Type::INT8),
            (&(a.schema_version as i32), Type::INT4),
            (&a.snapshot, Type::BOOL),
            (&a.body, Type::BYTEA),
            (&int(after.snapshot_bytes), Type::INT8),
            (&(after.deltas_since_snapshot as i32), Type::INT4),
            (&int(after.delta_bytes_since_snapshot), Type::INT8),
            (&after_versions, Type::INT4_ARRAY),
        ],
    )
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    if let Some(seq) = row.col::<Option<i64>>(0)? {
        return Ok(Some(Answer::Ok(Hint {
            latest_seq: seq as u64,
            latest_created_at_ms: row.col::<i64>(1)? as u64,
            counters: after,
            versions: after_versions.to_vec(),
        })));
    }
    if row.col::<Option<bool>>(2)? != Some(true) {
        return Ok(None);
    }
    Ok(judge(a.expected, hint, answered_row(&row)?))
}

/// What the function's checked path would answer on `seen`, a row other than the one
/// decided on: `commit_if`'s conflict first, then stale. `None` when `seen` is the row
/// decided on, yet the update missed it: a writer changed it after the statement's
/// snapshot, and the function, which locks the row, must look.
fn judge(expected: Option<u64>, decided: &Hint, seen: Hint) -> Option<Answer> {
    let same = seen.latest_seq == decided.latest_seq
        && seen.counters == decided.counters
        && seen.versions == decided.versions;
    match (same, expected) {
        (true, _) => None,
        (false, Some(e)) if e != seen.latest_seq => Some(Answer::Conflict(seen)),
        (false, _) => Some(Answer::Stale(seen)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::policy::SnapshotCounters;

    fn row(seq: u64, deltas: u32) -> Hint {
        Hint {
            latest_seq: seq,
            latest_created_at_ms: 1_000 + seq,
            counters: SnapshotCounters {
                snapshot_bytes: 10,
                deltas_since_snapshot: deltas,
                delta_bytes_since_snapshot: 20,
            },
            versions: vec![1],
        }
    }

    #[test]
    fn a_row_seen_as_decided_on_goes_to_the_function() {
        let decided = row(5, 2);
        let mut seen = row(5, 2);
        seen.latest_created_at_ms = 7; // not part of the decision
        assert!(judge(None, &decided, seen.clone()).is_none());
        assert!(judge(Some(5), &decided, seen).is_none());
    }

    #[test]
    fn another_row_is_a_conflict_before_it_is_stale() {
        let decided = row(5, 2);
        assert!(matches!(
            judge(Some(5), &decided, row(6, 3)),
            Some(Answer::Conflict(h)) if h.latest_seq == 6
        ));
        assert!(matches!(
            judge(None, &decided, row(6, 3)),
            Some(Answer::Stale(h)) if h.latest_seq == 6
        ));
        // Same seq, other counters (the task deleted and written again): stale, not a
        // conflict, for a `commit_if` expecting that seq.
        assert!(matches!(
            judge(Some(5), &decided, row(5, 0)),
            Some(Answer::Stale(_))
        ));
    }
}
