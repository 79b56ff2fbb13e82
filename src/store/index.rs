//! The in-memory index: per task, only positions and small metadata (states stay on disk).
//!
//! Memory per task (x86-64; sizes checked at compile time, DESIGN.md §7.1): its id, its
//! entry in the task map (24 B + a control byte, plus hash-table slack), and a `TaskSlot`
//! of 152 B (168 B with the `Arc` counts) that holds up to [`INLINE_CHECKPOINTS`]
//! checkpoints in place. More checkpoints move to a `Vec` of 20 B entries ([`PackedCp`]).
//! Tool calls and the fork origin are boxed, so a task without them pays a pointer for
//! each; a tool call costs its id plus about 70 B (a 48 B [`CallEntry`] and its map slot).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::log::RecordPos;

/// Index entry of one checkpoint, as the rest of the store sees it (stored packed, see
/// [`PackedCp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CpEntry {
    pub pos: RecordPos,
    pub created_at_ms: u64,
    /// Bytes of the record on disk (header + payload).
    pub bytes: u32,
    pub snapshot: bool,
}

/// Largest segment id the index can hold: 48 bits. Unreachable in practice: ids are
/// sequential and a segment is at least 4 KiB, so a log would have to write 1 EiB first.
const SEGMENT_ID_MAX: u64 = (1 << 48) - 1;
/// Latest `created_at_ms` the index can hold: 48 bits, the year 10889. The store writes
/// the wall clock, so only a damaged (or forged) record goes beyond.
const CREATED_AT_MS_MAX: u64 = (1 << 48) - 1;
const SNAPSHOT_BIT: u32 = 1 << 31;

/// A [`CpEntry`] in 20 B (five `u32`s, so a `Vec` of them has no padding):
/// `[offset, bytes | snapshot << 31, segment id low 32, segment id high 16 | created_at
/// low 16 << 16, created_at high 32]`. Offsets fit 32 bits and record bytes 31 because a
/// segment holds at most `SEGMENT_BYTES_MAX` (2 GiB) bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PackedCp([u32; 5]);

const _: () = assert!(std::mem::size_of::<PackedCp>() == 20);
const _: () = assert!(crate::log::format::SEGMENT_BYTES_MAX <= 1 << 31);

impl PackedCp {
    /// Packs `e`; an error names the field out of the index's range.
    fn pack(e: &CpEntry) -> Result<PackedCp, String> {
        let (segment, offset) = pack_pos(e.pos)?;
        if e.created_at_ms > CREATED_AT_MS_MAX {
            return Err(format!(
                "checkpoint time {} ms is beyond the year 10889",
                e.created_at_ms
            ));
        }
        if e.bytes & SNAPSHOT_BIT != 0 {
            return Err(format!(
                "checkpoint record of {} bytes (2 GiB at most)",
                e.bytes
            ));
        }
        let ms = e.created_at_ms;
        Ok(PackedCp([
            offset,
            e.bytes | if e.snapshot { SNAPSHOT_BIT } else { 0 },
            segment as u32,
            (segment >> 32) as u32 | ((ms as u32 & 0xFFFF) << 16),
            (ms >> 16) as u32,
        ]))
    }

    fn unpack(self) -> CpEntry {
        let [offset, bytes, seg_lo, mixed, ms_hi] = self.0;
        CpEntry {
            pos: RecordPos {
                segment_id: u64::from(seg_lo) | (u64::from(mixed & 0xFFFF) << 32),
                offset: u64::from(offset),
            },
            created_at_ms: u64::from(mixed >> 16) | (u64::from(ms_hi) << 16),
            bytes: bytes & !SNAPSHOT_BIT,
            snapshot: bytes & SNAPSHOT_BIT != 0,
        }
    }

    fn snapshot(self) -> bool {
        self.0[1] & SNAPSHOT_BIT != 0
    }

    fn bytes(self) -> u32 {
        self.0[1] & !SNAPSHOT_BIT
    }

    fn created_at_ms(self) -> u64 {
        self.unpack().created_at_ms
    }
}

/// (segment id, offset) of `pos` if the index can hold it.
fn pack_pos(pos: RecordPos) -> Result<(u64, u32), String> {
    match u32::try_from(pos.offset) {
        Ok(offset) if pos.segment_id <= SEGMENT_ID_MAX => Ok((pos.segment_id, offset)),
        _ => Err(format!(
            "record position {pos:?} is beyond the index's range (48-bit segment ids, \
             32-bit offsets)"
        )),
    }
}

