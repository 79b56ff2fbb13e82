//! Shared by `tests/crash_sweep.rs` and `tests/io_errors.rs`: an agent workload planned
//! from a seed and run on the simulated storage, the log of what each call returned and
//! between which storage operations, and the oracle that judges a recovered store
//! against that log.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use agentwal::storage::Storage;
use agentwal::storage::sim::SimStorage;
use agentwal::{CallInfo, Error, Options, State, Store};
use serde::{Deserialize, Serialize};

use super::rng::Rng;

/// The store's directory on the simulated disk.
pub const DIR: &str = "/agents/db";

/// A state whose every value tells which deltas were folded, in which order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    pub count: u64,
    pub hash: u64,
    pub last: Vec<u8>,
}

impl State for Tally {
    type Delta = Vec<u8>;
    fn apply(&mut self, delta: &Vec<u8>) {
        self.count += 1;
        for &b in delta {
            self.hash = (self.hash ^ u64::from(b)).wrapping_mul(0x100_0000_01B3);
        }
        self.hash = self.hash.rotate_left(7) ^ delta.len() as u64;
        self.last = delta[..delta.len().min(12)].to_vec();
    }
}

/// Small segments (many rotations), frequent snapshots, retention, no background
/// compaction (its timing is not deterministic; the workload compacts explicitly).
pub fn options() -> Options {
    Options {
        segment_bytes: 4096,
        snapshot_every: 3,
        keep_checkpoints: Some(3),
        auto_compact: false,
        ..Options::default()
    }
}

pub fn open(sim: &SimStorage) -> agentwal::Result<Store<Tally>> {
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    Store::open_on(storage, DIR, options())
}

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Step {
    Commit(String, Vec<u8>),
    Begin(String, String, Vec<u8>),
    Finish(String, String, Vec<u8>),
    Delete(String),
    Compact,
    Load(String),
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
        }
    }
}

impl Step {
    fn task(&self) -> Option<&str> {
        match self {
            Step::Commit(t, _)
            | Step::Begin(t, ..)
            | Step::Finish(t, ..)
            | Step::Delete(t)
            | Step::Load(t) => Some(t),
            Step::Compact => None,
        }
    }
}

/// Each thread's steps. Every task belongs to one thread (so its commits are in plan
/// order); threads share group commits, rotations and compactions.
pub fn plan(seed: u64, threads: usize, steps: usize) -> Vec<Vec<Step>> {
    let mut rng = Rng(seed);
    (0..threads)
        .map(|t| {
            // Per slot: generation, commits planned, open calls.
            let mut slots = [(0u32, 0u32, Vec::<String>::new()), (0, 0, Vec::new())];
            let mut calls = 0;
            let mut out = Vec::new();
            for _ in 0..steps {
                let s = rng.below(2) as usize;
                let task = format!("t{t}s{s}g{}", slots[s].0);
                let slot = &mut slots[s];
                let step = match rng.below(100) {
                    45..60 => {
                        calls += 1;
                        let call = format!("c{calls}");
                        slot.2.push(call.clone());
                        let len = rng.below(700) as usize;
                        Step::Begin(task, call, rng.bytes(len))
                    }
                    60..75 if !slot.2.is_empty() => {
                        let call = slot.2.remove(rng.below(slot.2.len() as u64) as usize);
                        let len = rng.below(300) as usize;
                        Step::Finish(task, call, rng.bytes(len))
                    }
                    75..79 if slot.1 > 0 => {
                        *slot = (slot.0 + 1, 0, Vec::new());
                        Step::Delete(task)
                    }
                    79..85 => Step::Load(task),
                    85..92 if t == 0 => Step::Compact,
                    _ => {
                        slot.1 += 1;
                        let len = match rng.below(5) {
                            0 => 300 + rng.below(1500),
                            _ => 1 + rng.below(200),
                        };
                        Step::Commit(task, rng.bytes(len as usize))
                    }
                };
                out.push(step);
            }
            out
        })
        .collect()
}

/// What one call returned, and between which storage operations it ran: it started
/// after operation `start - 1` and returned before operation `end` began.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Event {
    pub thread: usize,
    pub step: Step,
    /// The seq a commit returned (or, for a load, the seq loaded).
    pub seq: u64,
    /// The state a load returned.
    pub loaded: Option<Tally>,
    pub start: u64,
    pub end: u64,
    /// `Err` holds the error's text; `poisoned` whether it was `Error::Poisoned`.
    pub outcome: Result<(), String>,
    pub poisoned: bool,
}

impl Event {
    /// Acknowledged before a crash at operation `n`.
    pub fn acked(&self, n: u64) -> bool {
        self.outcome.is_ok() && self.end <= n
    }
    /// Started before a crash at operation `n` (so it may have had an effect).
    pub fn started(&self, n: u64) -> bool {
        self.start < n
    }
}

