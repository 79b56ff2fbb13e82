//! The background compactor's hooks: the store's own ([`Inner`]'s), except that a pass's
//! lock-free bulk (reading, checksumming, compressing and writing the compacted segment)
//! runs on a short-lived thread at nice [`COMPACTOR_NICE`], while the pass itself, and
//! with it every hold of a lock that committers wait on (the barrier, the install and
//! remap, group-commit leadership in the pass's flush), stays on the compactor thread at
//! the priority the store was opened with.
//!
//! Why not the whole pass at low priority: under CPU load the scheduler gives a nice-19
//! thread about 1.5% of a core, so a lock it holds for a few milliseconds of CPU is held
//! for seconds, and every commit behind it waits as long (priority inversion). An
//! unprivileged thread cannot raise its priority again once lowered (`RLIMIT_NICE`), so
//! the low-priority work gets a thread of its own.

use std::collections::HashMap;

use super::Inner;
use crate::log::{CompactionHooks, Moved, RecordPos};

/// The nice value of the thread a background pass's bulk runs on (the lowest priority
/// short of `SCHED_IDLE`). That work spends CPU committers need when they are bound by
/// CPU; at this priority it takes mostly what they leave, yet still gets a share under
/// full load (the scheduler weighs nice 19 at 15 against nice 0's 1,024), so a pass never
/// stops. Measured at 64 tasks on 2 cores, compacting throughout a run: 0.85–0.92× the
/// commits/s of a store that did not compact, against 0.65–0.83× at nice 0
/// (bench-results/format-v2.md).
pub(crate) const COMPACTOR_NICE: i32 = 19;

/// [`Inner`]'s hooks, with the pass's bulk offloaded to a low-priority thread.
pub(crate) struct LowPriority<'a>(pub &'a Inner);

impl CompactionHooks for LowPriority<'_> {
    fn positions_lock(&self) -> &parking_lot::RwLock<()> {
        self.0.positions_lock()
    }

    fn live_records(&self, sealed: &dyn Fn(RecordPos) -> bool) -> (Vec<RecordPos>, u64) {
        self.0.live_records(sealed)
    }

    fn orphan(
        &self,
        vanishes: &dyn Fn(RecordPos) -> bool,
        moved: &HashMap<RecordPos, Moved>,
    ) -> Option<RecordPos> {
        self.0.orphan(vanishes, moved)
    }

    fn remap(&self, moved: &HashMap<RecordPos, Moved>) {
        self.0.remap(moved);
    }

    fn rewrite(&self, kind: u8, payload: &[u8]) -> Option<Vec<u8>> {
        self.0.rewrite(kind, payload)
    }

    fn rewrites(&self) -> bool {
        self.0.rewrites()
    }

    fn rewritable_bytes(&self, fresh: &dyn Fn(RecordPos) -> bool) -> Option<u64> {
        self.0.rewritable_bytes(fresh)
    }

    /// Runs `work` on a new thread at nice [`COMPACTOR_NICE`] and waits for it; on this
    /// thread if the OS refuses a thread.
    fn offload(&self, work: &mut (dyn FnMut() + Send)) {
        if !run_at_low_priority(work) {
            work();
        }
    }
}

/// Runs `work` on a scoped thread at nice [`COMPACTOR_NICE`]; `false` (without running
/// it) if the thread could not be started. A panic in `work` is resumed here.
fn run_at_low_priority(work: &mut (dyn FnMut() + Send)) -> bool {
    std::thread::scope(|scope| {
        let spawned = std::thread::Builder::new()
            .name("agentwal-compactor-work".into())
            .spawn_scoped(scope, || {
                crate::background::lower_this_thread_priority(COMPACTOR_NICE);
                work();
            });
        match spawned {
            Ok(thread) => match thread.join() {
                Ok(()) => true,
                Err(panic) => std::panic::resume_unwind(panic),
            },
            Err(e) => {
                tracing::warn!(error = %e, "could not start a low-priority compaction thread");
                false
            }
        }
    })
}
