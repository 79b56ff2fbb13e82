//! Read-side views for tools (the CLI): task summaries, the whole call journal, record
//! descriptions for dumps, and a full decode check.

use super::codec::{self, CheckpointRec, Decoded};
use super::compress;
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

/// What [`Store::verify_with`] does with checkpoint bodies (the encoded `S` or `S::Delta`
/// each checkpoint record carries). Everything around a body is checked in every mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BodyCheck {
    /// Decode every body as `S`; one that does not decode fails the verify. What
    /// [`Store::verify`] does.
    #[default]
    Require,
    /// Try to decode every body as `S`, and list the ones that do not decode in
    /// [`VerifyReport::bodies_not_decoded`] instead of failing: for tools (the CLI) that do
    /// not know the state type the store was written with.
    Try,
    /// Decode no body; all of them are listed as not decoded. (A compressed body is still
    /// decompressed: a frame that does not decompress fails the verify in every mode.)
    Skip,
}

/// What [`Store::verify`] checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Tasks checked.
    pub tasks: u64,
    /// Checkpoint records checked (checksum, record kind, task, seq, snapshot or delta).
    pub checkpoints: u64,
    /// Tool calls checked (the checksum, task and call id of each call's records).
    pub calls: u64,
    /// Checkpoint bodies that decoded as `S` (or `S::Delta`).
    pub bodies_decoded: u64,
    /// Checkpoint bodies that were not decoded, by schema version, ascending (empty under
    /// [`BodyCheck::Require`], which fails instead).
    pub bodies_not_decoded: Vec<UndecodedBodies>,
    /// Checkpoint bodies stored compressed (each decompressed and checked, in every
    /// [`BodyCheck`] mode).
    pub bodies_compressed: u64,
    /// Bytes of the checked checkpoint bodies as stored (compressed or not).
    pub body_bytes_stored: u64,
    /// Bytes of the same bodies as encoded (uncompressed).
    pub body_bytes: u64,
}

/// Checkpoint bodies of one schema version that [`Store::verify_with`] did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndecodedBodies {
    /// The schema version stored with them (`State::VERSION` of the program that wrote
    /// them).
    pub schema_version: u32,
    /// How many.
    pub count: u64,
    /// Why the first of them was not decoded (the decoder's or migration's error).
    pub reason: String,
}

impl VerifyReport {
    fn not_decoded(&mut self, schema_version: u32, reason: impl FnOnce() -> String) {
        let list = &mut self.bodies_not_decoded;
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
    /// Extra detail (call id, fork origin, how a checkpoint's body is stored, decode
    /// error).
    pub detail: String,
    /// For a checkpoint: how its body is stored, and its sizes.
    pub body: Option<BodySummary>,
}

/// How a checkpoint record stores its body ([`RecordSummary::body`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodySummary {
    /// "raw" (as encoded) or "zstd" (one zstd frame).
    pub codec: &'static str,
    /// Bytes of the body as stored.
    pub stored_bytes: u64,
    /// Bytes of the body as encoded (uncompressed): for a compressed body, the length its
    /// record claims.
    pub bytes: u64,
    /// For a compressed body whose frame does not decompress to that length: why.
    pub error: Option<String>,
}

/// Describes a raw log record of a store. A compressed checkpoint body is decompressed
/// (within [`COMPRESSED_BODY_BYTES_MAX`](crate::COMPRESSED_BODY_BYTES_MAX)) to check it.
pub fn describe_record(rec: &RecordRef<'_>) -> RecordSummary {
    let summary = |kind, task: &str, seq, detail| RecordSummary {
        kind,
        task: Some(task.to_string()),
        seq,
        detail,
        body: None,
    };
    match codec::decode(rec) {
        Ok(Decoded::Checkpoint(c)) => {
            let origin = c
                .origin
                .as_ref()
                .map(|o| format!("forked from {}@{}", o.task, o.seq));
            let body = describe_body(&c);
            let stored = match (&body.error, c.body_kind.zstd_raw_len()) {
                (Some(e), _) => Some(format!(
                    "{} body of {} B, claims {} B: {e}",
                    body.codec, body.stored_bytes, body.bytes
                )),
                (None, Some(_)) => Some(format!(
                    "{} {} B of {} B",
                    body.codec, body.stored_bytes, body.bytes
                )),
                (None, None) => None,
            };
            let detail = [stored, origin].into_iter().flatten();
            let detail = detail.collect::<Vec<_>>().join("; ");
            RecordSummary {
                body: Some(body),
                ..summary(c.body_kind.kind_name(), c.task, Some(c.seq), detail)
            }
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
            body: None,
        },
    }
}

