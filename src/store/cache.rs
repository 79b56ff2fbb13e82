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

use std::borrow::Cow;
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
    /// reader holds the state, else queued. Never copies the state; an owned delta is
    /// moved into it, not copied.
    pub fn advance(&mut self, delta: Cow<'_, S::Delta>) {
        match Arc::get_mut(&mut self.state) {
            Some(state) => {
                for queued in self.pending.drain(..) {
                    state.apply_owned(queued);
                }
                match delta {
                    Cow::Borrowed(delta) => state.apply(delta),
                    Cow::Owned(delta) => state.apply_owned(delta),
                }
            }
            None => self.pending.push(delta.into_owned()),
        }
    }

    /// The state with every queued delta applied (copied once first if a reader still
    /// holds it).
    pub fn folded(&mut self) -> &Arc<S> {
        if !self.pending.is_empty() {
            let state = Arc::make_mut(&mut self.state);
            for queued in self.pending.drain(..) {
                state.apply_owned(queued);
            }
        }
        &self.state
    }

    /// The state, if no delta is queued.
    fn ready(&self) -> Option<&Arc<S>> {
        self.pending.is_empty().then_some(&self.state)
    }
}

/// One cached state, or a placeholder (`cached: None`, 0 bytes) while a commit has it
/// out: the commit's `put` then finds the key in place (one hash, no new key).
struct Entry<S: State> {
    slot: Arc<TaskSlot>,
    seq: u64,
    cached: Option<Cached<S>>,
    bytes: u64,
}

impl<S: State> Entry<S> {
    /// Whether this entry holds the state at `seq` of this very slot (not of a deleted and
    /// recreated task of the same name).
    fn is_for(&self, slot: &Arc<TaskSlot>, seq: u64) -> bool {
        self.cached.is_some() && self.seq == seq && Arc::ptr_eq(&self.slot, slot)
    }
}

/// Each task's latest state, within a byte budget.
pub(crate) struct StateCache<S: State> {
    budget_bytes: u64,
    inner: Mutex<Entries<S>>,
}

struct Entries<S: State> {
    map: HashMap<Box<str>, Entry<S>>,
    /// Bytes of the entries (placeholders count 0).
    bytes: u64,
}

impl<S: State> Entries<S> {
    /// Takes the task's state out if it is the one at `seq` of `slot`, leaving a
    /// placeholder; drops an entry that is not.
    fn take(&mut self, task: &str, slot: &Arc<TaskSlot>, seq: u64) -> Option<Cached<S>> {
        let e = self.map.get_mut(task)?;
        self.bytes -= e.bytes;
        e.bytes = 0;
        if e.is_for(slot, seq) {
            return e.cached.take();
        }
        self.map.remove(task);
        None
    }
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
        let (mut cached, bytes) = {
            let mut inner = self.inner.lock();
            let e = inner.map.get(task)?;
            if !e.is_for(slot, seq) {
                return None;
            }
            if let Some(state) = e.cached.as_ref().and_then(Cached::ready) {
                return Some(state.clone());
            }
            let bytes = e.bytes;
            (inner.take(task, slot, seq)?, bytes)
        };
        let state = cached.folded().clone();
        self.put(task, slot, seq, cached, bytes);
        Some(state)
    }

    /// Takes out the task's state at `seq` (a commit is about to advance it); drops an
    /// entry that does not match.
    pub fn take(&self, task: &str, slot: &Arc<TaskSlot>, seq: u64) -> Option<Cached<S>> {
        self.inner.lock().take(task, slot, seq)
    }

    /// Caches `cached` as the task's state at `seq`, unless an entry for the same or a
    /// newer seq of the same slot is already there (a load that raced a commit). Evicts
    /// other entries to stay within the budget; a state larger than the whole budget is
    /// not kept.
    pub fn put(&self, task: &str, slot: &Arc<TaskSlot>, seq: u64, cached: Cached<S>, bytes: u64) {
        let mut inner = self.inner.lock();
        let Entries { map, bytes: total } = &mut *inner;
        if let Some(e) = map.get_mut(task) {
            if e.cached.is_some() && Arc::ptr_eq(&e.slot, slot) && e.seq >= seq {
                return;
            }
            *total -= e.bytes;
            e.bytes = 0;
            // The usual case, a commit putting back what it took: in place.
            if bytes <= self.budget_bytes && *total + bytes <= self.budget_bytes {
                *total += bytes;
                *e = Entry {
                    slot: slot.clone(),
                    seq,
                    cached: Some(cached),
                    bytes,
                };
                return;
            }
            map.remove(task);
        }
        if bytes > self.budget_bytes {
            return;
        }
        // Any entry will do: the cache serves the tasks an agent is running, and those
        // come back after an eviction at the cost of one fold.
        while *total + bytes > self.budget_bytes {
            let Some(victim) = map.keys().next().cloned() else {
                break;
            };
            if let Some(e) = map.remove(&victim) {
                *total -= e.bytes;
            }
        }
        *total += bytes;
        let entry = Entry {
            slot: slot.clone(),
            seq,
            cached: Some(cached),
            bytes,
        };
        map.insert(task.into(), entry);
        debug_assert!(*total <= self.budget_bytes, "cache over budget");
    }

    /// Forgets the task (it was deleted).
    pub fn remove(&self, task: &str) {
        let mut inner = self.inner.lock();
        if let Some(e) = inner.map.remove(task) {
            inner.bytes -= e.bytes;
        }
    }
}
