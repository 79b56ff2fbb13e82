//! The latest-state cache: each task's newest state, kept after a commit or a load, so
//! `load_latest` and the next snapshot need not read and fold the log again.
//!
//! An entry is valid only for the task slot and the seq it was made for. A commit takes
//! the entry out, applies its delta to it and puts it back under the new seq once the
//! record is durable; a deleted task's slot is never the live one again, so a stale
//! entry can miss but never answer. The budget counts encoded bytes (the task's latest
//! snapshot record plus the delta records since), an estimate of the state's size.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::index::TaskSlot;

/// One cached state.
struct Entry<S> {
    slot: Arc<TaskSlot>,
    seq: u64,
    state: Arc<S>,
    bytes: u64,
}

impl<S> Entry<S> {
    /// Whether this entry is the state at `seq` of this very slot (not of a deleted and
    /// recreated task of the same name).
    fn is_for(&self, slot: &Arc<TaskSlot>, seq: u64) -> bool {
        self.seq == seq && Arc::ptr_eq(&self.slot, slot)
    }
}

/// Each task's latest state, within a byte budget.
pub(crate) struct StateCache<S> {
    budget_bytes: u64,
    inner: Mutex<Entries<S>>,
}

struct Entries<S> {
    map: HashMap<Box<str>, Entry<S>>,
    bytes: u64,
}

impl<S> StateCache<S> {
    /// A cache holding at most `budget_bytes` of states (0 disables it).
    pub fn new(budget_bytes: u64) -> Self {
        StateCache {
            budget_bytes,
            inner: Mutex::new(Entries {
                map: HashMap::new(),
                bytes: 0,
            }),
        }
    }

    /// The task's state at `seq`, if cached for this slot.
    pub fn get(&self, task: &str, slot: &Arc<TaskSlot>, seq: u64) -> Option<Arc<S>> {
        let inner = self.inner.lock();
        let e = inner.map.get(task)?;
        e.is_for(slot, seq).then(|| e.state.clone())
    }

    /// Removes and returns the task's state at `seq` (a commit is about to advance it);
    /// drops an entry that does not match.
    pub fn take(&self, task: &str, slot: &Arc<TaskSlot>, seq: u64) -> Option<Arc<S>> {
        let mut inner = self.inner.lock();
        let e = inner.map.remove(task)?;
        inner.bytes -= e.bytes;
        e.is_for(slot, seq).then_some(e.state)
    }

    /// Caches `state` as the task's state at `seq`, unless an entry for a newer seq of
    /// the same slot is already there (a load that raced a commit). Evicts other entries
    /// to stay within the budget; a state larger than the whole budget is not kept.
    pub fn put(&self, task: &str, slot: &Arc<TaskSlot>, seq: u64, state: Arc<S>, bytes: u64) {
        if bytes > self.budget_bytes {
            return;
        }
        let mut inner = self.inner.lock();
        if let Some(e) = inner.map.get(task)
            && Arc::ptr_eq(&e.slot, slot)
            && e.seq >= seq
        {
            return;
        }
        if let Some(old) = inner.map.remove(task) {
            inner.bytes -= old.bytes;
        }
        // Any entry will do: the cache serves the tasks an agent is running, and those
        // come back after an eviction at the cost of one fold.
        while inner.bytes + bytes > self.budget_bytes {
            let Some(victim) = inner.map.keys().next().cloned() else {
                break;
            };
            if let Some(e) = inner.map.remove(&victim) {
                inner.bytes -= e.bytes;
            }
        }
        inner.bytes += bytes;
        let entry = Entry {
            slot: slot.clone(),
            seq,
            state,
            bytes,
        };
        inner.map.insert(task.into(), entry);
        debug_assert!(inner.bytes <= self.budget_bytes, "cache over budget");
    }

    /// Forgets the task (it was deleted).
    pub fn remove(&self, task: &str) {
        let mut inner = self.inner.lock();
        if let Some(e) = inner.map.remove(task) {
            inner.bytes -= e.bytes;
        }
    }
}
