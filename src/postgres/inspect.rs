//! Read-side views for tools (the CLI) on PostgreSQL: task summaries, the whole call
//! journal, table sizes, and a full check of every task's rows, each reported in the
//! local store's types so that the CLI prints both backends alike.

use tokio_postgres::{Client, IsolationLevel};

use super::PgStore;
use super::conn::{Attempt, RowExt};
use super::load::{TASK_COLUMNS, TaskRow, utf8};
use crate::error::Result;
use crate::rules::body::At;
use crate::rules::{self, BodyMeta, retention};
use crate::state::State;
use crate::store::{
    BodyCheck, CallInfo, TASK_ID_BYTES_MAX, TaskInfo, UndecodedBodies, VerifyReport, now_ms,
    validate_id,
};

/// What a PostgreSQL store holds, summed over its tables (see [`PgStore::stats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PgStats {
    /// Tasks (rows of `tasks`).
    pub tasks: u64,
    /// Stored checkpoints, over all tasks (the retained ones and their fold bases).
    pub checkpoints: u64,
    /// How many of them are full snapshots.
    pub snapshots: u64,
    /// Tool calls in the journal, finished and pending.
    pub calls: u64,
    /// Bytes of the stored checkpoint bodies, call arguments and call results.
    pub stored_bytes: u64,
    /// What the schema's tables take in the database, indexes and TOAST included
    /// (`pg_total_relation_size`), dead row versions VACUUM has not reclaimed yet too.
    pub table_bytes: u64,
}

/// What [`PgStore::verify_with`] checked and found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PgVerifyReport {
    /// What was checked, in the local store's terms (`checkpoints`: rows checked).
    pub checked: VerifyReport,
    /// Rows that contradict each other or the rules (a gap in a task's seqs, a first
    /// stored checkpoint that no fold can start from, counters that do not match the
    /// rows, calls of no task, ...), one line each; empty when all is well. Each is
    /// damage: loads of the task may fail.
    pub problems: Vec<String>,
}

/// Starts a read-only transaction that sees one snapshot of the database.
async fn read_tx(c: &mut Client) -> Attempt<tokio_postgres::Transaction<'_>> {
    Ok(c.build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?)
}

impl<S: State> PgStore<S> {
    /// A summary of every task, sorted by id, as [`Store::task_infos`](crate::Store::task_infos)
    /// gives it: `checkpoints` counts the retained ones, `snapshots` the stored snapshot
    /// rows, `bytes` the stored bodies, call arguments and results.
    pub fn task_infos(&self) -> Result<Vec<TaskInfo>> {
        let keep = self.shared.options.keep_checkpoints.map(i64::from);
        let cutoff = retention::age_cutoff_ms(self.shared.options.max_age, now_ms());
        let cutoff = cutoff.map(|c| c.min(i64::MAX as u64) as i64);
        let mut infos = self.shared.run_read("summarizing tasks", async |c| {
            let tx = read_tx(c).await?;
            let rows = tx
                .query(
                    "SELECT t.task, t.latest_seq, t.latest_created_at_ms, a.retained, a.snapshots,
                         a.bytes + (SELECT coalesce(sum(octet_length(k.args)
                             + coalesce(octet_length(k.result), 0)), 0)::bigint
                             FROM calls k WHERE k.task = t.task),
                         (SELECT count(*) FROM calls k WHERE k.task = t.task),
                         o.origin_task, o.origin_seq, a.first_seq, r.from_seq
                     FROM tasks t
                     CROSS JOIN LATERAL (
                         SELECT greatest(1,
                             CASE WHEN $1::bigint IS NULL THEN 0
                                 ELSE t.latest_seq - $1::bigint + 1 END,
                             CASE WHEN $2::bigint IS NULL THEN 0 ELSE coalesce(
                                 (SELECT min(y.seq) FROM checkpoints y
                                  WHERE y.task = t.task AND y.created_at_ms >= $2::bigint),
                                 t.latest_seq) END) AS from_seq) r
                     CROSS JOIN LATERAL (
                         SELECT coalesce(min(c.seq), 0) AS first_seq,
                             count(*) FILTER (WHERE c.seq >= r.from_seq) AS retained,
                             count(*) FILTER (WHERE c.snapshot) AS snapshots,
                             coalesce(sum(octet_length(c.body)), 0)::bigint AS bytes
                         FROM checkpoints c WHERE c.task = t.task) a
                     LEFT JOIN checkpoints o ON o.task = t.task AND o.seq = 1",
                    &[&keep, &cutoff],
                )
                .await?;
            tx.commit().await?;
            rows.iter()
                .map(|r| {
                    let u = |i: usize| r.col::<i64>(i).map(|v| v as u64);
                    let latest_seq = u(1)?;
                    let origin: Option<Vec<u8>> = r.col(7)?;
                    let origin_seq: Option<i64> = r.col(8)?;
                    // As `list_checkpoints`: the origin while seq 1 is retained.
                    let seq1_retained = u(9)? == 1 && u(10)? <= 1;
                    let forked_from = match (origin, origin_seq) {
                        (Some(t), Some(s)) if seq1_retained => {
                            Some((utf8("origin task id", t)?, s as u64))
                        }
                        _ => None,
                    };
                    Ok(TaskInfo {
                        task: utf8("task id", r.col(0)?)?,
                        latest_seq,
                        last_commit_ms: u(2)?,
                        checkpoints: u(3)?,
                        snapshots: u(4)?,
                        bytes: u(5)?,
                        calls: u(6)?,
                        forked_from,
                    })
                })
                .collect::<Attempt<Vec<_>>>()
        })?;
        infos.sort_unstable_by(|a, b| a.task.cmp(&b.task));
        Ok(infos)
    }

