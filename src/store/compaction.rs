//! Compaction and retention, the store's side: decides what is live and keeps the index
//! pointing at the records the log's compaction pass (`log::compact`, which owns the
//! choice of segments and the crash-safe order of the file steps) moves.
//!
//! Live: each task's records from the fold base of its oldest retained checkpoint to its
//! latest, and the tool-call records of live tasks that retention keeps (pending calls,
//! and with retention configured, calls finished at or after the task's oldest retained
//! checkpoint; docs/store.md §4). Dead: everything else (checkpoints retention dropped,
//! pruned calls, deleted tasks, deletion records once their task's older records are
//! gone, which compaction of a whole prefix guarantees). A pruned call's two records
//! leave the log together or not at all ([`CallEntry::records_stay`]), and its index
//! entry goes only once they have (`remap`).
//!
//! The store also hands the pass a compressed payload for each raw checkpoint body that
//! its `Compression` setting compresses at compaction (`rewrite`; docs/format.md §8), and the
//! index takes the records' new sizes with their new positions.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Weak;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::index::{CallEntry, Index};
use super::low_priority::LowPriority;
use super::{CompactionReport, Inner, Store, codec, compress, now_ms};
use crate::background::Periodic;
use crate::error::Result;
use crate::log::{CompactionHooks, Moved, RecordPos};
use crate::state::State;

/// How often the background thread looks at the log.
const COMPACTION_CHECK_INTERVAL: Duration = Duration::from_millis(100);
impl<S: State> Store<S> {
    /// Runs a compaction pass now: applies retention and rewrites every sealed segment's
    /// live records into one compacted segment, deleting the rest.
    ///
    /// The active segment is sealed first (if it holds a record): otherwise a store
    /// smaller than a segment would never be compacted, nor its bodies compressed,
    /// whatever its user called.
    pub fn compact(&self) -> Result<CompactionReport> {
        self.writable()?;
        self.inner.log.seal_active()?;
        run_pass(&self.inner, true, &*self.inner)
    }

    /// A forced pass over the sealed segments only, leaving the active one as a
    /// background pass does; exposed for tests of records a pass leaves behind, not a
    /// stable API.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn compact_sealed_segments(&self) -> Result<CompactionReport> {
        self.writable()?;
        run_pass(&self.inner, true, &*self.inner)
    }
}

/// The store's side of a compaction pass: retention decides what is live, the index is
/// checked and repointed; the log does everything else (`Log::compact`).
impl CompactionHooks for Inner {
    fn positions_lock(&self) -> &parking_lot::RwLock<()> {
        &self.relocation
    }

    fn live_records(&self, sealed: &dyn Fn(RecordPos) -> bool) -> (Vec<RecordPos>, u64) {
        collect_live(self, sealed)
    }

    fn orphan(
        &self,
        vanishes: &dyn Fn(RecordPos) -> bool,
        moved: &HashMap<RecordPos, Moved>,
    ) -> Option<RecordPos> {
        unmoved_entry(&self.index, moved, vanishes)
    }

    fn remap(&self, moved: &HashMap<RecordPos, Moved>) {
        remap(&self.index, moved);
    }

    /// Checkpoint bodies that the store's compression setting compresses at compaction
    /// and that are stored raw come out compressed (docs/format.md §8).
    fn rewrite(&self, kind: u8, payload: &[u8]) -> Option<Vec<u8>> {
        let compression = self.options.compression.at_compaction();
        (kind == codec::KIND_CHECKPOINT)
            .then(|| compress::compress_payload(compression, payload))
            .flatten()
    }

    /// Only a store that leaves compression to compaction has raw bodies to rewrite
    /// where nothing is dead; under `Zstd` the commits compressed what would shrink.
    fn rewrites(&self) -> bool {
        matches!(
            self.options.compression,
            crate::Compression::ZstdAtCompaction { .. }
        )
    }