fn step(store: &Store<Tally>, step: &Step) -> agentwal::Result<(u64, Option<Tally>)> {
    let none = |()| (0, None);
    match step {
        Step::Commit(task, delta) => store.commit(task, delta).map(|seq| (seq, None)),
        Step::Begin(task, call, args) => store.begin_call(task, call, "tool", args).map(none),
        Step::Finish(task, call, res) => store.finish_call(task, call, res).map(none),
        Step::Delete(task) => store.delete_task(task).map(none),
        Step::Compact => store.compact().map(|_| (0, None)),
        Step::Load(task) => Ok(store.load_latest(task)?.map_or((0, None), |c| {
            (c.seq, Some(std::sync::Arc::unwrap_or_clone(c.state)))
        })),
    }
}

/// Runs the plan, one thread per entry (inline when there is one), and logs every call.
pub fn run(store: &Store<Tally>, sim: &SimStorage, plan: &[Vec<Step>]) -> Vec<Event> {
    let events = Mutex::new(Vec::new());
    let thread = |t: usize, steps: &[Step]| {
        for s in steps {
            let start = sim.ops();
            let result = step(store, s);
            let end = sim.ops();
            let poisoned = matches!(result, Err(Error::Poisoned { .. }));
            let (seq, loaded) = result.as_ref().cloned().unwrap_or_default();
            events.lock().unwrap().push(Event {
                thread: t,
                step: s.clone(),
                seq,
                loaded,
                start,
                end,
                outcome: result.map(|_| ()).map_err(|e| e.to_string()),
                poisoned,
            });
        }
    };
    if plan.len() == 1 {
        thread(0, &plan[0]);
    } else {
        std::thread::scope(|s| {
            for (t, steps) in plan.iter().enumerate() {
                s.spawn(move || thread(t, steps));
            }
        });
    }
    events.into_inner().unwrap()
}

/// What a recovered store holds: per task, its latest checkpoint, the retained seqs and
/// their states, and its tool calls.
pub type Contents = BTreeMap<String, TaskContents>;

/// A task's retained checkpoints (seq and state, oldest first) and its tool calls.
pub type TaskContents = (Vec<(u64, Tally)>, Vec<CallInfo>);

pub fn contents(store: &Store<Tally>) -> Result<Contents, String> {
    let mut out = Contents::new();
    for task in store.tasks().map_err(|e| format!("tasks: {e}"))? {
        let mut cps = Vec::new();
        let infos = store
            .list_checkpoints(&task)
            .map_err(|e| format!("list {task}: {e}"))?;
        for info in infos {
            let cp = store
                .load(&task, info.seq)
                .map_err(|e| format!("load {task}: {e}"))?;
            let cp = cp.ok_or_else(|| format!("{task}: listed seq {} does not load", info.seq))?;
            cps.push((cp.seq, std::sync::Arc::unwrap_or_clone(cp.state)));
        }
        let latest = store
            .load_latest(&task)
            .map_err(|e| format!("load {task}: {e}"))?;
        if latest.as_ref().map(|c| c.seq) != cps.last().map(|c| c.0) {
            return Err(format!(
                "{task}: load_latest disagrees with list_checkpoints"
            ));
        }
        let calls = store
            .calls(&task)
            .map_err(|e| format!("calls {task}: {e}"))?;
        out.insert(task, (cps, calls));
    }
    Ok(out)
}

fn fold(deltas: &[&Vec<u8>]) -> Tally {
    let mut state = Tally::default();
    deltas.iter().for_each(|d| state.apply(d));
    state
}

/// Judges recovered contents against the events, for a crash before operation `n`:
/// every acknowledged commit, call record and deletion is there, nothing that had not
/// started is, and each task's states are folds of a prefix of its attempted commits.
/// A finished call may be missing whole if a compaction may have pruned it (see
/// `may_be_pruned`).
pub fn check(got: &Contents, events: &[Event], n: u64) -> Result<(), String> {
    let compactions: Vec<&Event> = (events.iter())
        .filter(|e| matches!(e.step, Step::Compact) && e.started(n))
        .collect();
    let mut by_task: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for e in events.iter().filter(|e| e.started(n)) {
        if let Some(task) = e.step.task() {
            by_task.entry(task).or_default().push(e);
        }
    }
    let unknown: Vec<_> = got
        .keys()
        .filter(|t| !by_task.contains_key(t.as_str()))
        .collect();
    if !unknown.is_empty() {
        return Err(format!("tasks nobody created: {unknown:?}"));
    }
    for (task, evs) in &by_task {
        check_task(evs, got.get(*task), n, &compactions)
            .map_err(|why| format!("task {task}: {why}"))?;
    }
    Ok(())
}