/// How many checkpoints a task holds without a heap allocation of their own.
pub(crate) const INLINE_CHECKPOINTS: usize = 4;

/// A task's checkpoint entries, oldest first: up to [`INLINE_CHECKPOINTS`] in place, more
/// in a `Vec`. Entries are handed out unpacked, by value.
#[derive(Debug, Clone)]
pub(crate) struct CpList(CpRepr);

#[derive(Debug, Clone)]
enum CpRepr {
    Inline {
        len: u8,
        items: [PackedCp; INLINE_CHECKPOINTS],
    },
    Heap(Vec<PackedCp>),
}

const _: () = assert!(INLINE_CHECKPOINTS <= u8::MAX as usize);

impl Default for CpList {
    fn default() -> Self {
        CpList(CpRepr::Inline {
            len: 0,
            items: [PackedCp::default(); INLINE_CHECKPOINTS],
        })
    }
}

impl CpList {
    fn as_slice(&self) -> &[PackedCp] {
        match &self.0 {
            CpRepr::Inline { len, items } => &items[..usize::from(*len)],
            CpRepr::Heap(v) => v,
        }
    }

    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    /// Entry `i` (0: the oldest).
    pub fn get(&self, i: usize) -> Option<CpEntry> {
        self.as_slice().get(i).map(|p| p.unpack())
    }

    pub fn last(&self) -> Option<CpEntry> {
        self.as_slice().last().map(|p| p.unpack())
    }

    /// The entries, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = CpEntry> + ExactSizeIterator + '_ {
        self.as_slice().iter().map(|p| p.unpack())
    }

    /// Appends an entry already packed.
    fn push(&mut self, p: PackedCp) {
        match &mut self.0 {
            CpRepr::Inline { len, items } if usize::from(*len) < INLINE_CHECKPOINTS => {
                items[usize::from(*len)] = p;
                *len += 1;
            }
            CpRepr::Inline { items, .. } => {
                let mut v = Vec::with_capacity(2 * INLINE_CHECKPOINTS);
                v.extend_from_slice(items);
                v.push(p);
                self.0 = CpRepr::Heap(v);
            }
            CpRepr::Heap(v) => v.push(p),
        }
    }

    /// Drops the `n` oldest entries (at most all); a list that fits in place again
    /// returns its heap allocation.
    fn drop_front(&mut self, n: usize) {
        let rest = &self.as_slice()[n.min(self.len())..];
        if rest.len() <= INLINE_CHECKPOINTS {
            let mut items = [PackedCp::default(); INLINE_CHECKPOINTS];
            items[..rest.len()].copy_from_slice(rest);
            self.0 = CpRepr::Inline {
                len: rest.len() as u8,
                items,
            };
        } else if let CpRepr::Heap(v) = &mut self.0 {
            v.drain(..n);
        }
    }

    /// Moves every entry's position through `relocate` (compaction). Panics if a new
    /// position is beyond the index's range, which no log can reach (see
    /// `SEGMENT_ID_MAX`).
    pub fn relocate(&mut self, mut relocate: impl FnMut(RecordPos) -> RecordPos) {
        let entries: &mut [PackedCp] = match &mut self.0 {
            CpRepr::Inline { len, items } => &mut items[..usize::from(*len)],
            CpRepr::Heap(v) => v,
        };
        for p in entries {
            let mut e = p.unpack();
            let new = relocate(e.pos);
            if new != e.pos {
                e.pos = new;
                *p = PackedCp::pack(&e).expect("a compacted record's position fits the index");
            }
        }
    }
}

/// Index entry of one tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallEntry {
    pub begin: RecordPos,
    pub finish: Option<RecordPos>,
    /// Bytes on disk of the begin and finish records together.
    pub bytes: u32,
}

/// A task's tool calls by id; boxed, so a task without calls pays one pointer.
#[derive(Debug, Default)]
#[allow(clippy::box_collection)] // the box is the point: 8 B in place of a 48 B map
pub(crate) struct Calls(Option<Box<HashMap<Box<str>, CallEntry>>>);