    /// Only checkpoint bodies are rewritten (`rewrite`): the live checkpoints' bytes.
    fn rewritable_bytes(&self, fresh: &dyn Fn(RecordPos) -> bool) -> Option<u64> {
        let mut bytes = 0;
        self.index.for_each(|_, data| {
            let live = data.checkpoints.iter().filter(|c| fresh(c.pos));
            bytes += live.map(|c| u64::from(c.bytes)).sum::<u64>();
        });
        Some(bytes)
    }
}

/// Applies retention to the index and collects the live records for which `sealed`
/// holds, with their bytes: the pass's choice weighs these against the sealed segments'
/// bytes, so a live record left uncounted looks dead and makes passes that copy it again
/// and again.
fn collect_live(inner: &Inner, sealed: &dyn Fn(RecordPos) -> bool) -> (Vec<RecordPos>, u64) {
    let o = &inner.options;
    let (keep, max_age) = (o.keep_checkpoints, o.max_age);
    // Without retention every checkpoint is kept from the first, and so is every call: the
    // rule could still drop calls finished before a task's first checkpoint, but a store
    // told to keep everything keeps everything (docs/store.md §4).
    let prune_calls = keep.is_some() || max_age.is_some();
    let now = now_ms();
    let (mut positions, mut bytes) = (Vec::new(), 0);
    inner.index.for_each_mut(|_, data| {
        let retained = data.retained_from(keep, max_age, now);
        if prune_calls {
            data.prune_calls(retained);
        }
        data.prune_before(data.needed_from(retained));
        for cp in data.checkpoints.iter().filter(|c| sealed(c.pos)) {
            positions.push(cp.pos);
            bytes += u64::from(cp.bytes);
        }
        for call in data.calls.all().filter(|c| c.records_stay()) {
            let records = std::iter::once(call.begin).chain(call.finish);
            let (before, all) = (positions.len(), 1 + usize::from(call.finish.is_some()));
            positions.extend(records.filter(|p| sealed(*p)));
            // The index sizes a call's two records together: counted when both are sealed
            // (a begin alone, if pending). One whose finish is still in the active segment
            // is left out: counting it whole could make more bytes live than the sealed
            // segments hold, and hide the dead ones (a forced pass of one sealed segment
            // runs only if something in it is dead).
            if positions.len() - before == all {
                bytes += u64::from(call.bytes);
            }
        }
    });
    (positions, bytes)
}

/// One compaction pass. `force`: compact every sealed segment; otherwise only when dead
/// bytes outweigh live ones (or a prefix of segments holds nothing live).
/// `hooks` are `inner`'s own, or a wrapper of them ([`LowPriority`]).
pub(crate) fn run_pass(
    inner: &Inner,
    force: bool,
    hooks: &dyn CompactionHooks,
) -> Result<CompactionReport> {
    let _pass = inner.compactor.lock();
    let started = Instant::now();
    let Some(done) = inner.log.compact(force, hooks)? else {
        return Ok(CompactionReport::default());
    };
    inner.compactions.fetch_add(1, Ordering::Relaxed);
    let report = CompactionReport {
        segments_deleted: done.removed.len() as u64,
        records_rewritten: done.records_rewritten,
        bytes_reclaimed: done.bytes_reclaimed,
        elapsed_ms: started.elapsed().as_millis() as u64,
        removed: done.removed,
    };
    tracing::info!(
        segments_deleted = report.segments_deleted,
        records_rewritten = report.records_rewritten,
        bytes_reclaimed = report.bytes_reclaimed,
        elapsed_ms = report.elapsed_ms,
        "compaction pass"
    );
    Ok(report)
}

