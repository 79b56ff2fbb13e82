//! Compaction of the log: one pass ([`Log::compact`]) decides which prefix of sealed
//! segments to rewrite, and runs the crash-safe file steps of [`steps`] in their order,
//! calling back into the layer that indexes the records ([`CompactionHooks`]) where the
//! positions it holds change. That layer decides what is live (retention); the log
//! decides everything about segments.

mod steps;

use std::collections::HashMap;
use std::path::PathBuf;

use parking_lot::RwLock;

use super::format::{SEAL_RECORD_BYTES, SEGMENT_HEADER_BYTES};
use super::segment::{read_header, segment_path, sync_dir};
use super::{Log, RecordPos};
use crate::error::{Error, Result};

/// A pass that is not forced runs only when the sealed segments hold at least this many
/// dead bytes (and more dead than live ones).
pub const COMPACTION_DEAD_BYTES_MIN: u64 = 1 << 20;

/// What a compaction pass needs from the layer that indexes the log's records.
///
/// Lock order: the pass takes [`positions_lock`](Self::positions_lock) exclusively three
/// times, briefly (the barrier, the check before deleting whole segments, the switch to
/// the new positions), and calls no other hook while it holds it except
/// [`orphan`](Self::orphan) and [`remap`](Self::remap). The hooks must not take it.
///
/// Priority: everything a pass does while it holds a lock that appenders wait on (the
/// positions lock, group-commit leadership in its flush, the writer's file lock) runs on
/// the thread that called [`Log::compact`]. Only the lock-free bulk of the work, reading,
/// checksumming, rewriting and writing the compacted segment, goes through
/// [`offload`](Self::offload), which may run it on a thread of lower priority: a thread
/// the scheduler starves must never hold what committers wait for.
pub trait CompactionHooks: Sync {
    /// The lock every reader of positions holds shared while it resolves and reads them,
    /// and every appender holds shared from its append until the record is indexed.
    fn positions_lock(&self) -> &RwLock<()>;
    /// Applies retention and returns the live records for which `sealed` holds, and their
    /// bytes (never fewer than they take: bytes left out would count as dead).
    fn live_records(&self, sealed: &dyn Fn(RecordPos) -> bool) -> (Vec<RecordPos>, u64);
    /// An indexed position for which `vanishes` holds and `moved` has no new place, if
    /// any: a pass never deletes a record the index can still reach.
    fn orphan(
        &self,
        vanishes: &dyn Fn(RecordPos) -> bool,
        moved: &HashMap<RecordPos, Moved>,
    ) -> Option<RecordPos>;
    /// Points every indexed position that `moved` covers at its new place.
    fn remap(&self, moved: &HashMap<RecordPos, Moved>);
    /// A new payload for a live record of `kind` that the pass copies, or `None` (the
    /// default) to copy it as it is. It must mean to this layer what `payload` means (the
    /// store compresses checkpoint bodies here); a payload that is not smaller is ignored,
    /// so a pass never grows a record. Called without the positions lock held.
    fn rewrite(&self, kind: u8, payload: &[u8]) -> Option<Vec<u8>> {
        let _ = (kind, payload);
        None
    }
    /// Whether [`rewrite`](Self::rewrite) may give new payloads (default `false`). Then a
    /// pass that is not forced also runs to rewrite segments no pass has written yet, with
    /// nothing dead in them ([`Log::compact`]).
    fn rewrites(&self) -> bool {
        false
    }
    /// Of the live records for which `fresh` holds (those in segments no pass has written
    /// yet), the bytes [`rewrite`](Self::rewrite) could shrink, as of the last
    /// [`live_records`](Self::live_records); `None` (the default) if any record might
    /// shrink, and the pass weighs those segments' whole bytes. A pass that runs only to
    /// rewrite copies every live record of the prefix: weighing bytes no rewrite shrinks
    /// (a tool-call journal) would make it copy them again and again for nothing.
    fn rewritable_bytes(&self, fresh: &dyn Fn(RecordPos) -> bool) -> Option<u64> {
        let _ = fresh;
        None
    }
    /// Runs `work` and returns once it has run. `work` holds no lock that appenders or
    /// the positions lock's holders wait on, so it may run at any priority; the default
    /// runs it on the calling thread.
    fn offload(&self, work: &mut (dyn FnMut() + Send)) {
        work();
    }
}

/// Where a pass put a live record it copied: its position in the compacted segment and
/// its size there, header included (smaller than before if
/// [`CompactionHooks::rewrite`] gave it a new payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// The record's new position.
    pub pos: RecordPos,
    /// Bytes of the record at its new position (header + payload).
    pub bytes: u32,
}

