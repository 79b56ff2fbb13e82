//! Copying a local store into PostgreSQL, task by task (`agentwal migrate`,
//! docs/postgres.md §7): each task is one write transaction with its own write id, so a task is either
//! wholly in the database or not at all, and a copy cut short is finished by running it
//! again; and the check that a copied task reads back as the local one.

use tokio_postgres::Client;

use super::PgStore;
use super::conn::{Attempt, Fail};
use super::protocol::{check_fence, record_write};
use crate::error::{Error, Result};
use crate::state::State;
use crate::store::codec;
use crate::store::policy::SnapshotCounters;
use crate::store::{RawCheckpoint, Store, TASK_ID_BYTES_MAX, validate_id};

/// Checkpoint rows sent per `INSERT` (the arrays of one statement).
const ROWS_PER_INSERT: usize = 500;

/// What [`PgStore::import_task`] did with one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Imported {
    /// Copied, in one transaction.
    Copied {
        /// Checkpoints written (the local store's retained ones).
        checkpoints: u64,
        /// Tool calls written, finished and pending.
        calls: u64,
        /// The seq of the first retained checkpoint when the local record there is a delta
        /// after seq 1 (retention dropped its fold base): it was written as a snapshot of
        /// its folded state, so that the copy can be folded from it.
        snapshot_at: Option<u64>,
    },
    /// Nothing to copy: the local task has no retained checkpoint and no call.
    Empty,
}

/// One row of `checkpoints`, as the import writes it.
struct Row {
    seq: u64,
    created_at_ms: u64,
    schema_version: u32,
    snapshot: bool,
    body: Vec<u8>,
    origin: Option<(String, u64)>,
}

/// What one task's transaction writes.
struct Plan {
    rows: Vec<Row>,
    calls: Vec<crate::store::CallInfo>,
    counters: SnapshotCounters,
    versions: Vec<i32>,
    snapshot_at: Option<u64>,
}

impl Plan {
    fn latest(&self) -> (u64, u64) {
        self.rows
            .last()
            .map_or((0, 0), |r| (r.seq, r.created_at_ms))
    }
}

