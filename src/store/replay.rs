//! Applies decoded records to the index. Recovery and the live write paths both go
//! through [`apply`], so a reopened store holds exactly what the running one held.

use crate::log::RecordPos;

use super::codec::Decoded;
use super::index::{CallEntry, CpEntry, Index};

/// Applies one record at `pos` of `record_bytes` bytes. An error means the record does
/// not follow from the ones before it.
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
                snapshot: c.body_kind == super::codec::Body::Snapshot,
            };
            if c.origin.is_some() && (c.seq != 1 || !entry.snapshot) {
                return Err(format!(
                    "fork of task {:?} must start with snapshot seq 1",
                    c.task
                ));
            }
            data.push_checkpoint(c.seq, entry)
                .map_err(|e| format!("task {:?}: {e}", c.task))?;
            if let Some(o) = &c.origin {
                data.origin = Some((o.task.into(), o.seq));
            }
            Ok(())
        }
        Decoded::CallBegin(b) => {
            let slot = index.get_or_create(b.task);
            let mut data = slot.data.write();
            if data.calls.contains_key(b.call_id) {
                return Err(format!(
                    "task {:?}: call {:?} begun twice",
                    b.task, b.call_id
                ));
            }
            data.calls.insert(
                b.call_id.into(),
                CallEntry {
                    begin: pos,
                    finish: None,
                },
            );
            Ok(())
        }
        Decoded::CallFinish(f) => {
            let slot = index
                .get(f.task)
                .ok_or_else(|| format!("result for unknown task {:?}", f.task))?;
            let mut data = slot.data.write();
            match data.calls.get_mut(f.call_id) {
                Some(call) if call.finish.is_none() => {
                    call.finish = Some(pos);
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
