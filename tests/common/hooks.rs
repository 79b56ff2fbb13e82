//! Compaction hooks for tests that drive `Log::compact` directly, without a store's index.

use std::collections::HashMap;

use agentwal::log::{CompactionHooks, Moved, RecordPos};
use parking_lot::RwLock;

/// Compaction hooks of a log whose records are all dead: a (forced) pass retires every
/// sealed segment.
#[derive(Default)]
pub struct NothingLive(RwLock<()>);

impl CompactionHooks for NothingLive {
    fn positions_lock(&self) -> &RwLock<()> {
        &self.0
    }
    fn live_records(&self, _sealed: &dyn Fn(RecordPos) -> bool) -> (Vec<RecordPos>, u64) {
        (Vec::new(), 0)
    }
    fn orphan(
        &self,
        _vanishes: &dyn Fn(RecordPos) -> bool,
        _moved: &HashMap<RecordPos, Moved>,
    ) -> Option<RecordPos> {
        None
    }
    fn remap(&self, _moved: &HashMap<RecordPos, Moved>) {}
}