impl Calls {
    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|m| m.is_empty())
    }

    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |m| m.len())
    }

    pub fn get(&self, call_id: &str) -> Option<&CallEntry> {
        self.0.as_ref()?.get(call_id)
    }

    pub fn get_mut(&mut self, call_id: &str) -> Option<&mut CallEntry> {
        self.0.as_mut()?.get_mut(call_id)
    }

    pub fn contains_key(&self, call_id: &str) -> bool {
        self.get(call_id).is_some()
    }

    pub fn insert(&mut self, call_id: Box<str>, entry: CallEntry) -> Option<CallEntry> {
        self.0.get_or_insert_default().insert(call_id, entry)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &CallEntry)> {
        self.0
            .iter()
            .flat_map(|m| m.iter().map(|(id, c)| (&**id, c)))
    }

    pub fn values(&self) -> impl Iterator<Item = &CallEntry> {
        self.0.iter().flat_map(|m| m.values())
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut CallEntry> {
        self.0.iter_mut().flat_map(|m| m.values_mut())
    }
}

/// Everything the store remembers about one task.
#[derive(Debug, Default)]
pub(crate) struct TaskData {
    /// Set once the task is deleted; a committer holding a stale slot retries.
    pub deleted: bool,
    /// Seq of `checkpoints[0]`.
    pub first_seq: u64,
    pub checkpoints: CpList,
    /// The task and seq this task was forked from; boxed, as few tasks are forks.
    pub origin: Option<Box<(Box<str>, u64)>>,
    pub calls: Calls,
    /// Snapshot policy inputs: deltas and their bytes since the last snapshot.
    pub deltas_since_snapshot: u32,
    pub delta_bytes_since_snapshot: u64,
    pub snapshot_bytes: u64,
    /// Whether a record the latest state folds from (the last snapshot or a delta since)
    /// was written under another schema version than the index's: the next commit must
    /// rebuild (migrate) the state before it writes, or it would append a delta to a
    /// history this program cannot read.
    pub foreign_schema: bool,
}

// With the `Arc` counts, 168 B: one 176 B heap chunk per task (glibc).
const _: () = assert!(std::mem::size_of::<TaskData>() == 136);
const _: () = assert!(std::mem::size_of::<TaskSlot>() == 152);

impl TaskData {
    /// Whether the task exists: it has a checkpoint or a tool call.
    pub fn exists(&self) -> bool {
        !self.checkpoints.is_empty() || !self.calls.is_empty()
    }

    /// The newest seq (0: no checkpoint yet).
    pub fn latest_seq(&self) -> u64 {
        if self.checkpoints.is_empty() {
            0
        } else {
            self.first_seq + self.checkpoints.len() as u64 - 1
        }
    }

    /// Records checkpoint `seq`; it must follow the latest. A task's first record is seq 1,
    /// or any seq once compaction dropped the checkpoints retention no longer needs: the
    /// log keeps every record of a prefix of segments it did not compact, so a task's
    /// surviving history may start mid-chain ("headless") until its next snapshot.
    /// `foreign_schema`: the record's schema version is not the index's.
    pub fn push_checkpoint(
        &mut self,
        seq: u64,
        entry: CpEntry,
        foreign_schema: bool,
    ) -> Result<(), String> {
        let expected = self.latest_seq() + 1;
        if seq != expected && !(self.checkpoints.is_empty() && seq > 0) {
            return Err(format!(
                "checkpoint seq {seq} where {expected} was expected"
            ));
        }
        let packed = PackedCp::pack(&entry).map_err(|e| format!("checkpoint seq {seq}: {e}"))?;
        if self.checkpoints.is_empty() {
            self.first_seq = seq;
        }
        self.checkpoints.push(packed);
        if entry.snapshot {
            self.deltas_since_snapshot = 0;
            self.delta_bytes_since_snapshot = 0;
            self.snapshot_bytes = u64::from(entry.bytes);
            self.foreign_schema = foreign_schema;
        } else {
            self.deltas_since_snapshot += 1;
            self.delta_bytes_since_snapshot += u64::from(entry.bytes);
            self.foreign_schema |= foreign_schema;
        }
        Ok(())
    }

    /// The entry of checkpoint `seq`, if retained.
    pub fn checkpoint(&self, seq: u64) -> Option<CpEntry> {
        let i = seq.checked_sub(self.first_seq)?;
        self.checkpoints.get(usize::try_from(i).ok()?)
    }

    /// Records to read to rebuild `seq`: the newest snapshot at or before it (if any)
    /// and every delta after that, oldest first.
    pub fn fold_plan(&self, seq: u64) -> Option<Vec<CpEntry>> {
        let cps = self.checkpoints.as_slice();
        let end = usize::try_from(seq.checked_sub(self.first_seq)?).ok()?;
        if end >= cps.len() {
            return None;
        }
        let start = cps[..=end].iter().rposition(|c| c.snapshot()).unwrap_or(0);
        // Without a snapshot the fold must start from the task's very first checkpoint.
        if !cps[start].snapshot() && self.first_seq != 1 {
            return None;
        }
        Some(cps[start..=end].iter().map(|c| c.unpack()).collect())
    }