    /// Every tool call of the task's journal, in the order they began (see
    /// [`Store::calls`](crate::Store::calls)).
    pub fn calls(&self, task: &str) -> Result<Vec<CallInfo>> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        self.shared.run_read("listing calls", async |c| {
            let rows = c
                .query(
                    "SELECT call_id, tool, args, result, created_at_ms FROM calls
                     WHERE task = $1 ORDER BY begun",
                    &[&task.as_bytes()],
                )
                .await?;
            rows.iter()
                .map(|r| {
                    Ok(CallInfo {
                        call_id: utf8("call id", r.col(0)?)?,
                        tool: utf8("tool name", r.col(1)?)?,
                        args: r.col(2)?,
                        result: r.col(3)?,
                        begun_at_ms: r.col::<i64>(4)? as u64,
                    })
                })
                .collect()
        })
    }

    /// Counts and sizes over the whole schema.
    pub fn stats(&self) -> Result<PgStats> {
        let schema = self.shared.options.schema.clone();
        self.shared.run_read("reading the store's size", async |c| {
            let tx = read_tx(c).await?;
            let r = tx
                .query_one(
                    "SELECT (SELECT count(*) FROM tasks),
                         (SELECT count(*) FROM checkpoints),
                         (SELECT count(*) FROM checkpoints WHERE snapshot),
                         (SELECT count(*) FROM calls),
                         (SELECT coalesce(sum(octet_length(body)), 0)::bigint FROM checkpoints)
                           + (SELECT coalesce(sum(octet_length(args)
                                + coalesce(octet_length(result), 0)), 0)::bigint FROM calls),
                         (SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
                            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                            WHERE n.nspname = $1 AND c.relkind = 'r')",
                    &[&schema],
                )
                .await?;
            tx.commit().await?;
            let u = |i: usize| r.col::<i64>(i).map(|v| v as u64);
            Ok(PgStats {
                tasks: u(0)?,
                checkpoints: u(1)?,
                snapshots: u(2)?,
                calls: u(3)?,
                stored_bytes: u(4)?,
                table_bytes: u(5)?,
            })
        })
    }

    /// Checks every task's rows, as [`Store::verify_with`](crate::Store::verify_with)
    /// checks a local store's records: each task's checkpoints have consecutive seqs up
    /// to its latest and start where a fold can (a snapshot, or seq 1), so every stored
    /// checkpoint folds; its row's snapshot counters and schema versions match its
    /// checkpoints; fork origins sit on seq 1 only; times never decrease; every call
    /// belongs to a task and its ids are UTF-8; and each body is decoded as `bodies`
    /// says. One transaction per task (each within the deadline). Damage is listed in
    /// [`PgVerifyReport::problems`]; `Err` is a failure to read (the server, the
    /// connection, a body that does not decode under [`BodyCheck::Require`]).
    pub fn verify_with(&self, bodies: BodyCheck) -> Result<PgVerifyReport> {
        let mut report = PgVerifyReport::default();
        let orphans = self.shared.run_read("verifying the journal", async |c| {
            let rows = c
                .query(
                    "SELECT DISTINCT task, 'calls' FROM calls k
                         WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.task = k.task)
                     UNION ALL SELECT DISTINCT task, 'checkpoints' FROM checkpoints c
                         WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.task = c.task)",
                    &[],
                )
                .await?;
            rows.iter()
                .map(|r| {
                    let task: Vec<u8> = r.col(0)?;
                    let table: String = r.col(1)?;
                    Ok(format!(
                        "{table} of task {:?}, which has no row in tasks",
                        String::from_utf8_lossy(&task)
                    ))
                })
                .collect::<Attempt<Vec<_>>>()
        })?;
        report.problems.extend(orphans);
        for task in self.task_ids_lossy()? {
            self.verify_task(&task, bodies, &mut report)?;
        }
        Ok(report)
    }

    /// Every task id, as stored (bytes), sorted; one that is not UTF-8 is a problem for
    /// `verify`, not a failure to list.
    fn task_ids_lossy(&self) -> Result<Vec<Vec<u8>>> {
        self.shared.run_read("listing tasks", async |c| {
            let rows = c.query("SELECT task FROM tasks", &[]).await?;
            let mut ids = rows
                .iter()
                .map(|r| r.col::<Vec<u8>>(0))
                .collect::<Attempt<Vec<_>>>()?;
            ids.sort_unstable();
            Ok(ids)
        })
    }

    fn verify_task(&self, id: &[u8], bodies: BodyCheck, out: &mut PgVerifyReport) -> Result<()> {
        let shown = String::from_utf8_lossy(id).into_owned();
        let (row, checkpoints, calls) = self.shared.run_read("verifying a task", async |c| {
            let tx = read_tx(c).await?;
            let sql = format!("SELECT {TASK_COLUMNS} FROM tasks t WHERE task = $1");
            let row = tx.query_opt(&sql, &[&id]).await?;
            let row = row.as_ref().map(TaskRow::from_row).transpose()?;
            let checkpoints = tx
                .query(
                    "SELECT seq, created_at_ms, schema_version, snapshot, body, origin_task,
                         origin_seq FROM checkpoints WHERE task = $1 ORDER BY seq",
                    &[&id],
                )
                .await?;
            let calls = tx
                .query(
                    "SELECT call_id, tool FROM calls WHERE task = $1 ORDER BY begun",
                    &[&id],
                )
                .await?;
            tx.commit().await?;
            let checkpoints = checkpoints
                .iter()
                .map(|r| {
                    Ok(StoredCheckpoint {
                        seq: r.col::<i64>(0)? as u64,
                        created_at_ms: r.col::<i64>(1)? as u64,
                        schema_version: r.col::<i32>(2)?,
                        snapshot: r.col(3)?,
                        body: r.col(4)?,
                        origin: r.col::<Option<Vec<u8>>>(5)?.is_some()
                            || r.col::<Option<i64>>(6)?.is_some(),
                    })
                })
                .collect::<Attempt<Vec<_>>>()?;
            let calls = calls
                .iter()
                .map(|r| Ok((r.col::<Vec<u8>>(0)?, r.col::<Vec<u8>>(1)?)))
                .collect::<Attempt<Vec<_>>>()?;
            Ok((row, checkpoints, calls))
        })?;
        // Deleted since it was listed: nothing to check.
        let Some(row) = row else { return Ok(()) };
        let mut problem = |what: String| out.problems.push(format!("task {shown:?}: {what}"));
        if std::str::from_utf8(id).is_err() {
            problem("its id is not UTF-8".into());
        }
        check_rows(&row, &checkpoints, &mut problem);
        for (call_id, tool) in &calls {
            if std::str::from_utf8(call_id).is_err() || std::str::from_utf8(tool).is_err() {
                let call = String::from_utf8_lossy(call_id);
                problem(format!(
                    "call {call:?}: its call id or tool name is not UTF-8"
                ));
            }
        }
        for cp in &checkpoints {
            decode_checked::<S>(&shown, cp, bodies, &mut out.checked)?;
        }
        out.checked.tasks += 1;
        out.checked.checkpoints += checkpoints.len() as u64;
        out.checked.calls += calls.len() as u64;
        Ok(())
    }
}

