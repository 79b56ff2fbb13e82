//! Salvage recovery's report: which task lost which checkpoints.

use super::LostCheckpoints;
use super::codec::{CheckpointHead, KIND_CHECKPOINT};
use super::index::Index;
use super::replay::note_lost;
use crate::log::Log;

/// Names the checkpoints held by corrupt ranges the log skipped: a damaged record's
/// header and leading fields (task, seq) often survive the damage. Best effort: a range
/// whose record is unreadable is reported only as a skipped range.
pub(crate) fn name_skipped_checkpoints(log: &Log, index: &Index, lost: &mut Vec<LostCheckpoints>) {
    for range in &log.recovery().skipped {
        let Some((KIND_CHECKPOINT, payload)) = log.skipped_record(range) else {
            continue;
        };
        let Ok((head, _)) = postcard::take_from_bytes::<CheckpointHead<'_>>(&payload) else {
            continue;
        };
        // Lost unless recovery indexed that checkpoint anyway (from another copy of it):
        // below the task's latest seq as much as beyond it.
        let indexed = index
            .get(head.task)
            .is_some_and(|s| s.data.read().checkpoint(head.seq).is_some());
        let known = lost
            .iter()
            .any(|l| l.task == head.task && l.seqs.contains(&head.seq));
        if !indexed && !known {
            note_lost(lost, head.task, head.seq);
        }
    }
    for l in lost.iter_mut() {
        l.seqs.sort_unstable();
    }
}