    /// Oldest seq that retention still serves: the last `keep` checkpoints, those younger
    /// than `max_age_ms`, and always the latest. 0 for a task without checkpoints.
    pub fn retained_from(&self, keep: Option<u32>, max_age_ms: Option<u64>, now_ms: u64) -> u64 {
        let latest = self.latest_seq();
        if latest == 0 {
            return 0;
        }
        let mut from = self.first_loadable_seq();
        if let Some(keep) = keep {
            from = from.max(latest.saturating_sub(u64::from(keep).saturating_sub(1)));
        }
        if let Some(age) = max_age_ms {
            // created_at_ms never decreases within a task (commit enforces it).
            let cutoff = now_ms.saturating_sub(age);
            let young = self
                .checkpoints
                .as_slice()
                .partition_point(|c| c.created_at_ms() < cutoff);
            from = from.max(self.first_seq + young as u64);
        }
        from.min(latest)
    }

    /// Oldest seq that can be rebuilt: the first, unless the history is headless (starts
    /// with a delta after seq 1), then its first snapshot.
    pub fn first_loadable_seq(&self) -> u64 {
        let cps = self.checkpoints.as_slice();
        if self.first_seq <= 1 || cps.first().is_none_or(|c| c.snapshot()) {
            return self.first_seq;
        }
        let first_snapshot = cps.iter().position(|c| c.snapshot());
        self.first_seq + first_snapshot.map_or(cps.len().saturating_sub(1), |i| i) as u64
    }

    /// Oldest seq whose record is still needed to rebuild `retained_from` (its fold base).
    pub fn needed_from(&self, retained_from: u64) -> u64 {
        let Some(end) = retained_from.checked_sub(self.first_seq) else {
            return self.first_seq;
        };
        let cps = self.checkpoints.as_slice();
        if cps.is_empty() {
            return self.first_seq;
        }
        let end = (end as usize).min(cps.len().saturating_sub(1));
        let base = cps[..=end].iter().rposition(|c| c.snapshot()).unwrap_or(0);
        self.first_seq + base as u64
    }

    /// Forgets the checkpoints below `seq` (they are no longer needed).
    pub fn prune_before(&mut self, seq: u64) {
        let n = (seq.saturating_sub(self.first_seq) as usize).min(self.checkpoints.len());
        if n > 0 {
            self.checkpoints.drop_front(n);
            self.first_seq += n as u64;
        }
    }

    /// The time of the latest checkpoint (0 if none).
    pub fn latest_created_at_ms(&self) -> u64 {
        self.checkpoints.last().map_or(0, |c| c.created_at_ms)
    }

    /// Bytes of live records (checkpoints and calls) this task holds.
    pub fn live_bytes(&self) -> u64 {
        let checkpoints = self.checkpoints.as_slice().iter();
        let checkpoints: u64 = checkpoints.map(|c| u64::from(c.bytes())).sum();
        checkpoints + self.calls.values().map(|c| u64::from(c.bytes)).sum::<u64>()
    }
}

/// One task's slot: a lock that serializes its commits, and its data.
#[derive(Debug, Default)]
pub(crate) struct TaskSlot {
    pub commit: Mutex<()>,
    pub data: RwLock<TaskData>,
}

/// All tasks.
#[derive(Debug)]
pub(crate) struct Index {
    tasks: RwLock<HashMap<Box<str>, Arc<TaskSlot>>>,
    /// `State::VERSION` of the program: checkpoints of other versions mark their task
    /// (`TaskData::foreign_schema`).
    schema_version: u32,
}

impl Index {
    /// An empty index for a program whose `State::VERSION` is `schema_version`.
    pub fn new(schema_version: u32) -> Self {
        Index {
            tasks: RwLock::default(),
            schema_version,
        }
    }

    /// `State::VERSION` of the program this index serves.
    pub fn schema_version(&self) -> u32 {
        self.schema_version
    }

    /// The task's slot, if the task exists: it has a checkpoint or a tool call. A slot a
    /// write on a new task created stays empty until the write succeeds, and is no task
    /// meanwhile, as `task_ids` and a reopened store agree.
    pub fn get(&self, task: &str) -> Option<Arc<TaskSlot>> {
        let tasks = self.tasks.read();
        let slot = tasks.get(task)?;
        slot.data.read().exists().then(|| slot.clone())
    }