/// One stored checkpoint, as `verify` reads it.
struct StoredCheckpoint {
    seq: u64,
    created_at_ms: u64,
    schema_version: i32,
    snapshot: bool,
    body: Vec<u8>,
    origin: bool,
}

/// The checks of a task's rows against each other (everything but the bodies).
fn check_rows(row: &TaskRow, cps: &[StoredCheckpoint], problem: &mut impl FnMut(String)) {
    let Some(first) = cps.first() else {
        if row.latest_seq != 0 {
            problem(format!(
                "its row says latest seq {} and it has no checkpoints",
                row.latest_seq
            ));
        }
        return;
    };
    if !retention::fold_can_start(first.seq, first.snapshot) {
        problem(format!(
            "its first stored checkpoint, seq {}, is a delta: no fold can start there",
            first.seq
        ));
    }
    for (expected, cp) in (first.seq..).zip(cps) {
        if cp.seq != expected {
            problem(format!(
                "seq {} where {expected} was expected (a gap)",
                cp.seq
            ));
            return;
        }
    }
    let last = &cps[cps.len() - 1];
    if last.seq != row.latest_seq {
        problem(format!(
            "its row says latest seq {} and its newest checkpoint is seq {}",
            row.latest_seq, last.seq
        ));
    }
    if last.created_at_ms != row.latest_created_at_ms {
        problem(format!(
            "its row's latest time {} is not its newest checkpoint's {}",
            row.latest_created_at_ms, last.created_at_ms
        ));
    }
    for pair in cps.windows(2) {
        if pair[1].created_at_ms < pair[0].created_at_ms {
            problem(format!(
                "seq {} is older than seq {}",
                pair[1].seq, pair[0].seq
            ));
        }
    }
    for cp in cps.iter().filter(|c| c.origin && c.seq != 1) {
        problem(format!(
            "seq {} records a fork origin (only seq 1 may)",
            cp.seq
        ));
    }
    // The snapshot policy's counters and the schema versions of the latest fold (docs/store.md §6).
    let base = cps.iter().rposition(|c| c.snapshot);
    let deltas = &cps[base.map_or(0, |b| b + 1)..];
    let snapshot_bytes = base.map_or(0, |b| cps[b].body.len() as u64);
    let delta_bytes: u64 = deltas.iter().map(|c| c.body.len() as u64).sum();
    let c = row.counters;
    if (
        c.snapshot_bytes,
        c.deltas_since_snapshot as usize,
        c.delta_bytes_since_snapshot,
    ) != (snapshot_bytes, deltas.len(), delta_bytes)
    {
        problem(format!(
            "its snapshot counters ({} snapshot bytes, {} deltas of {} bytes since) do not match \
             its checkpoints ({snapshot_bytes}, {}, {delta_bytes})",
            c.snapshot_bytes,
            c.deltas_since_snapshot,
            c.delta_bytes_since_snapshot,
            deltas.len()
        ));
    }
    let mut versions: Vec<i32> = base
        .map(|b| cps[b].schema_version)
        .into_iter()
        .chain(deltas.iter().map(|c| c.schema_version))
        .collect();
    versions.sort_unstable();
    versions.dedup();
    let mut recorded = row.versions.clone();
    recorded.sort_unstable();
    recorded.dedup();
    if versions != recorded {
        problem(format!(
            "its row lists schema versions {recorded:?} for its latest fold, and those \
             checkpoints have {versions:?}"
        ));
    }
}

