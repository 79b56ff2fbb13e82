//! Read-side views for tools (the CLI): task summaries, the whole call journal, record
//! descriptions for dumps, and a full decode check.

use super::codec::{self, Body, Decoded};
use super::index::CallEntry;
use super::{Store, TASK_ID_BYTES_MAX, validate_id};
use crate::error::Result;
use crate::log::RecordRef;
use crate::state::State;

/// A summary of one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskInfo {
    /// The task id.
    pub task: String,
    /// Its latest seq (0: only tool calls so far).
    pub latest_seq: u64,
    /// When its latest checkpoint was committed (ms since the Unix epoch; 0 if none).
    pub last_commit_ms: u64,
    /// Retained checkpoints.
    pub checkpoints: u64,
    /// How many of the indexed checkpoint records are full snapshots.
    pub snapshots: u64,
    /// Bytes of its indexed checkpoint records on disk.
    pub bytes: u64,
    /// Tool calls in its journal.
    pub calls: u64,
    /// Where it was forked from, if it was, while its checkpoint 1 (which records the
    /// origin) is retained: as in [`list_checkpoints`](Store::list_checkpoints), so the
    /// answer does not depend on whether compaction or a reopen already forgot it.
    pub forked_from: Option<(String, u64)>,
}

/// One tool call of the journal, finished or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallInfo {
    /// The call id.
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// Arguments recorded by `begin_call`.
    pub args: Vec<u8>,
    /// When it began (ms since the Unix epoch).
    pub begun_at_ms: u64,
    /// Its result, once finished.
    pub result: Option<Vec<u8>>,
}

/// What [`Store::verify`] checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Tasks checked.
    pub tasks: u64,
    /// Checkpoint records decoded.
    pub checkpoints: u64,
    /// Tool-call records decoded.
    pub calls: u64,
}

/// A human-oriented description of a raw store record (for `agentwal dump`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordSummary {
    /// "delta", "snapshot", "call-begin", "call-finish", "delete" or "unknown".
    pub kind: &'static str,
    /// The task, when the payload decodes.
    pub task: Option<String>,
    /// The checkpoint seq, for checkpoints.
    pub seq: Option<u64>,
    /// Extra detail (call id, fork origin, decode error).
    pub detail: String,
}

/// Describes a raw log record of a store.
pub fn describe_record(rec: &RecordRef<'_>) -> RecordSummary {
    let summary = |kind, task: &str, seq, detail| RecordSummary {
        kind,
        task: Some(task.to_string()),
        seq,
        detail,
    };
    match codec::decode(std::path::Path::new(""), rec) {
        Ok(Decoded::Checkpoint(c)) => {
            let kind = if c.body_kind == Body::Snapshot {
                "snapshot"
            } else {
                "delta"
            };
            let origin = c
                .origin
                .map(|o| format!("forked from {}@{}", o.task, o.seq))
                .unwrap_or_default();
            summary(kind, c.task, Some(c.seq), origin)
        }
        Ok(Decoded::CallBegin(b)) => summary(
            "call-begin",
            b.task,
            None,
            format!("{} {}", b.call_id, b.tool),
        ),
        Ok(Decoded::CallFinish(f)) => summary("call-finish", f.task, None, f.call_id.to_string()),
        Ok(Decoded::Delete(d)) => summary("delete", d.task, None, String::new()),
        Err(e) => RecordSummary {
            kind: "unknown",
            task: None,
            seq: None,
            detail: e.to_string(),
        },
    }
}

impl<S: State> Store<S> {
    /// A summary of every task, sorted by id.
    pub fn task_infos(&self) -> Result<Vec<TaskInfo>> {
        let mut out = Vec::new();
        for task in self.tasks()? {
            let Some(slot) = self.inner.index.get(&task) else {
                continue;
            };
            let retained = self.list_checkpoints(&task)?;
            let forked_from = retained.first().and_then(|c| c.forked_from.clone());
            let data = slot.data.read();
            out.push(TaskInfo {
                latest_seq: data.latest_seq(),
                last_commit_ms: data.latest_created_at_ms(),
                checkpoints: retained.len() as u64,
                snapshots: data.checkpoints.iter().filter(|c| c.snapshot).count() as u64,
                bytes: data.live_bytes(),
                calls: data.calls.len() as u64,
                forked_from,
                task,
            });
        }
        Ok(out)
    }

    /// Every tool call of the task's journal, in the order they began.
    pub fn calls(&self, task: &str) -> Result<Vec<CallInfo>> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        let Some(slot) = self.inner.index.get(task) else {
            return Ok(Vec::new());
        };
        let _reading = self.inner.relocation.read();
        let mut entries: Vec<(Box<str>, CallEntry)> = (slot.data.read().calls.iter())
            .map(|(id, c)| (id.into(), *c))
            .collect();
        entries.sort_unstable_by_key(|(_, c)| c.begin);
        entries
            .into_iter()
            .map(|(id, c)| {
                let mut info = self.read_begin(task, &id, c.begin, |b| CallInfo {
                    call_id: b.call_id.to_string(),
                    tool: b.tool.to_string(),
                    args: b.args.to_vec(),
                    begun_at_ms: b.created_at_ms,
                    result: None,
                })?;
                info.result = c
                    .finish
                    .map(|pos| self.read_result(task, &id, pos))
                    .transpose()?;
                Ok(info)
            })
            .collect()
    }

    /// Reads and decodes every record the index points at (each checkpoint body as a
    /// snapshot or delta of `S`, each call record), so a damaged or undecodable record is
    /// found now rather than when an agent loads it. Recovery already checked every
    /// checksum and every task's seq chain.
    pub fn verify(&self) -> Result<VerifyReport> {
        let mut report = VerifyReport::default();
        for task in self.tasks()? {
            let Some(slot) = self.inner.index.get(&task) else {
                continue;
            };
            let _reading = self.inner.relocation.read();
            let (checkpoints, calls) = {
                let d = slot.data.read();
                if d.deleted {
                    continue;
                }
                (
                    (d.first_seq..)
                        .zip(d.checkpoints.iter())
                        .collect::<Vec<_>>(),
                    (d.calls.iter())
                        .map(|(id, c)| (Box::<str>::from(id), *c))
                        .collect::<Vec<_>>(),
                )
            };
            for (seq, cp) in &checkpoints {
                self.read_body(&task, *seq, cp.pos)?;
            }
            for (id, call) in &calls {
                self.read_begin(&task, id, call.begin, |_| ())?;
                if let Some(pos) = call.finish {
                    self.read_result(&task, id, pos)?;
                }
            }
            report.tasks += 1;
            report.checkpoints += checkpoints.len() as u64;
            report.calls += calls.len() as u64;
        }
        Ok(report)
    }
}