impl<S: State> PgStore<S> {
    /// Copies task `task` of the local store `local` into this database, in one
    /// transaction: its retained checkpoints (under `local`'s retention) with their seqs,
    /// times, schema versions and bodies byte for byte, its fork origin (while its seq 1
    /// is retained), and its tool-call journal as [`Store::calls`](crate::Store::calls)
    /// lists it (arguments, results, pending calls still pending, in the order they began;
    /// calls `local`'s compaction pruned under retention are left out). If the first
    /// retained checkpoint is a delta after seq 1, its state is folded locally and written
    /// as a snapshot instead (see [`Imported::Copied::snapshot_at`]). The task must not
    /// exist here ([`Error::TaskExists`] otherwise, with nothing written); a live lease on
    /// it is [`Error::Fenced`]. The snapshot counters are set as if the task had been
    /// committed here, so the snapshot policy carries on where it was.
    pub fn import_task(&self, local: &Store<S>, task: &str) -> Result<Imported> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        self.shared.writable()?;
        let Some(plan) = plan::<S>(local, task)? else {
            return Ok(Imported::Empty);
        };
        let copied = Imported::Copied {
            checkpoints: plan.rows.len() as u64,
            calls: plan.calls.len() as u64,
            snapshot_at: plan.snapshot_at,
        };
        let seq = Some(plan.latest().0).filter(|s| *s > 0);
        let done = copied.clone();
        self.shared.run_write(
            "importing a task",
            task,
            |_| done.clone(),
            async |c, id| {
                import_attempt(c, id, task, seq, &plan).await?;
                Ok(copied.clone())
            },
        )
    }

    /// How task `task` of `local` and the same task here differ, as lines (empty: they
    /// read the same). Compared: the retained checkpoints' seqs, times and fork origins;
    /// the state each retained seq loads (with [`load`](Self::load), the path every reader
    /// takes) against the local [`Store::load`]; the latest seq; and every call's tool,
    /// arguments, result or pending status and start time, in the order they began.
    /// Not compared: sizes (a local record counts its header) and which checkpoints are
    /// stored as snapshots.
    pub fn compare_task(&self, local: &Store<S>, task: &str) -> Result<Vec<String>>
    where
        S: PartialEq,
    {
        let mut diffs = Vec::new();
        let mine = local.list_checkpoints(task)?;
        let theirs = self.list_checkpoints(task)?;
        let key =
            |c: &crate::store::CheckpointInfo| (c.seq, c.created_at_ms, c.forked_from.clone());
        let (a, b): (Vec<_>, Vec<_>) = (
            mine.iter().map(key).collect(),
            theirs.iter().map(key).collect(),
        );
        if a != b {
            let seqs = |v: &[crate::store::CheckpointInfo]| match (v.first(), v.last()) {
                (Some(f), Some(l)) => {
                    format!("seqs {}..={} ({} checkpoints)", f.seq, l.seq, v.len())
                }
                _ => "no checkpoints".to_string(),
            };
            diffs.push(format!(
                "retained checkpoints differ: locally {}, in PostgreSQL {} (or their times or fork origins differ)",
                seqs(&mine),
                seqs(&theirs)
            ));
        } else {
            for info in &mine {
                let here = local.load(task, info.seq)?;
                let there = self.load(task, info.seq)?;
                match (here, there) {
                    (Some(h), Some(t))
                        if h.state == t.state && h.created_at_ms == t.created_at_ms => {}
                    (Some(_), Some(_)) => {
                        diffs.push(format!("seq {} loads another state", info.seq))
                    }
                    (h, t) => diffs.push(format!(
                        "seq {} loads {} locally and {} in PostgreSQL",
                        info.seq,
                        if h.is_some() { "a state" } else { "nothing" },
                        if t.is_some() { "a state" } else { "nothing" },
                    )),
                }
                if diffs.len() >= 5 {
                    break;
                }
            }
        }
        let latest = |cp: Option<crate::store::Checkpoint<S>>| cp.map_or(0, |c| c.seq);
        let (l, p) = (
            latest(local.load_latest(task)?),
            latest(self.load_latest(task)?),
        );
        if l != p {
            diffs.push(format!("latest seq {l} locally, {p} in PostgreSQL"));
        }
        let (mine, theirs) = (local.calls(task)?, self.calls(task)?);
        if mine != theirs {
            let pending =
                |v: &[crate::store::CallInfo]| v.iter().filter(|c| c.result.is_none()).count();
            diffs.push(format!(
                "tool calls differ: locally {} ({} pending), in PostgreSQL {} ({} pending), or their tools, arguments, results or order",
                mine.len(),
                pending(&mine),
                theirs.len(),
                pending(&theirs)
            ));
        }
        Ok(diffs)
    }
}

/// What the import of `task` writes; `None` if it has nothing to copy.
fn plan<S: State>(local: &Store<S>, task: &str) -> Result<Option<Plan>> {
    let infos = local.list_checkpoints(task)?;
    let calls = local.calls(task)?;
    if infos.is_empty() && calls.is_empty() {
        return Ok(None);
    }
    let mut rows = Vec::with_capacity(infos.len());
    let mut snapshot_at = None;
    for (i, info) in infos.iter().enumerate() {
        let Some(raw) = local.raw_checkpoint(task, info.seq)? else {
            return Err(Error::InvalidArgument(format!(
                "checkpoint {} of task {task:?} is no longer in the local store (deleted or \
                 compacted away while it was read); open the store again and retry",
                info.seq
            )));
        };
        let RawCheckpoint {
            seq,
            created_at_ms,
            schema_version,
            snapshot,
            body,
            origin,
        } = raw;
        let row = if i == 0 && !snapshot && seq != 1 {
            // Its fold base is not retained: write the state it folds to as a snapshot.
            let Some(cp) = local.load(task, seq)? else {
                return Err(Error::InvalidArgument(format!(
                    "checkpoint {seq} of task {task:?} does not load in the local store"
                )));
            };
            snapshot_at = Some(seq);
            Row {
                seq,
                created_at_ms,
                schema_version: S::VERSION,
                snapshot: true,
                body: codec::encode(&*cp.state)?,
                origin: None,
            }
        } else {
            Row {
                seq,
                created_at_ms,
                schema_version,
                snapshot,
                body,
                origin: origin.filter(|_| seq == 1),
            }
        };
        rows.push(row);
    }
    // The counters a commit here would have left: the newest snapshot's size, and the
    // deltas since; the schema versions the latest state folds from (docs/store.md §6).
    let base = rows.iter().rposition(|r| r.snapshot);
    let deltas = &rows[base.map_or(0, |b| b + 1)..];
    let counters = SnapshotCounters {
        snapshot_bytes: base.map_or(0, |b| rows[b].body.len() as u64),
        deltas_since_snapshot: deltas.len() as u32,
        delta_bytes_since_snapshot: deltas.iter().map(|r| r.body.len() as u64).sum(),
    };
    let mut versions = Vec::new();
    for r in base.map(|b| &rows[b]).into_iter().chain(deltas) {
        let v = r.schema_version as i32;
        if !versions.contains(&v) {
            versions.push(v);
        }
    }
    Ok(Some(Plan {
        rows,
        calls,
        counters,
        versions,
        snapshot_at,
    }))
}

