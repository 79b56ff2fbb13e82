//! The plan: the state a task keeps (`Tally`), the steps, and how a seed plans them
//! over task slots and forks.

use agentwal::State;
use serde::{Deserialize, Serialize};

use super::super::rng::Rng;

use super::coverage::compressible_bytes;
use super::{BIG_DELTA_BYTES, BULK_BYTES_MAX, BULK_DELTA_MIN, options};

/// A state whose every value tells which deltas were folded, in which order; the big
/// deltas are kept too (`bulk`), so its size grows with them.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    pub count: u64,
    pub hash: u64,
    pub last: Vec<u8>,
    /// The latest `BULK_BYTES_MAX` bytes of the deltas of `BULK_DELTA_MIN` bytes or more.
    #[serde(with = "serde_bytes")]
    pub bulk: Vec<u8>,
}

impl std::fmt::Debug for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tally {{ count: {}, hash: {:#x}, last: {:?}, bulk: {} bytes }}",
            self.count,
            self.hash,
            self.last,
            self.bulk.len()
        )
    }
}

impl State for Tally {
    type Delta = Vec<u8>;
    fn apply(&mut self, delta: &Vec<u8>) {
        self.count += 1;
        // A word at a time: states of many KiB are folded at every check.
        let words = delta.chunks_exact(8);
        let tail = words
            .remainder()
            .iter()
            .fold(0, |w, &b| w << 8 | u64::from(b));
        for word in words.map(|w| u64::from_le_bytes(w.try_into().unwrap())) {
            self.hash = (self.hash ^ word).wrapping_mul(0x100_0000_01B3);
        }
        self.hash = (self.hash ^ tail).wrapping_mul(0x100_0000_01B3);
        self.hash = self.hash.rotate_left(7) ^ delta.len() as u64;
        self.last = delta[..delta.len().min(12)].to_vec();
        if delta.len() >= BULK_DELTA_MIN {
            self.bulk.extend_from_slice(delta);
            let over = self.bulk.len().saturating_sub(BULK_BYTES_MAX);
            self.bulk.drain(..over);
        }
    }
}

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Step {
    Commit(String, Vec<u8>),
    Begin(String, String, Vec<u8>),
    Finish(String, String, Vec<u8>),
    Delete(String),
    Compact,
    Load(String),
    /// Forks the first task at its latest seq into the second (a new task).
    Fork(String, String),
}

impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Commit(t, d) => write!(f, "commit({t}, {} bytes)", d.len()),
            Step::Begin(t, c, a) => write!(f, "begin_call({t}, {c}, {} bytes)", a.len()),
            Step::Finish(t, c, r) => write!(f, "finish_call({t}, {c}, {} bytes)", r.len()),
            Step::Delete(t) => write!(f, "delete_task({t})"),
            Step::Compact => write!(f, "compact()"),
            Step::Load(t) => write!(f, "load_latest({t})"),
            Step::Fork(from, to) => write!(f, "fork({from} at its latest seq, {to})"),
        }
    }
}

impl Step {
    pub(super) fn task(&self) -> Option<&str> {
        match self {
            Step::Commit(t, _)
            | Step::Begin(t, ..)
            | Step::Finish(t, ..)
            | Step::Delete(t)
            | Step::Load(t)
            | Step::Fork(_, t) => Some(t),
            Step::Compact => None,
        }
    }
}

/// A task slot of a thread while its plan is made.
#[derive(Default)]
pub(super) struct Slot {
    pub(super) generation: u32,
    pub(super) commits: u32,
    pub(super) open_calls: Vec<String>,
    /// Bytes the task's state keeps of big deltas (`Tally::bulk`), about.
    pub(super) bulk: u64,
}

/// Each thread's steps. Every task belongs to one thread (so its commits are in plan
/// order); threads share group commits, rotations and compactions. Slot 1 of thread 0
/// (the one that compacts) is the big one: a third of its commits are big deltas
/// ([`BIG_DELTA_BYTES`]), which its state keeps. A fork moves the slot on to the new task
/// (the source stays); a task whose state is larger than a segment is forked more often.
pub fn plan(seed: u64, threads: usize, steps: usize) -> Vec<Vec<Step>> {
    let mut rng = Rng(seed);
    (0..threads)
        .map(|t| {
            let mut slots = [Slot::default(), Slot::default()];
            let mut calls = 0;
            let mut out = Vec::new();
            for _ in 0..steps {
                let s = rng.below(2) as usize;
                let task = format!("t{t}s{s}g{}", slots[s].generation);
                let slot = &mut slots[s];
                let step = match rng.below(100) {
                    45..60 => {
                        calls += 1;
                        let call = format!("c{calls}");
                        slot.open_calls.push(call.clone());
                        let len = rng.below(700) as usize;
                        Step::Begin(task, call, rng.bytes(len))
                    }
                    60..75 if !slot.open_calls.is_empty() => {
                        let calls = &mut slot.open_calls;
                        let call = calls.remove(rng.below(calls.len() as u64) as usize);
                        let len = rng.below(300) as usize;
                        Step::Finish(task, call, rng.bytes(len))
                    }
                    75..79 if slot.commits > 0 => {
                        *slot = Slot {
                            generation: slot.generation + 1,
                            ..Slot::default()
                        };
                        Step::Delete(task)
                    }
                    79..85 => Step::Load(task),
                    85..92 if t == 0 => Step::Compact,
                    92..95 if slot.commits > 0 => fork(slot, task, t, s),
                    95..99 if slot.bulk > options().segment_bytes => fork(slot, task, t, s),
                    _ => {
                        slot.commits += 1;
                        let big = t == 0 && s == 1 && rng.below(3) == 0;
                        let len = match rng.below(5) {
                            _ if big => {
                                BIG_DELTA_BYTES.start
                                    + rng.below(BIG_DELTA_BYTES.end - BIG_DELTA_BYTES.start)
                            }
                            0 => 300 + rng.below(1500),
                            _ => 1 + rng.below(200),
                        };
                        if len as usize >= BULK_DELTA_MIN {
                            slot.bulk = (slot.bulk + len).min(BULK_BYTES_MAX as u64);
                        }
                        // Those of even length text-like, which compaction compresses
                        // (the default `Compression`), the rest incompressible. Both
                        // draw one number per byte: the plans of earlier seeds stand.
                        let delta = if len % 2 == 0 {
                            compressible_bytes(&mut rng, len as usize)
                        } else {
                            rng.bytes(len as usize)
                        };
                        Step::Commit(task, delta)
                    }
                };
                out.push(step);
            }
            out
        })
        .collect()
}

/// A fork of the slot's task: the new generation's seq 1, with the same state (the
/// source keeps its calls).
pub(super) fn fork(slot: &mut Slot, task: String, thread: usize, s: usize) -> Step {
    slot.generation += 1;
    slot.commits = 1;
    slot.open_calls.clear();
    Step::Fork(task, format!("t{thread}s{s}g{}", slot.generation))
}
