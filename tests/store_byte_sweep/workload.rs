//! The workload swept, its constants, and the answers a store must give after it.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentwal::log::SEGMENT_HEADER_BYTES;
use agentwal::storage::Storage;
use agentwal::storage::sim::SimStorage;
use agentwal::{AgentDelta, AgentState, Message, Options, PendingCall, Store, SyncMode};

/// The store's directory on the simulated disk.
pub(crate) const DIR: &str = "/agents/db";

pub(crate) const HEADER: usize = SEGMENT_HEADER_BYTES;

/// Bytes past the end of the data that the flip sweep covers (preallocated zeros).
pub(crate) const FLIP_PAST_END: usize = 64;

/// A writer ends its batches in a recycled file on a block of this size, with zeros
/// (docs/format.md §6): the earlier life's bytes start at the next multiple of it.
pub(crate) const FILL_BLOCK_BYTES: usize = 4096;

/// A segment is preallocated up to `min(4 MiB, segment_bytes)` and recovery reads all of
/// it; 8 KiB keeps thousands of opens fast and still holds every record in one segment.
pub(crate) const SEGMENT_BYTES: u64 = 8 << 10;

/// Tasks the operations touch, and the one each recovered store is written to afterwards.
const TASKS: [&str; 3] = ["alpha", "beta", "gamma"];

pub(crate) const AFTER_TASK: &str = "after";

/// Call ids the operations use, by task.
const CALLS: [(&str, &str); 3] = [("alpha", "c1"), ("beta", "c2"), ("alpha", "c3")];

/// Failures reported in full.
pub(crate) const FAILURES_SHOWN: usize = 10;

/// Store record kinds (docs/format.md §8).
const KIND_CHECKPOINT: u8 = 1;

const KIND_CALL_BEGIN: u8 = 2;

const KIND_CALL_FINISH: u8 = 3;

const KIND_DELETE: u8 = 4;

#[derive(Debug, Clone)]
pub(crate) enum Op {
    Commit(&'static str, u32),
    Begin(&'static str, &'static str),
    Finish(&'static str, &'static str),
    Delete(&'static str),
}

impl Op {
    pub(crate) fn kind(&self) -> u8 {
        match self {
            Op::Commit(..) => KIND_CHECKPOINT,
            Op::Begin(..) => KIND_CALL_BEGIN,
            Op::Finish(..) => KIND_CALL_FINISH,
            Op::Delete(_) => KIND_DELETE,
        }
    }
}

/// One record each, in this order. With `snapshot_every: 3` every task's third checkpoint
/// is a snapshot; gamma is deleted and re-created (its seqs start again at 1).
pub(crate) fn ops() -> Vec<Op> {
    use Op::*;
    vec![
        Commit("alpha", 1),
        Commit("beta", 2),
        Commit("alpha", 3),
        Begin("alpha", "c1"),
        Commit("gamma", 4),
        Commit("alpha", 5),
        Commit("beta", 6),
        Begin("beta", "c2"),
        Finish("alpha", "c1"),
        Commit("beta", 7),
        Commit("gamma", 8),
        Delete("gamma"),
        Commit("alpha", 9),
        Commit("beta", 10),
        Commit("gamma", 11),
        Begin("alpha", "c3"),
        Commit("alpha", 12),
        Finish("beta", "c2"),
        Commit("gamma", 13),
        Commit("beta", 14),
    ]
}

/// A small delta: a message and a variable.
pub(crate) fn delta(i: u32) -> AgentDelta {
    AgentDelta::default()
        .message(Message::user(format!("step {i}")))
        .set("step", i64::from(i))
}

fn args(call: &str) -> Vec<u8> {
    format!("args of {call}").into_bytes()
}

fn result(call: &str) -> Vec<u8> {
    format!("result of {call}").into_bytes()
}

pub(crate) fn run(store: &Store, op: &Op) -> agentwal::Result<()> {
    match op {
        Op::Commit(task, i) => store.commit(task, &delta(*i)).map(drop),
        Op::Begin(task, call) => store.begin_call(task, call, "search", &args(call)),
        Op::Finish(task, call) => store.finish_call(task, call, &result(call)),
        Op::Delete(task) => store.delete_task(task),
    }
}

/// What a store answers about one task.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TaskAnswer {
    /// Seq and state of the latest checkpoint.
    pub(crate) latest: Option<(u64, AgentState)>,
    /// (seq, snapshot) of every checkpoint.
    pub(crate) checkpoints: Vec<(u64, bool)>,
    pub(crate) pending: Vec<PendingCall>,
}

/// What a store answers: the observable state the sweeps compare.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    pub(crate) tasks: Vec<String>,
    pub(crate) by_task: BTreeMap<String, TaskAnswer>,
    pub(crate) results: BTreeMap<(String, String), Option<Vec<u8>>>,
}

pub(crate) fn answer(store: &Store) -> agentwal::Result<Answer> {
    let mut by_task = BTreeMap::new();
    for task in TASKS.iter().chain([&AFTER_TASK]) {
        let latest = store
            .load_latest(task)?
            .map(|cp| (cp.seq, AgentState::clone(&cp.state)));
        let checkpoints = store
            .list_checkpoints(task)?
            .iter()
            .map(|c| (c.seq, c.snapshot))
            .collect();
        let pending = store.pending_calls(task)?;
        let t = TaskAnswer {
            latest,
            checkpoints,
            pending,
        };
        by_task.insert(task.to_string(), t);
    }
    let mut results = BTreeMap::new();
    for (task, call) in CALLS {
        let r = store.call_result(task, call)?;
        results.insert((task.to_string(), call.to_string()), r);
    }
    Ok(Answer {
        tasks: store.tasks()?,
        by_task,
        results,
    })
}

pub(crate) fn options(sync: SyncMode) -> Options {
    Options {
        sync,
        segment_bytes: SEGMENT_BYTES,
        snapshot_every: 3,
        auto_compact: false,
        // Records of planned sizes: the prelude fills segments so that one is recycled.
        compression: agentwal::Compression::None,
        ..Options::default()
    }
}

pub(crate) fn open(sim: &SimStorage) -> agentwal::Result<Store> {
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    Store::open_on(storage, DIR, options(SyncMode::Always))
}