/// What a compaction pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogCompaction {
    /// Segment files deleted.
    pub removed: Vec<PathBuf>,
    /// Live records copied into the compacted segment.
    pub records_rewritten: u64,
    /// Bytes of disk given back (deleted and replaced files, minus the compacted one).
    pub bytes_reclaimed: u64,
}

/// Live records of the sealed segments, in log order, and their known bytes.
struct LiveSet {
    positions: Vec<RecordPos>,
    bytes: u64,
}

impl Log {
    /// Runs one compaction pass over the sealed segments (the active one is left alone:
    /// [`Log::seal_active`] first to include it). `force`: rewrite every sealed segment;
    /// otherwise only when dead bytes outweigh live ones, or a prefix of segments holds nothing live, or
    /// (for hooks that rewrite payloads) when the sealed segments no pass has written
    /// outweigh the compacted one before them. `None` when no pass was worth running.
    pub fn compact(
        &self,
        force: bool,
        hooks: &dyn CompactionHooks,
    ) -> Result<Option<LogCompaction>> {
        let lock = hooks.positions_lock();
        // Barrier: appenders hold the lock shared from append to index update, so once it
        // is held exclusively every durable record below the active segment is indexed.
        let active = {
            let _barrier = lock.write();
            self.active_segment_id()?
        };
        let (mut positions, bytes) = hooks.live_records(&|p| p.segment_id < active);
        positions.sort_unstable();
        let live = LiveSet { positions, bytes };
        let mut sealed = self.segment_sizes()?;
        sealed.retain(|(id, _)| *id < active);
        let through = match choose_prefix(&sealed, &live, force) {
            Some(through) => through,
            None if hooks.rewrites() => match self.rewrite_prefix(&sealed, hooks)? {
                Some(through) => through,
                None => return Ok(None),
            },
            None => return Ok(None),
        };
        // The live set reflects every record appended so far; make them durable before
        // records they made dead disappear. Otherwise (`SyncMode::Periodic`/`Never`) a
        // crash could lose a deletion after compaction dropped the task's older records,
        // and bring the task back with only its newer ones: a state that never existed.
        self.flush()?;
        let pool = self.pool_for_pass(force)?;
        let mut done = self.remove_dead_leading(&live, through, hooks, &pool)?;
        let in_prefix: Vec<RecordPos> = (live.positions.iter())
            .copied()
            .filter(|p| p.segment_id <= through)
            .collect();
        let prepared = self.prepare_offloaded(through, &in_prefix, hooks)?;
        // Built before the lock is taken: committers wait while it is held.
        let moved: HashMap<RecordPos, Moved> = prepared.moved.iter().copied().collect();
        {
            let _relocating = lock.write();
            if let Some(missing) = hooks.orphan(&|p| p.segment_id <= through, &moved) {
                // Never install a segment that would orphan an indexed record.
                self.abandon_compaction(&prepared);
                return Err(Error::InvalidArgument(format!(
                    "compaction skipped: indexed record {missing:?} was not copied (retry later)"
                )));
            }
            let installed = self.install_compaction(&prepared);
            // A failed directory fsync leaves the compacted segment in place (its
            // durability unknown, so nothing is deleted below): the old positions are
            // gone either way.
            if prepared.is_installed() {
                hooks.remap(&moved);
                // Paired with the orphan check above: after the remap nothing indexed may
                // point into the replaced segments.
                debug_assert!(
                    hooks
                        .orphan(&|p| p.segment_id < through, &HashMap::new())
                        .is_none(),
                    "an index entry still points into a replaced segment"
                );
            }
            installed?;
        }
        // Made durable outside the lock, which committers wait on: the install needs only
        // to be durable before anything is deleted, and only this pass deletes (one pass
        // at a time).
        sync_dir(self.storage(), self.dir())?;
        let (superseded, superseded_bytes) = self.remove_superseded(&prepared, &pool)?;
        done.removed.extend(superseded);
        let replaced: u64 = (sealed.iter())
            .filter(|(id, _)| *id == through)
            .map(|(_, b)| b)
            .sum();
        done.records_rewritten = prepared.moved.len() as u64;
        done.bytes_reclaimed =
            (done.bytes_reclaimed + superseded_bytes + replaced).saturating_sub(prepared.bytes);
        Ok(Some(done))
    }

