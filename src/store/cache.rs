//! The latest-state cache: each task's newest state, kept after a commit or a load, so
//! `load_latest` and the next snapshot need not read and fold the log again.
//!
//! An entry is valid only for the task slot and the seq it was made for. A commit takes
//! the entry out, advances it by its delta and puts it back under the new seq once the
//! record is durable; a deleted task's slot is never the live one again, so a stale
//! entry can miss but never answer. The budget counts encoded bytes (the task's latest
//! snapshot record plus the delta records since), an estimate of the state's size.
//!
//! An entry is a folded state plus the deltas committed since that are not yet applied
//! ([`Cached`]): a commit applies its delta in place when nobody else holds the state, and
//! otherwise queues it rather than copy a state a caller still reads. So a commit costs its
//! delta, whether or not the caller holds the `Checkpoint` it loaded; the queued deltas are
//! folded by the next load or snapshot.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::index::TaskSlot;
use crate::state::State;

/// A task's state as the cache keeps it: `state` with `pending` applied in order.
pub(crate) struct Cached<S: State> {
    state: Arc<S>,
    /// Deltas committed while a reader held `state` (at most the deltas since the last
    /// snapshot: a snapshot folds them).
    pending: Vec<S::Delta>,
}

impl<S: State> Cached<S> {
    /// A folded state.
    pub fn new(state: Arc<S>) -> Self {
        Cached {
            state,
            pending: Vec::new(),
        }
    }

    /// Advances the state by `delta`: applied in place (after the queued deltas) when no
    /// reader holds the state, else queued. Never copies the state.
    pub fn advance(&mut self, delta: &S::Delta) {
        match Arc::get_mut(&mut self.state) {
            Some(state) => {
                for queued in self.pending.drain(..) {
                    state.apply(&queued);
                }
                state.apply(delta);
            }
            None => self.pending.push(delta.clone()),
        }
    }

    /// The state with every queued delta applied (copied once first if a reader still
    /// holds it).
    pub fn folded(&mut self) -> &Arc<S> {
        if !self.pending.is_empty() {
            let state = Arc::make_mut(&mut self.state);
            for queued in self.pending.drain(..) {
                state.apply(&queued);
            }
        }
        &self.state
    }

    /// The state, if no delta is queued.
    fn ready(&self) -> Option<&Arc<S>> {
        self.pending.is_empty().then_some(&self.state)
    }
}

/// One cached state.
struct Entry<S: State> {
    slot: Arc<TaskSlot>,
    seq: u64,
    cached: Cached<S>,
    bytes: u64,
}

impl<S: State> Entry<S> {
    /// Whether this entry is the state at `seq` of this very slot (not of a deleted and
    /// recreated task of the same name).
    fn is_for(&self, slot: &Arc<TaskSlot>, seq: u64) -> bool {
        self.seq == seq && Arc::ptr_eq(&self.slot, slot)
    }
}

/// Each task's latest state, within a byte budget.
pub(crate) struct StateCache<S: State> {
    budget_bytes: u64,
    inner: Mutex<Entries<S>>,
}

struct Entries<S: State> {
    map: HashMap<Box<str>, Entry<S>>,
    bytes: u64,
}

impl<S: State> StateCache<S> {
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

    /// Whether the task's state at `seq` is cached for this slot.
    pub fn contains(&self, task: &str, slot: &Arc<TaskSlot>, seq: u64) -> bool {
        let inner = self.inner.lock();
        inner.map.get(task).is_some_and(|e| e.is_for(slot, seq))
    }

    /// The task's state at `seq`, if cached for this slot. Queued deltas are folded
    /// outside the cache's lock (the entry is out meanwhile: a commit racing this load
    /// misses and the next load folds from disk), then the entry goes back.
    pub fn get(&self, task: &str, slot: &Arc<TaskSlot>, seq: u64) -> Option<Arc<S>> {
        let mut entry = {
            let mut inner = self.inner.lock();
            let e = inner.map.get(task)?;
            if !e.is_for(slot, seq) {
                return None;
            }
            if let Some(state) = e.cached.ready() {
                return Some(state.clone());
            }
            let e = inner.map.remove(task)?;
            inner.bytes -= e.bytes;
            e
        };
        let state = entry.cached.folded().clone();
        let bytes = entry.bytes;
        self.put(task, slot, seq, entry.cached, bytes);
        Some(state)
    }

    /// Removes and returns the task's state at `seq` (a commit is about to advance it);
    /// drops an entry that does not match.
    pub fn take(&self, task: &str, slot: &Arc<TaskSlot>, seq: u64) -> Option<Cached<S>> {
        let mut inner = self.inner.lock();
        let e = inner.map.remove(task)?;
        inner.bytes -= e.bytes;
        e.is_for(slot, seq).then_some(e.cached)
    }

    /// Caches `cached` as the task's state at `seq`, unless an entry for the same or a
    /// newer seq of the same slot is already there (a load that raced a commit). Evicts
    /// other entries to stay within the budget; a state larger than the whole budget is
    /// not kept.
    pub fn put(&self, task: &str, slot: &Arc<TaskSlot>, seq: u64, cached: Cached<S>, bytes: u64) {
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
            cached,
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
