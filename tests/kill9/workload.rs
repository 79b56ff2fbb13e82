//! The workload both sides agree on: constants, the hash-chained state, deltas, task
//! names, tool calls and options.

use std::time::Duration;

use agentwal::{Options, State, SyncMode};
use serde::{Deserialize, Serialize};

pub(crate) const CHILD_ENV: &str = "AGENTWAL_KILL_CHILD";

pub(crate) const KEEP_ENV: &str = "AGENTWAL_KILL_KEEP";

pub(crate) const ROUNDS_ENV: &str = "AGENTWAL_KILL_ROUNDS";

pub(crate) const SEED_ENV: &str = "AGENTWAL_KILL_SEED";

/// Set for a child that writes through the async API.
pub(crate) const ASYNC_ENV: &str = "AGENTWAL_KILL_ASYNC";

pub(crate) const ROUNDS_DEFAULT: u64 = 25;

/// Marks the child's acknowledgement lines.
pub(crate) const ACK: &str = "#ack ";

pub(crate) const THREADS: usize = 3;

const TASKS_PER_THREAD: usize = 2;

pub(crate) const SHARED_TASK: &str = "shared";

/// The big writer's task, and the prefix of its forks' names.
pub(crate) const BIG_TASK: &str = "big";

const FORK_PREFIX: &str = "bigfork-";

/// `big` is forked at every seq that is a multiple of this.
pub(crate) const FORK_EVERY: u64 = 8;

/// Forks kept: making one deletes the one made this many forks before.
pub(crate) const FORKS_KEPT: u64 = 2;

pub(crate) const SEGMENT_BYTES: u64 = 64 << 10;

/// What a big state keeps of its deltas' bytes: 11 segments.
pub(crate) const BULK_BYTES_MAX: usize = 11 * SEGMENT_BYTES as usize;

pub(crate) const KEEP: u32 = 8;

pub(crate) const CALL_EVERY: u64 = 8;

pub(crate) const TOOL: &str = "tool";

/// A child that was not killed by then exits by itself (the parent failed).
pub(crate) const CHILD_DEADLINE: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------
// The deterministic workload, shared by child and parent

/// A state that is right only if deltas 1..=len were applied in order. A big task's
/// state also keeps its deltas' bytes (the latest `BULK_BYTES_MAX` of them).
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Chain {
    pub(crate) len: u64,
    pub(crate) hash: u64,
    pub(crate) last: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub(crate) bulk: Vec<u8>,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Chain {{ len: {}, hash: {:#x}, last: {} bytes, bulk: {} bytes }}",
            self.len,
            self.hash,
            self.last.len(),
            self.bulk.len()
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Step {
    pub(crate) seq: u64,
    #[serde(with = "serde_bytes")]
    pub(crate) payload: Vec<u8>,
    /// Whether the state keeps the payload (a big task's delta).
    pub(crate) keep: bool,
}

impl State for Chain {
    type Delta = Step;
    fn apply(&mut self, d: &Step) {
        self.len += 1;
        self.hash = chain_hash(self.hash, d);
        if d.keep {
            self.bulk.extend_from_slice(&d.payload);
            let over = self.bulk.len().saturating_sub(BULK_BYTES_MAX);
            self.bulk.drain(..over);
            self.last.clear();
        } else {
            self.last.clone_from(&d.payload);
        }
    }
}

pub(crate) fn chain_hash(prev: u64, d: &Step) -> u64 {
    let mut h = fnv(prev ^ 0x9e37_79b9_7f4a_7c15, &d.seq.to_le_bytes());
    h = fnv(h, &d.payload);
    h
}

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// xorshift64*, not the tests' shared SplitMix64 (`common::rng::Rng`): the deltas and the
/// kill schedule a printed `AGENTWAL_KILL_SEED` replays are this generator's streams.
pub(crate) struct XorShift64Star(pub(crate) u64);

impl XorShift64Star {
    pub(crate) fn new(seed: u64) -> Self {
        XorShift64Star(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1)
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn key(task: &str, seq: u64, salt: u64) -> u64 {
    fnv(
        fnv(0xcbf2_9ce4_8422_2325 ^ salt, task.as_bytes()),
        &seq.to_le_bytes(),
    )
}

/// Delta `seq` of `task`: mostly small, sometimes a few KiB, so records vary in size. A
/// big task's (`big` and its forks): mostly 8 to 64 KiB, a tenth of them larger than a
/// segment, a quarter small; its state keeps them.
pub(crate) fn delta(task: &str, seq: u64) -> Step {
    let mut rng = XorShift64Star::new(key(task, seq, 1));
    let keep = is_big(task);
    let len = match rng.below(20) {
        n if keep => match n {
            0..=1 => SEGMENT_BYTES + rng.below(2 * SEGMENT_BYTES),
            2..=6 => rng.below(400),
            _ => (8 << 10) + rng.below(SEGMENT_BYTES - (8 << 10)),
        },
        0 => 2000 + rng.below(3000),
        1..=4 => 0,
        _ => rng.below(400),
    };
    let payload = match keep {
        // Eight bytes per draw: big deltas are generated again at every check.
        true => (0..len.div_ceil(8))
            .flat_map(|_| rng.next().to_le_bytes())
            .take(len as usize)
            .collect(),
        false => (0..len).map(|_| rng.next() as u8).collect(),
    };
    Step { seq, payload, keep }
}

pub(crate) fn is_big(task: &str) -> bool {
    task == BIG_TASK || task.starts_with(FORK_PREFIX)
}

pub(crate) fn fork_name(at: u64) -> String {
    format!("{FORK_PREFIX}{at}")
}

/// The seq of `big` a fork was made from, by its name.
pub(crate) fn fork_source(task: &str) -> Option<u64> {
    task.strip_prefix(FORK_PREFIX)?.parse().ok()
}

pub(crate) fn call_id(seq: u64) -> String {
    format!("call-{seq}")
}

pub(crate) fn call_args(task: &str, seq: u64) -> Vec<u8> {
    format!("args of {task} {seq}").into_bytes()
}

pub(crate) fn call_result(task: &str, seq: u64) -> Vec<u8> {
    let mut rng = XorShift64Star::new(key(task, seq, 2));
    (0..rng.below(300)).map(|_| rng.next() as u8).collect()
}

pub(crate) fn owned_tasks(thread: usize) -> Vec<String> {
    (0..TASKS_PER_THREAD)
        .map(|k| format!("t{thread}-{k}"))
        .collect()
}

pub(crate) fn all_tasks() -> Vec<String> {
    let mut tasks: Vec<String> = (0..THREADS).flat_map(owned_tasks).collect();
    tasks.push(SHARED_TASK.to_string());
    tasks.push(BIG_TASK.to_string());
    tasks
}

pub(crate) fn options(keep: Option<u32>) -> Options {
    Options {
        sync: SyncMode::Always,
        segment_bytes: SEGMENT_BYTES,
        snapshot_every: 16,
        keep_checkpoints: keep,
        ..Options::default()
    }
}