    /// Whole segments with nothing live go first, before anything is written: on a full
    /// disk the compacted segment needs the space they free. Only a leading run of them
    /// (the log must stay a chain) and never `through` itself, which the compacted segment
    /// replaces (its seal carries the chain on to the active segment).
    fn remove_dead_leading(
        &self,
        live: &LiveSet,
        through: u64,
        hooks: &dyn CompactionHooks,
        pool: &super::recycle::Pool,
    ) -> Result<LogCompaction> {
        let dead_through = (live.positions.first())
            .map_or(through, |p| p.segment_id.saturating_sub(1))
            .min(through.saturating_sub(1));
        let unreachable = dead_through > 0 && {
            let _relocating = hooks.positions_lock().write();
            let vanishes = |p: RecordPos| p.segment_id <= dead_through;
            hooks.orphan(&vanishes, &HashMap::new()).is_none()
        };
        if !unreachable {
            return Ok(LogCompaction::default());
        }
        let (removed, bytes_reclaimed) = self.remove_dead_prefix(dead_through, pool)?;
        Ok(LogCompaction {
            removed,
            records_rewritten: 0,
            bytes_reclaimed,
        })
    }
}

impl Log {
    /// Step 1 ([`prepare_compaction`](Self::prepare_compaction)) through the hooks'
    /// [`offload`](CompactionHooks::offload). What needs the writer's lock (the LSN the
    /// seal hands on) is read here first, on the calling thread.
    fn prepare_offloaded(
        &self,
        through: u64,
        in_prefix: &[RecordPos],
        hooks: &dyn CompactionHooks,
    ) -> Result<steps::PreparedCompaction> {
        let next_first_lsn = self.first_lsn_after(through)?;
        let mut prepared = None;
        hooks.offload(&mut || {
            prepared = Some(self.prepare_compaction(through, next_first_lsn, in_prefix, hooks));
        });
        prepared.unwrap_or_else(|| {
            Err(Error::InvalidArgument(
                "compaction hooks did not run the pass's work (offload must call it)".into(),
            ))
        })
    }

    /// The last sealed segment, if the sealed segments that no pass wrote hold at least
    /// half a segment's worth of bytes a rewrite could shrink ([`CompactionHooks::rewritable_bytes`])
    /// and as many as the compacted segment before them (a compacted segment, superseding
    /// every lower id, is always the first). Such a pass copies again at most as many
    /// compacted bytes as it takes new rewritable ones, so such passes together copy at
    /// most twice the rewritable bytes the log appended, however long it grows.
    fn rewrite_prefix(
        &self,
        sealed: &[(u64, u64)],
        hooks: &dyn CompactionHooks,
    ) -> Result<Option<u64>> {
        let (Some(&(first, first_bytes)), Some(&(last, _))) = (sealed.first(), sealed.last())
        else {
            return Ok(None);
        };
        let header = read_header(self.storage(), &segment_path(self.dir(), first))?;
        let compacted = header.is_ok_and(|h| h.is_compacted());
        let compacted_bytes = if compacted { first_bytes } else { 0 };
        let fresh_from = if compacted { first + 1 } else { first };
        let fresh = |p: RecordPos| p.segment_id >= fresh_from && p.segment_id <= last;
        let fresh_bytes = match hooks.rewritable_bytes(&fresh) {
            Some(bytes) => bytes,
            None => sealed.iter().map(|(_, b)| b).sum::<u64>() - compacted_bytes,
        };
        // Half a segment: a sealed segment's records never add up to its file's size
        // (header, seal, the room left at its end), so a whole one would wait for two.
        let enough = compacted_bytes.max(self.inner.options.segment_bytes / 2);
        Ok((fresh_bytes >= enough).then_some(last))
    }
}

/// The last segment of the prefix to compact, if any is worth it.
fn choose_prefix(sealed: &[(u64, u64)], live: &LiveSet, force: bool) -> Option<u64> {
    let (&(first, first_bytes), &(last, _)) = (sealed.first()?, sealed.last()?);
    let sealed_bytes: u64 = sealed.iter().map(|(_, b)| b).sum();
    let dead = sealed_bytes.saturating_sub(live.bytes);
    let empty_compacted = (SEGMENT_HEADER_BYTES + SEAL_RECORD_BYTES) as u64;
    if force || dead > live.bytes.max(COMPACTION_DEAD_BYTES_MIN) {
        // Skip a pass that would only rewrite one already compacted segment.
        return (sealed.len() > 1 || dead > 0 && first_bytes > empty_compacted).then_some(last);
    }
    // Segments before the first live record hold nothing: drop them cheaply.
    let before_live = (live.positions.first()).map_or(last, |p| p.segment_id.saturating_sub(1));
    let prefix = (sealed.iter())
        .take_while(|(id, _)| *id <= before_live)
        .count();
    let worth = prefix > 1 || (prefix == 1 && first_bytes > empty_compacted);
    (worth && before_live >= first).then_some(before_live)
}
