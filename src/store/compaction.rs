//! Compaction and retention: decides what is live, rewrites the live records of the
//! oldest segments forward (see `log::compact` for the crash-safe file steps), and keeps
//! the index pointing at them.
//!
//! Live: each task's records from the fold base of its oldest retained checkpoint to its
//! latest, and the tool-call records of live tasks. Dead: everything else (checkpoints
//! retention dropped, deleted tasks, deletion records once their task's older records
//! are gone, which compaction of a whole prefix guarantees).

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Weak;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::index::Index;
use super::{CompactionReport, Inner, Store, now_ms};
use crate::background::Periodic;
use crate::error::Result;
use crate::log::format::{SEAL_RECORD_BYTES, SEGMENT_HEADER_BYTES};
use crate::log::{Log, RecordPos};
use crate::state::State;

/// Automatic compaction waits until the sealed segments hold at least this many dead bytes.
pub const COMPACTION_DEAD_BYTES_MIN: u64 = 1 << 20;
/// How often the background thread looks at the log.
const COMPACTION_CHECK_INTERVAL: Duration = Duration::from_millis(100);

impl<S: State> Store<S> {
    /// Runs a compaction pass now: applies retention and rewrites every sealed segment's
    /// live records into one compacted segment, deleting the rest.
    pub fn compact(&self) -> Result<CompactionReport> {
        self.writable()?;
        run_pass(&self.inner, true)
    }
}

/// Live records of sealed segments, in log order, and their bytes.
struct LiveSet {
    positions: Vec<RecordPos>,
    bytes: u64,
}

/// Applies retention to the index and collects the live records below `active`.
fn collect_live(index: &Inner, active: u64) -> LiveSet {
    let o = &index.options;
    let (keep, max_age_ms) = (o.keep_checkpoints, o.max_age.map(|d| d.as_millis() as u64));
    let now = now_ms();
    let mut live = LiveSet {
        positions: Vec::new(),
        bytes: 0,
    };
    index.index.for_each_mut(|_, data| {
        let retained = data.retained_from(keep, max_age_ms, now);
        data.prune_before(data.needed_from(retained));
        for cp in data
            .checkpoints
            .iter()
            .filter(|c| c.pos.segment_id < active)
        {
            live.positions.push(cp.pos);
            live.bytes += u64::from(cp.bytes);
        }
        for call in data.calls.values() {
            for pos in std::iter::once(call.begin).chain(call.finish) {
                if pos.segment_id < active {
                    live.positions.push(pos);
                }
            }
        }
    });
    live.positions.sort_unstable();
    live
}

/// One compaction pass. `force`: compact every sealed segment; otherwise only when dead
/// bytes outweigh live ones (or a prefix of segments holds nothing live).
pub(crate) fn run_pass(inner: &Inner, force: bool) -> Result<CompactionReport> {
    let _pass = inner.compactor.lock();
    let started = Instant::now();
    let log = &inner.log;
    // Barrier: committers hold `relocation` shared from append to index update, so once
    // we hold it exclusively every durable record below the active segment is indexed.
    let active = {
        let _barrier = inner.relocation.write();
        log.active_segment_id()?
    };
    let live = collect_live(inner, active);
    let sealed: Vec<(u64, u64)> = sealed_sizes(log, active)?;
    let Some(through) = choose_prefix(&sealed, &live, force) else {
        return Ok(CompactionReport::default());
    };
    // The live set reflects every record appended so far; make them durable before
    // records they made dead disappear. Otherwise (`SyncMode::Periodic`/`Never`) a crash
    // could lose a deletion after compaction dropped the task's older records, and bring
    // the task back with only its newer ones: a state that never existed.
    log.flush()?;
    // Whole segments with nothing live go first, before anything is written: on a full
    // disk the compacted segment needs the space they free. Only a leading run of them
    // (the log must stay a chain) and never `through` itself, which the compacted
    // segment replaces (its seal carries the chain on to the active segment).
    let dead_through = live
        .positions
        .first()
        .map_or(through, |p| p.segment_id.saturating_sub(1))
        .min(through.saturating_sub(1));
    let (mut removed, mut removed_bytes) = (Vec::new(), 0);
    if dead_through > 0 && no_entry_through(inner, dead_through) {
        (removed, removed_bytes) = log.remove_dead_prefix(dead_through)?;
    }
    let in_prefix: Vec<RecordPos> = live
        .positions
        .iter()
        .copied()
        .filter(|p| p.segment_id <= through)
        .collect();
    let prepared = log.prepare_compaction(through, &in_prefix)?;
    {
        // Loads hold this lock shared while they resolve and read positions.
        let _relocating = inner.relocation.write();
        let map: HashMap<RecordPos, RecordPos> = prepared.moved.iter().copied().collect();
        if let Some(missing) = unmoved_entry(&inner.index, &map, through) {
            // Never install a segment that would orphan an indexed record.
            log.abandon_compaction(&prepared);
            return Err(crate::Error::InvalidArgument(format!(
                "compaction skipped: indexed record {missing:?} was not copied (retry later)"
            )));
        }
        let installed = log.install_compaction(&prepared);
        // A failed directory fsync leaves the compacted segment in place (its durability
        // unknown, so nothing is deleted below): the old positions are gone either way.
        if prepared.is_installed() {
            remap(&inner.index, &map, through);
        }
        installed?;
    }
    let (superseded, superseded_bytes) = log.remove_superseded(through)?;
    removed.extend(superseded);
    removed_bytes += superseded_bytes;
    let replaced: u64 = sealed
        .iter()
        .filter(|(id, _)| *id == through)
        .map(|(_, b)| b)
        .sum();
    inner.compactions.fetch_add(1, Ordering::Relaxed);
    let report = CompactionReport {
        segments_deleted: removed.len() as u64,
        records_rewritten: prepared.moved.len() as u64,
        bytes_reclaimed: (removed_bytes + replaced).saturating_sub(prepared.bytes),
        elapsed_ms: started.elapsed().as_millis() as u64,
        removed,
    };
    tracing::info!(
        through,
        segments_deleted = report.segments_deleted,
        records_rewritten = report.records_rewritten,
        bytes_reclaimed = report.bytes_reclaimed,
        elapsed_ms = report.elapsed_ms,
        "compaction pass"
    );
    Ok(report)
}