/// Decodes one body as `bodies` says, counting it in `report`.
fn decode_checked<S: State>(
    task: &str,
    cp: &StoredCheckpoint,
    bodies: BodyCheck,
    report: &mut VerifyReport,
) -> Result<()> {
    let version = cp.schema_version as u32;
    // PostgreSQL stores bodies as encoded (uncompressed, docs/postgres.md).
    report.body_bytes_stored += cp.body.len() as u64;
    report.body_bytes += cp.body.len() as u64;
    if bodies == BodyCheck::Skip {
        not_decoded(report, version, || "not asked to decode".into());
        return Ok(());
    }
    let meta = BodyMeta {
        task,
        seq: cp.seq,
        schema_version: version,
        snapshot: cp.snapshot,
        at: At::Postgres,
    };
    match rules::decode_body::<S>(&meta, &cp.body) {
        Ok(_) => report.bodies_decoded += 1,
        Err(e) if bodies == BodyCheck::Try => not_decoded(report, version, || e.to_string()),
        Err(e) => return Err(e),
    }
    Ok(())
}

/// Counts a body not decoded, by schema version (as the local verify's report does).
fn not_decoded(report: &mut VerifyReport, schema_version: u32, reason: impl FnOnce() -> String) {
    let list = &mut report.bodies_not_decoded;
    match list.binary_search_by_key(&schema_version, |u| u.schema_version) {
        Ok(i) => list[i].count += 1,
        Err(i) => list.insert(
            i,
            UndecodedBodies {
                schema_version,
                count: 1,
                reason: reason(),
            },
        ),
    }
}
