//! Tool-call entries of the index: where each call's begin and finish records are, and
//! whether retention still keeps the call (docs/store.md §4, §7).

use std::collections::HashMap;

use crate::log::RecordPos;

/// Index entry of one tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallEntry {
    pub begin: RecordPos,
    pub finish: Option<RecordPos>,
    /// Bytes on disk of the begin and finish records together.
    pub bytes: u32,
    /// Set (for good) by the compaction pass that finds the call no longer kept: it
    /// finished before its task's oldest retained checkpoint. The journal no longer
    /// answers for it, and nothing reads its records again, as they may already be gone
    /// (a pass deletes whole dead segments outside the positions lock). The entry stays,
    /// so the id stays taken, until the records have left the log: a new begin of the id
    /// while they are still on disk would replay as "begun twice".
    pub pruned: bool,
    /// Set by a pass's check of what vanishes (`orphan`) when both records of a pruned
    /// call vanish with the segments being replaced or deleted; the pass's `remap` then
    /// forgets the entry. Recomputed by every check, so it only ever describes the pass
    /// being installed.
    pub leaving: bool,
}

// The flags sit in what was padding: a call costs what it did before pruning existed.
const _: () = assert!(std::mem::size_of::<CallEntry>() == 48);

impl CallEntry {
    /// A call just begun with the record at `begin` of `bytes` bytes.
    pub fn begun(begin: RecordPos, bytes: u32) -> Self {
        CallEntry {
            begin,
            finish: None,
            bytes,
            pruned: false,
            leaving: false,
        }
    }

    /// Whether compaction must keep the call's records: it is still kept by retention,
    /// or it is pruned but its two records lie in different segments. Those go only
    /// together, or replay would find a finish without its begin (if the begin went
    /// first) or a call pending again (if the finish did): a pass copies them until they
    /// share a segment (the pass after that drops them). Within one segment they go
    /// together at every step, since a segment is deleted or replaced whole, atomically.
    pub fn records_stay(&self) -> bool {
        let apart = self
            .finish
            .is_some_and(|f| f.segment_id != self.begin.segment_id);
        !self.pruned || (apart && !self.leaving)
    }
}

/// A task's tool calls by id; boxed, so a task without calls pays one pointer.
///
/// The journal's readers see only calls retention keeps ([`get`](Self::get),
/// [`iter`](Self::iter)); writes, replay and compaction also see pruned entries
/// ([`entry`](Self::entry), [`all_mut`](Self::all_mut)).
#[derive(Debug, Default)]
#[allow(clippy::box_collection)] // the box is the point: 8 B in place of a 48 B map
pub(crate) struct Calls(Option<Box<HashMap<Box<str>, CallEntry>>>);

impl Calls {
    /// Whether the task has no call entry at all, pruned or not (a task with one exists:
    /// its slot must stay while a pruned entry holds an id).
    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|m| m.is_empty())
    }

    /// How many calls retention keeps.
    pub fn len(&self) -> usize {
        self.values().count()
    }

    /// The call, if retention keeps it.
    pub fn get(&self, call_id: &str) -> Option<&CallEntry> {
        self.entry(call_id).filter(|c| !c.pruned)
    }

    /// The entry of the id, pruned or not: what a write must check the id against.
    pub fn entry(&self, call_id: &str) -> Option<&CallEntry> {
        self.0.as_ref()?.get(call_id)
    }

    /// The entry of the id, pruned or not, to change (replay).
    pub fn entry_mut(&mut self, call_id: &str) -> Option<&mut CallEntry> {
        self.0.as_mut()?.get_mut(call_id)
    }

    pub fn insert(&mut self, call_id: Box<str>, entry: CallEntry) -> Option<CallEntry> {
        self.0.get_or_insert_default().insert(call_id, entry)
    }

    /// The calls retention keeps, by id.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &CallEntry)> {
        (self.0.iter())
            .flat_map(|m| m.iter().map(|(id, c)| (&**id, c)))
            .filter(|(_, c)| !c.pruned)
    }

    /// The calls retention keeps.
    pub fn values(&self) -> impl Iterator<Item = &CallEntry> {
        self.iter().map(|(_, c)| c)
    }

    /// Every entry, pruned or not (compaction).
    pub fn all(&self) -> impl Iterator<Item = &CallEntry> {
        self.0.iter().flat_map(|m| m.values())
    }

    /// Every entry, pruned or not, to change (compaction).
    pub fn all_mut(&mut self) -> impl Iterator<Item = &mut CallEntry> {
        self.0.iter_mut().flat_map(|m| m.values_mut())
    }

    /// Prunes every finished call whose finish record lies before `horizon` (the record
    /// of the task's oldest retained checkpoint). Pending calls stay whatever their age.
    pub fn prune_finished_before(&mut self, horizon: RecordPos) {
        for c in self.all_mut() {
            if c.finish.is_some_and(|f| f < horizon) {
                c.pruned = true;
            }
        }
    }

    /// Forgets the entries whose records have left the log (`leaving`); an empty map goes
    /// too, so a task whose calls are all gone pays one pointer again.
    pub fn forget_leaving(&mut self) {
        if let Some(m) = self.0.as_mut() {
            m.retain(|_, c| !c.leaving);
            if m.is_empty() {
                self.0 = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(segment_id: u64, offset: u64) -> RecordPos {
        RecordPos { segment_id, offset }
    }

    #[test]
    fn calls_are_allocated_on_first_use() {
        let mut c = Calls::default();
        assert!(c.is_empty() && c.get("a").is_none() && c.values().next().is_none());
        let p = pos(1, 40);
        assert_eq!(c.insert("a".into(), CallEntry::begun(p, 9)), None);
        assert!(!c.is_empty() && c.get("a").is_some() && c.get("b").is_none());
        c.entry_mut("a").unwrap().finish = Some(p);
        assert_eq!((c.len(), c.values().count()), (1, 1));
        assert_eq!(c.all_mut().next().unwrap().finish, Some(p));
    }

    #[test]
    fn pruning_hides_finished_calls_before_the_horizon_and_keeps_pending_ones() {
        let mut c = Calls::default();
        let finished = |b: RecordPos, f: RecordPos| CallEntry {
            finish: Some(f),
            ..CallEntry::begun(b, 20)
        };
        c.insert("old".into(), finished(pos(1, 40), pos(1, 80)));
        c.insert("apart".into(), finished(pos(1, 120), pos(2, 40)));
        c.insert("late".into(), finished(pos(2, 80), pos(3, 40)));
        c.insert("pending".into(), CallEntry::begun(pos(1, 160), 20));
        c.prune_finished_before(pos(3, 0));
        let mut kept: Vec<&str> = c.iter().map(|(id, _)| id).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["late", "pending"]);
        assert_eq!((c.len(), c.all().count()), (2, 4));
        assert!(
            c.get("old").is_none() && c.entry("old").is_some(),
            "the id stays taken"
        );
        // Records of one segment may go; records apart stay until they share one.
        assert!(!c.entry("old").unwrap().records_stay());
        assert!(c.entry("apart").unwrap().records_stay());
        assert!(c.entry("late").unwrap().records_stay());
        assert!(c.entry("pending").unwrap().records_stay());
        c.entry_mut("old").unwrap().leaving = true;
        c.forget_leaving();
        assert!(c.entry("old").is_none() && c.all().count() == 3);
        for e in c.all_mut() {
            e.leaving = true;
        }
        c.forget_leaving();
        assert!(c.is_empty() && c.0.is_none(), "an empty map is freed");
    }
}
