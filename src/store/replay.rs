//! Applies decoded records to the index. Recovery and the live write paths both go
//! through [`apply`], so a reopened store holds exactly what the running one held.

use std::collections::HashMap;

use super::LostCheckpoints;
use super::codec::{self, Decoded};
use super::index::{CallEntry, CpEntry, Index};
use crate::error::{CorruptionReason, Error, Result};
use crate::log::{RecordPos, RecordRef};

/// Rebuilds the index from the log on open.
///
/// A record that contradicts its task's earlier records is held against the task, not
/// failed at once: compaction drops the records of a deleted task, so the tail of a
/// deleted task's history (in segments not yet compacted) legitimately starts mid-chain.
/// If the task's deletion follows, all is well; if not, the first contradiction is
/// reported as corruption (or, under salvage, the task keeps its intact prefix and the
/// rest is reported lost).
pub(crate) struct Replayer<'a> {
    index: &'a Index,
    salvage: bool,
    suspects: HashMap<String, Error>,
    lost: Vec<LostCheckpoints>,
}

impl<'a> Replayer<'a> {
    pub fn new(index: &'a Index, salvage: bool) -> Self {
        Replayer {
            index,
            salvage,
            suspects: HashMap::new(),
            lost: Vec::new(),
        }
    }

    /// Applies one recovered record.
    pub fn visit(&mut self, rec: RecordRef<'_>) -> Result<()> {
        let decoded = match codec::decode(&rec) {
            Ok(d) => d,
            Err(_) if self.salvage => return Ok(()),
            Err(e) => return Err(e),
        };
        let task = decoded.task();
        if matches!(decoded, Decoded::Delete(_)) {
            self.suspects.remove(task);
        } else if self.suspects.contains_key(task) {
            self.note_lost_record(&decoded);
            return Ok(());
        }
        if let Err(why) = apply(self.index, &decoded, rec.pos(), rec.bytes()) {
            // A rejected first record of a task would otherwise leave its empty slot.
            self.index.remove_if_unused(task);
            self.note_lost_record(&decoded);
            let error = Error::Corruption {
                segment: rec.segment.to_path_buf(),
                offset: rec.offset,
                reason: CorruptionReason::Inconsistent(why),
            };
            self.suspects.insert(task.to_string(), error);
        }
        Ok(())
    }

    /// Ends the replay: an unforgiven contradiction is corruption (except under salvage).
    pub fn finish(self) -> Result<Vec<LostCheckpoints>> {
        if !self.salvage
            && let Some(first) = self.suspects.into_values().min_by_key(error_position)
        {
            return Err(first);
        }
        Ok(self.lost)
    }

    fn note_lost_record(&mut self, decoded: &Decoded<'_>) {
        if self.salvage
            && let Decoded::Checkpoint(c) = decoded
        {
            note_lost(&mut self.lost, c.task, c.seq);
        }
    }
}

fn error_position(e: &Error) -> (std::path::PathBuf, u64) {
    match e {
        Error::Corruption {
            segment, offset, ..
        } => (segment.clone(), *offset),
        _ => (std::path::PathBuf::new(), 0),
    }
}

/// Adds `seq` to the task's lost checkpoints.
pub(crate) fn note_lost(lost: &mut Vec<LostCheckpoints>, task: &str, seq: u64) {
    match lost.iter_mut().find(|l| l.task == task) {
        Some(l) => l.seqs.push(seq),
        None => lost.push(LostCheckpoints {
            task: task.to_string(),
            seqs: vec![seq],
        }),
    }
}

/// Applies one record at `pos` of `record_bytes` bytes (on disk: what live and dead bytes
/// count). An error means the record does not follow from the ones before it.
pub(crate) fn apply(
    index: &Index,
    rec: &Decoded<'_>,
    pos: RecordPos,
    record_bytes: u32,
) -> Result<(), String> {
    match rec {
        Decoded::Checkpoint(c) => {
            let slot = index.get_or_create(c.task);
            let mut data = slot.data.write();
            let entry = CpEntry {
                pos,
                created_at_ms: c.created_at_ms,
                bytes: record_bytes,
                snapshot: c.body_kind.is_snapshot(),
            };
            // The snapshot policy counts the record as if its body were uncompressed.
            let policy_bytes = c.uncompressed_bytes(u64::from(record_bytes));
            if c.origin.is_some() && (c.seq != 1 || !entry.snapshot) {
                return Err(format!(
                    "fork of task {:?} must start with snapshot seq 1",
                    c.task
                ));
            }
            let foreign_schema = c.schema_version != index.schema_version();
            data.push_checkpoint(c.seq, entry, policy_bytes, foreign_schema)
                .map_err(|e| format!("task {:?}: {e}", c.task))?;
            if let Some(o) = &c.origin {
                data.origin = Some(Box::new((o.task.into(), o.seq)));
            }
            Ok(())
        }
        Decoded::CallBegin(b) => {
            let slot = index.get_or_create(b.task);
            let mut data = slot.data.write();
            if data.calls.entry(b.call_id).is_some() {
                return Err(format!(
                    "task {:?}: call {:?} begun twice",
                    b.task, b.call_id
                ));
            }
            data.calls
                .insert(b.call_id.into(), CallEntry::begun(pos, record_bytes));
            Ok(())
        }
        Decoded::CallFinish(f) => {
            let slot = index
                .get(f.task)
                .ok_or_else(|| format!("result for unknown task {:?}", f.task))?;
            let mut data = slot.data.write();
            match data.calls.entry_mut(f.call_id) {
                Some(call) if call.finish.is_none() => {
                    call.finish = Some(pos);
                    call.bytes += record_bytes;
                    Ok(())
                }
                Some(_) => Err(format!(
                    "task {:?}: call {:?} finished twice",
                    f.task, f.call_id
                )),
                None => Err(format!(
                    "task {:?}: result for unknown call {:?}",
                    f.task, f.call_id
                )),
            }
        }
        Decoded::Delete(d) => {
            index.remove(d.task);
            Ok(())
        }
    }
}