fn check_task(
    evs: &[&Event],
    got: Option<&TaskContents>,
    n: u64,
    compactions: &[&Event],
) -> Result<(), String> {
    let delete = evs.iter().find(|e| matches!(e.step, Step::Delete(_)));
    let commits: Vec<_> = evs
        .iter()
        .filter(|e| matches!(e.step, Step::Commit(..)))
        .collect();
    let acked: Vec<_> = commits.iter().filter(|e| e.acked(n)).collect();
    let acked_any = evs
        .iter()
        .any(|e| e.acked(n) && !matches!(e.step, Step::Load(_)));
    let Some((cps, calls)) = got else {
        return match delete.is_some() || !acked_any {
            true => Ok(()),
            false => Err("missing, with acknowledged records and no deletion".into()),
        };
    };
    if delete.is_some_and(|d| d.acked(n)) {
        return Err("present after an acknowledged deletion".into());
    }
    for (i, e) in acked.iter().enumerate() {
        if e.seq != i as u64 + 1 {
            return Err(format!("acknowledged seqs are not 1..: {} at {i}", e.seq));
        }
    }
    // Deltas in seq order: acknowledged commits, then the attempts after the last one.
    let last_acked = commits
        .iter()
        .rposition(|e| e.acked(n))
        .map_or(0, |i| i + 1);
    let acked_then_rest = commits[..last_acked].iter().filter(|e| e.acked(n));
    let deltas: Vec<_> = acked_then_rest
        .chain(&commits[last_acked..])
        .map(|e| match &e.step {
            Step::Commit(_, d) => d,
            _ => unreachable!("a commit"),
        })
        .collect();
    let latest = cps.last().map_or(0, |c| c.0);
    if latest < acked.len() as u64 {
        return Err(format!(
            "latest seq {latest} but seq {} was acknowledged",
            acked.len()
        ));
    }
    if latest > deltas.len() as u64 {
        return Err(format!(
            "latest seq {latest} but only {} commits started",
            deltas.len()
        ));
    }
    for (seq, state) in cps {
        if *state != fold(&deltas[..*seq as usize]) {
            return Err(format!("state at seq {seq} is not the fold of its commits"));
        }
    }
    let mut begun = BTreeMap::new();
    let mut finished = BTreeMap::new();
    for e in evs {
        match &e.step {
            Step::Begin(_, call, args) => drop(begun.insert(call.as_str(), (args, e.acked(n)))),
            Step::Finish(_, call, res) => drop(finished.insert(call.as_str(), (res, e.acked(n)))),
            _ => {}
        }
    }
    let seen: BTreeSet<_> = calls.iter().map(|c| c.call_id.as_str()).collect();
    for c in calls {
        let Some((args, _)) = begun.get(c.call_id.as_str()) else {
            return Err(format!("call {} was never begun", c.call_id));
        };
        if &&c.args != args {
            return Err(format!("call {} has other arguments", c.call_id));
        }
        match (&c.result, finished.get(c.call_id.as_str())) {
            (None, Some((_, true))) => return Err(format!("call {} lost its result", c.call_id)),
            (Some(r), Some((res, _))) if r != *res => {
                return Err(format!("call {} has another result", c.call_id));
            }
            (Some(_), None) => return Err(format!("call {} finished by nobody", c.call_id)),
            _ => {}
        }
    }
    for (call, (_, acked)) in &begun {
        if *acked && !seen.contains(call) && !may_be_pruned(evs, call, n, compactions) {
            return Err(format!("acknowledged call {call} is missing"));
        }
    }
    Ok(())
}

/// Whether retention may have pruned `call` of the task whose events are `evs`, and a
/// compaction dropped it, before a crash at operation `n` (DESIGN.md §7.4): it finished,
/// and a compaction ran after the task's oldest retained checkpoint (`max(1, latest -
/// keep + 1)`: the handle never reopens, so no history is headless) was committed after
/// the finish. That takes `keep` commits after the finish, or one if no commit came
/// before it.
fn may_be_pruned(evs: &[&Event], call: &str, n: u64, compactions: &[&Event]) -> bool {
    let Some(keep) = options().keep_checkpoints else {
        return false;
    };
    let is_commit = |e: &&&Event| matches!(e.step, Step::Commit(..));
    let finish = evs
        .iter()
        .position(|e| matches!(&e.step, Step::Finish(_, c, _) if c == call));
    let Some(finish) = finish.filter(|&i| evs[i].started(n)) else {
        return false;
    };
    let committed_before = evs[..finish]
        .iter()
        .filter(is_commit)
        .any(|e| e.outcome.is_ok());
    let needed = if committed_before { keep as usize } else { 1 };
    let Some(horizon) = evs[finish + 1..].iter().filter(is_commit).nth(needed - 1) else {
        return false;
    };
    (compactions.iter()).any(|c| horizon.started(n) && horizon.start < c.end)
}

/// Every load that succeeded returned the fold of the task's commits acknowledged before
/// it (the live handle's view; tasks belong to one thread, so "before" is plan order).
pub fn check_loads(events: &[Event]) -> Result<(), String> {
    let mut acked: BTreeMap<&str, Vec<&Vec<u8>>> = BTreeMap::new();
    for e in events {
        match (&e.step, &e.outcome) {
            (Step::Commit(task, delta), Ok(())) => acked.entry(task).or_default().push(delta),
            (Step::Load(task), Ok(())) => {
                let deltas = acked.get(task.as_str()).cloned().unwrap_or_default();
                let expected = (!deltas.is_empty()).then(|| fold(&deltas));
                if e.seq != deltas.len() as u64 || e.loaded != expected {
                    return Err(format!(
                        "load of {task} returned seq {} after {} acknowledged commits, or \
                         another state",
                        e.seq,
                        deltas.len()
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}