fn sealed_sizes(log: &Log, active: u64) -> Result<Vec<(u64, u64)>> {
    let mut sizes = log.segment_sizes()?;
    sizes.retain(|(id, _)| *id < active);
    Ok(sizes)
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
    let before_live = live
        .positions
        .first()
        .map_or(last, |p| p.segment_id.saturating_sub(1));
    let prefix = sealed
        .iter()
        .take_while(|(id, _)| *id <= before_live)
        .count();
    let worth = prefix > 1 || (prefix == 1 && first_bytes > empty_compacted);
    (worth && before_live >= first).then_some(before_live)
}

/// Whether no index entry points into segments `<= through` (checked under the
/// relocation lock, like [`unmoved_entry`]: nothing may be deleted that a load can still
/// reach).
fn no_entry_through(inner: &Inner, through: u64) -> bool {
    let _relocating = inner.relocation.write();
    unmoved_entry(&inner.index, &HashMap::new(), through).is_none()
}

/// An index entry inside the prefix that compaction did not copy, if any.
fn unmoved_entry(
    index: &Index,
    map: &HashMap<RecordPos, RecordPos>,
    through: u64,
) -> Option<RecordPos> {
    let mut missing = None;
    let mut check = |pos: RecordPos| {
        if pos.segment_id <= through && !map.contains_key(&pos) {
            missing.get_or_insert(pos);
        }
    };
    index.for_each(|_, data| {
        data.checkpoints.iter().for_each(|c| check(c.pos));
        for call in data.calls.values() {
            check(call.begin);
            call.finish.into_iter().for_each(&mut check);
        }
    });
    missing
}

/// Points index entries at the records' new positions (`unmoved_entry` found none missing).
fn remap(index: &Index, map: &HashMap<RecordPos, RecordPos>, through: u64) {
    let relocate = |pos: &mut RecordPos| {
        if pos.segment_id <= through
            && let Some(new) = map.get(pos)
        {
            *pos = *new;
        }
    };
    index.for_each_mut(|_, data| {
        data.checkpoints.relocate(|mut pos| {
            relocate(&mut pos);
            pos
        });
        for call in data.calls.values_mut() {
            relocate(&mut call.begin);
            if let Some(f) = call.finish.as_mut() {
                relocate(f);
            }
        }
    });
}

/// Starts the background compaction thread: after each segment rotation it runs a pass if
/// one is due. Dropping the handle stops and joins it.
pub(crate) fn spawn_background(inner: Weak<Inner>) -> Option<Periodic> {
    let mut seen_rotations = 0;
    Periodic::spawn("agentwal-compactor", COMPACTION_CHECK_INTERVAL, move || {
        let Some(inner) = inner.upgrade() else {
            return ControlFlow::Break(());
        };
        let rotations = inner.log.stats().rotations;
        if rotations != seen_rotations {
            seen_rotations = rotations;
            if let Err(e) = run_pass(&inner, false) {
                tracing::warn!(error = %e, "background compaction failed; will retry");
            }
        }
        ControlFlow::Continue(())
    })
}