    /// The task's slot, created empty if missing.
    pub fn get_or_create(&self, task: &str) -> Arc<TaskSlot> {
        if let Some(slot) = self.get(task) {
            return slot;
        }
        self.tasks.write().entry(task.into()).or_default().clone()
    }

    /// Forgets the task's slot if it is empty and no one holds it: a write that failed on
    /// a new task (a conflict, a record too large, ...) leaves nothing behind, or callers
    /// naming tasks that never come to exist could fill the map.
    ///
    /// Why this cannot lose a concurrent write: a writer reaches a slot only through
    /// `get_or_create`, which clones the slot's `Arc` while it holds the map's lock, and
    /// keeps that clone until its write is applied. Here the map's write lock is held, so
    /// no clone can be made meanwhile, and a strong count of 1 (the map's own) means no
    /// writer holds the slot or waits on its commit lock; `exists()` false then means no
    /// write has landed in it. A writer arriving later finds no slot and makes a fresh one.
    /// The caller must have dropped its own clone first: with two writers failing at once,
    /// whichever checks last then sees the count at 1 (each checks after its own drop).
    pub fn remove_if_unused(&self, task: &str) {
        let mut tasks = self.tasks.write();
        let unused = tasks.get(task).is_some_and(|slot| {
            Arc::strong_count(slot) == 1 && Arc::weak_count(slot) == 0 && !slot.data.read().exists()
        });
        if unused {
            tasks.remove(task);
        }
    }

    /// How many slots the map holds, tasks or not (tests check that failed writes leave
    /// none behind).
    pub fn slot_count(&self) -> usize {
        self.tasks.read().len()
    }

    /// Forgets a task (after its deletion record is durable).
    pub fn remove(&self, task: &str) {
        if let Some(slot) = self.tasks.write().remove(task) {
            slot.data.write().deleted = true;
        }
    }

    /// Ids of tasks with at least one checkpoint or tool call, sorted.
    pub fn task_ids(&self) -> Vec<String> {
        let tasks = self.tasks.read();
        let mut ids: Vec<String> = tasks
            .iter()
            .filter(|(_, s)| s.data.read().exists())
            .map(|(k, _)| k.to_string())
            .collect();
        ids.sort_unstable();
        ids
    }

    /// How many tasks `task_ids` would list, without copying their ids (recovery counts
    /// them; a copy would leave that much memory free but held by the allocator).
    pub fn task_count(&self) -> usize {
        let tasks = self.tasks.read();
        tasks.values().filter(|s| s.data.read().exists()).count()
    }

    /// Calls `f` on every task's data, mutably (used by compaction).
    pub fn for_each_mut(&self, mut f: impl FnMut(&str, &mut TaskData)) {
        for (k, s) in self.tasks.read().iter() {
            f(k, &mut s.data.write());
        }
    }