/// How `c` stores its body; a compressed one is decompressed to check it.
fn describe_body(c: &CheckpointRec<'_>) -> BodySummary {
    let error = match c.body_kind.zstd_raw_len() {
        Some(_) => compress::body(c).err(),
        None => None,
    };
    BodySummary {
        codec: c.body_kind.codec_name(),
        stored_bytes: c.body.len() as u64,
        bytes: c.raw_body_bytes(),
        error,
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
    /// checksum and every task's seq chain. Same as
    /// [`verify_with(BodyCheck::Require)`](Self::verify_with).
    pub fn verify(&self) -> Result<VerifyReport> {
        self.verify_with(BodyCheck::Require)
    }

    /// Reads every record the index points at and checks that it is what the index says
    /// (its checksum again, and its record kind, task, seq, snapshot or delta, call id),
    /// then treats checkpoint bodies as `bodies` says. Without [`BodyCheck::Require`] this
    /// needs nothing of `S`: a store written with any state type verifies.
    pub fn verify_with(&self, bodies: BodyCheck) -> Result<VerifyReport> {
        let mut report = VerifyReport::default();
        for task in self.tasks()? {
            let Some(slot) = self.inner.index.get(&task) else {
                continue;
            };
            let _reading = self.inner.relocation.read();
            let (first_seq, checkpoints, calls) = {
                let d = slot.data.read();
                if d.deleted {
                    continue;
                }
                (
                    d.first_seq,
                    d.checkpoints.iter().collect::<Vec<_>>(),
                    d.calls
                        .iter()
                        .map(|(id, c)| (id.to_string(), *c))
                        .collect::<Vec<_>>(),
                )
            };
            for (seq, cp) in (first_seq..).zip(&checkpoints) {
                self.inner.log.read_with(cp.pos, |rec| {
                    let c = super::load::indexed_checkpoint(&rec, &task, seq)?;
                    if c.body_kind.is_snapshot() != cp.snapshot {
                        let why = format!(
                            "index of task {task:?} seq {seq} expects a {} and the record is a {:?}",
                            if cp.snapshot { "Snapshot" } else { "Delta" },
                            c.body_kind
                        );
                        return Err(codec::decode_error(&rec, why));
                    }
                    // A compressed body is decompressed in every mode: a frame that does
                    // not decompress is a bad record, whatever the state type.
                    let body = super::load::stored_body(&rec, &c)?;
                    report.body_bytes_stored += c.body.len() as u64;
                    report.body_bytes += body.len() as u64;
                    if c.body_kind.zstd_raw_len().is_some() {
                        report.bodies_compressed += 1;
                    }
                    if bodies == BodyCheck::Skip {
                        report.not_decoded(c.schema_version, || "not asked to decode".into());
                        return Ok(());
                    }
                    let meta = super::load::body_meta(&rec, &c);
                    match crate::rules::decode_body::<S>(&meta, &body) {
                        Ok(_) => report.bodies_decoded += 1,
                        Err(e) if bodies == BodyCheck::Try => {
                            report.not_decoded(c.schema_version, || e.to_string());
                        }
                        Err(e) => return Err(e),
                    }
                    Ok(())
                })?;
            }
            for (call_id, call) in &calls {
                self.read_begin(&task, call_id, call.begin, |_| ())?;
                if let Some(pos) = call.finish {
                    self.read_result(&task, call_id, pos)?;
                }
            }
            report.tasks += 1;
            report.checkpoints += checkpoints.len() as u64;
            report.calls += calls.len() as u64;
        }
        Ok(report)
    }
}