/// An index entry for which `vanishes` holds that compaction did not copy, if any.
///
/// A pruned call may vanish, but only whole: both its records at once. Such calls are
/// marked `leaving`, and every other call's mark is cleared, so that the marks describe
/// this check's `vanishes` alone: the pass's `remap`, which follows the check of the
/// segments it replaces in the same hold of the positions lock, forgets exactly them.
fn unmoved_entry(
    index: &Index,
    map: &HashMap<RecordPos, Moved>,
    vanishes: &dyn Fn(RecordPos) -> bool,
) -> Option<RecordPos> {
    let gone = |pos: RecordPos| vanishes(pos) && !map.contains_key(&pos);
    let mut missing = None;
    index.for_each_mut(|_, data| {
        for c in data.checkpoints.iter().filter(|c| gone(c.pos)) {
            missing.get_or_insert(c.pos);
        }
        for call in data.calls.all_mut() {
            call.leaving = call.pruned && gone(call.begin) && call.finish.is_some_and(gone);
            if !call.leaving
                && let Some(pos) = unmoved_record(call, &gone)
            {
                missing.get_or_insert(pos);
            }
        }
    });
    missing
}

/// A record of `call` that vanishes uncopied, if any.
fn unmoved_record(call: &CallEntry, gone: &dyn Fn(RecordPos) -> bool) -> Option<RecordPos> {
    std::iter::once(call.begin)
        .chain(call.finish)
        .find(|p| gone(*p))
}

/// Points index entries at the records' new positions (`unmoved_entry` found none missing),
/// and forgets the pruned calls whose records the installed segment dropped (`leaving`):
/// from now on their ids are free, as they are for a store reopened on the new log.
fn remap(index: &Index, map: &HashMap<RecordPos, Moved>) {
    let relocate = |pos: &mut RecordPos| {
        if let Some(new) = map.get(pos) {
            *pos = new.pos;
        }
    };
    index.for_each_mut(|_, data| {
        // A checkpoint's size may change: compaction may have compressed its body.
        (data.checkpoints).relocate(|pos| map.get(&pos).map(|new| (new.pos, new.bytes)));
        for call in data.calls.all_mut() {
            relocate(&mut call.begin);
            if let Some(f) = call.finish.as_mut() {
                relocate(f);
            }
        }
        data.calls.forget_leaving();
    });
}

/// Starts the background compaction thread: after each segment rotation it runs a pass if
/// one is due. Dropping the handle stops and joins it. The thread keeps its priority: it
/// holds locks committers wait on; only the pass's lock-free bulk runs at low priority
/// ([`LowPriority`]).
pub(crate) fn spawn_background(inner: Weak<Inner>) -> Option<Periodic> {
    let mut seen_rotations = 0;
    Periodic::spawn("agentwal-compactor", COMPACTION_CHECK_INTERVAL, move || {
        let Some(inner) = inner.upgrade() else {
            return ControlFlow::Break(());
        };
        let rotations = inner.log.stats().rotations;
        if rotations != seen_rotations {
            seen_rotations = rotations;
            if let Err(e) = run_pass(&inner, false, &LowPriority(&inner)) {
                tracing::warn!(error = %e, "background compaction failed; will retry");
            }
        }
        ControlFlow::Continue(())
    })
}

#[cfg(test)]
mod tests {
    use super::collect_live;
    use crate::{AgentDelta, Options, Store};

    /// A store whose bytes are mostly a tool-call journal: every call record is live, so
    /// the live bytes a pass weighs must hold them, or the journal looks dead.
    #[test]
    fn live_bytes_count_the_call_journal() {
        let dir = tempfile::tempdir().unwrap();
        let options = Options {
            auto_compact: false,
            ..Options::default()
        };
        let store: Store = Store::open_with(dir.path(), options).unwrap();
        let result = vec![7u8; 4096];
        for i in 0..50 {
            let id = format!("call-{i}");
            store.begin_call("journal", &id, "tool", b"args").unwrap();
            store.finish_call("journal", &id, &result).unwrap();
        }
        store
            .begin_call("journal", "pending", "tool", &[1u8; 8192])
            .unwrap();
        store
            .commit("t", &AgentDelta::default().set("k", 1))
            .unwrap();
        let (positions, bytes) = collect_live(&store.inner, &|_| true);
        assert_eq!(positions.len(), 50 * 2 + 1 + 1);
        assert!(bytes >= 50 * 4096 + 8192, "live bytes {bytes}");
        let stats = store.stats();
        assert!(
            bytes <= stats.bytes_written,
            "{bytes} > {}",
            stats.bytes_written
        );
    }
}