    /// Calls `f` on every task.
    pub fn for_each(&self, mut f: impl FnMut(&str, &TaskData)) {
        for (k, s) in self.tasks.read().iter() {
            f(k, &s.data.read());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(segment_id: u64, offset: u64, ms: u64, bytes: u32, snapshot: bool) -> CpEntry {
        CpEntry {
            pos: RecordPos { segment_id, offset },
            created_at_ms: ms,
            bytes,
            snapshot,
        }
    }

    #[test]
    fn packed_entries_round_trip_up_to_their_limits() {
        for e in [
            entry(1, 40, 0, 0, false),
            entry(7, 1 << 31, 1_700_000_000_000, 123, true),
            entry(
                SEGMENT_ID_MAX,
                u64::from(u32::MAX),
                CREATED_AT_MS_MAX,
                (1 << 31) - 1,
                true,
            ),
            entry(
                0x1234_5678_9ABC,
                0xDEAD_BEEF,
                0xFEDC_BA98_7654,
                0x7654_3210,
                false,
            ),
        ] {
            let p = PackedCp::pack(&e).unwrap();
            assert_eq!(p.unpack(), e);
            assert_eq!((p.snapshot(), p.bytes()), (e.snapshot, e.bytes));
            assert_eq!(p.created_at_ms(), e.created_at_ms);
        }
        for bad in [
            entry(SEGMENT_ID_MAX + 1, 40, 0, 0, false),
            entry(1, 1 << 32, 0, 0, false),
            entry(1, 40, CREATED_AT_MS_MAX + 1, 0, false),
            entry(1, 40, 0, 1 << 31, false),
        ] {
            assert!(PackedCp::pack(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn out_of_range_checkpoint_is_refused_not_mangled() {
        let mut d = TaskData::default();
        let far = entry(1, 40, u64::MAX, 10, true);
        assert!(d.push_checkpoint(1, far, false).is_err());
        assert_eq!((d.latest_seq(), d.snapshot_bytes), (0, 0));
    }

    #[test]
    fn checkpoints_spill_to_the_heap_and_come_back_after_pruning() {
        let mut d = TaskData::default();
        let all: Vec<CpEntry> = (1..=11u64)
            .map(|i| entry(1 + i / 4, 40 * i, 1000 + i, i as u32, i % 5 == 1))
            .collect();
        for (i, e) in all.iter().enumerate() {
            d.push_checkpoint(i as u64 + 1, *e, false).unwrap();
            assert_eq!(d.checkpoints.iter().collect::<Vec<_>>(), all[..=i]);
            let spilled = matches!(d.checkpoints.0, CpRepr::Heap(_));
            assert_eq!(spilled, i >= INLINE_CHECKPOINTS);
        }
        assert_eq!(d.checkpoint(3), Some(all[2]));
        assert_eq!(d.fold_plan(9), Some(all[5..9].to_vec()));
        assert_eq!(d.live_bytes(), (1..=11).sum::<u64>());
        assert_eq!(d.latest_created_at_ms(), 1011);
        d.checkpoints.relocate(|p| RecordPos {
            segment_id: p.segment_id + 10,
            offset: p.offset,
        });
        assert_eq!(d.checkpoint(11).unwrap().pos.segment_id, 1 + 11 / 4 + 10);
        d.prune_before(6);
        assert_eq!((d.first_seq, d.checkpoints.len()), (6, 6));
        assert!(matches!(d.checkpoints.0, CpRepr::Heap(_)));
        d.prune_before(11);
        assert_eq!((d.first_seq, d.latest_seq()), (11, 11));
        assert!(matches!(d.checkpoints.0, CpRepr::Inline { len: 1, .. }));
        assert_eq!(d.checkpoint(11).unwrap().bytes, 11);
    }

    #[test]
    fn calls_are_allocated_on_first_use() {
        let mut c = Calls::default();
        assert!(c.is_empty() && c.get("a").is_none() && c.values().next().is_none());
        let pos = RecordPos {
            segment_id: 1,
            offset: 40,
        };
        let e = CallEntry {
            begin: pos,
            finish: None,
            bytes: 9,
        };
        assert_eq!(c.insert("a".into(), e), None);
        assert!(!c.is_empty() && c.contains_key("a") && !c.contains_key("b"));
        c.get_mut("a").unwrap().finish = Some(pos);
        assert_eq!((c.len(), c.values().count()), (1, 1));
        assert_eq!(c.values_mut().next().unwrap().finish, Some(pos));
    }

    #[test]
    fn only_an_empty_slot_no_one_holds_is_removed() {
        let index = Index::new(1);
        let held = index.get_or_create("held");
        index.remove_if_unused("held");
        assert_eq!(index.slot_count(), 1, "a writer holds it");
        drop(held);
        let used = index.get_or_create("used");
        used.data
            .write()
            .push_checkpoint(1, entry(1, 40, 0, 10, true), false)
            .unwrap();
        drop(used);
        index.remove_if_unused("used");
        index.remove_if_unused("missing");
        assert_eq!(index.slot_count(), 2, "it holds a checkpoint");
        index.remove_if_unused("held");
        assert_eq!(index.slot_count(), 1);
        assert_eq!(index.task_ids(), vec!["used".to_string()]);
    }

    #[test]
    fn a_snapshot_of_this_version_clears_the_foreign_schema_mark() {
        let mut d = TaskData::default();
        d.push_checkpoint(1, entry(1, 40, 0, 10, true), false)
            .unwrap();
        d.push_checkpoint(2, entry(1, 80, 0, 10, false), true)
            .unwrap();
        d.push_checkpoint(3, entry(1, 120, 0, 10, false), false)
            .unwrap();
        assert!(d.foreign_schema, "a delta since the snapshot is foreign");
        d.push_checkpoint(4, entry(1, 160, 0, 10, true), false)
            .unwrap();
        assert!(!d.foreign_schema);
        d.push_checkpoint(5, entry(1, 200, 0, 10, true), true)
            .unwrap();
        assert!(d.foreign_schema, "a foreign snapshot is the new fold base");
    }
}