/// One attempt at importing a task, in one transaction.
async fn import_attempt(
    c: &mut Client,
    id: &str,
    task: &str,
    seq: Option<u64>,
    plan: &Plan,
) -> Attempt<()> {
    let tx = c.transaction().await?;
    check_fence(&tx, task, None).await?;
    let (latest, latest_at) = plan.latest();
    let k = &plan.counters;
    let created = tx
        .execute(
            "INSERT INTO tasks (task, latest_seq, latest_created_at_ms, snapshot_bytes,
                 deltas_since_snapshot, delta_bytes_since_snapshot, versions_since_snapshot)
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (task) DO NOTHING",
            &[
                &task.as_bytes(),
                &(latest as i64),
                &(latest_at as i64),
                &(k.snapshot_bytes as i64),
                &(k.deltas_since_snapshot as i32),
                &(k.delta_bytes_since_snapshot as i64),
                &plan.versions,
            ],
        )
        .await?;
    if created == 0 {
        return Err(Fail::Api(Error::TaskExists {
            task: task.to_string(),
        }));
    }
    record_write(&tx, id, task, seq).await?;
    for chunk in plan.rows.chunks(ROWS_PER_INSERT) {
        let seqs: Vec<i64> = chunk.iter().map(|r| r.seq as i64).collect();
        let times: Vec<i64> = chunk.iter().map(|r| r.created_at_ms as i64).collect();
        let versions: Vec<i32> = chunk.iter().map(|r| r.schema_version as i32).collect();
        let snapshots: Vec<bool> = chunk.iter().map(|r| r.snapshot).collect();
        let bodies: Vec<&[u8]> = chunk.iter().map(|r| r.body.as_slice()).collect();
        let origin_tasks: Vec<Option<&[u8]>> = chunk
            .iter()
            .map(|r| r.origin.as_ref().map(|(t, _)| t.as_bytes()))
            .collect();
        let origin_seqs: Vec<Option<i64>> = chunk
            .iter()
            .map(|r| r.origin.as_ref().map(|(_, s)| *s as i64))
            .collect();
        tx.execute(
            "INSERT INTO checkpoints (task, seq, created_at_ms, schema_version, snapshot, body,
                 origin_task, origin_seq, write_id)
             SELECT $1, * , $9 FROM unnest($2::bigint[], $3::bigint[], $4::integer[],
                 $5::boolean[], $6::bytea[], $7::bytea[], $8::bigint[])",
            &[
                &task.as_bytes(),
                &seqs,
                &times,
                &versions,
                &snapshots,
                &bodies,
                &origin_tasks,
                &origin_seqs,
                &id,
            ],
        )
        .await?;
    }
    // One statement per call, in the order they began: `begun` (a bigserial) keeps it.
    for call in &plan.calls {
        tx.execute(
            "INSERT INTO calls (task, call_id, tool, args, result, created_at_ms)
             VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                &task.as_bytes(),
                &call.call_id.as_bytes(),
                &call.tool.as_bytes(),
                &call.args,
                &call.result,
                &(call.begun_at_ms as i64),
            ],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}
