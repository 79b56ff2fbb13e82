//! Shared by `tests/crash_sweep.rs` and `tests/io_errors/`: an agent workload planned
//! from a seed and run on the simulated storage, the log of what each call returned and
//! between which storage operations, and the oracle that judges a recovered store
//! against that log.
//!
//! The workload covers format v2's segment kinds (docs/format.md §5, §6): with 4 KiB
//! segments, one task slot grows a state of several segments (up to
//! [`BULK_BYTES_MAX`], 10 segments) by big deltas, so its snapshots and big deltas are
//! records larger than a segment, each in a segment of its own; tasks are forked (the
//! fork's first checkpoint is a snapshot of the source's state: of a big state, another
//! oversized record); compaction retires segment files and later rotations recycle them.
//! [`Coverage`] counts all of that in a recording, so a sweep can assert it was covered.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use agentwal::storage::Storage;
use agentwal::storage::sim::{SimOp, SimStorage};
use agentwal::{CallInfo, Error, Options, State, Store};
use serde::{Deserialize, Serialize};

use super::rng::Rng;

/// The store's directory on the simulated disk.
pub const DIR: &str = "/agents/db";

/// Deltas at least this long are kept in the state (`Tally::bulk`), so a task committing
/// them grows a state larger than a segment.
pub const BULK_DELTA_MIN: usize = 1024;
/// `Tally::bulk` keeps at most this many of the latest bulk bytes: 10 segments.
pub const BULK_BYTES_MAX: usize = 10 * 4096;
/// Big deltas (committed to the big slot): from one segment to three.
pub const BIG_DELTA_BYTES: std::ops::Range<u64> = 4096..12288;

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
    fn task(&self) -> Option<&str> {
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
struct Slot {
    generation: u32,
    commits: u32,
    open_calls: Vec<String>,
    /// Bytes the task's state keeps of big deltas (`Tally::bulk`), about.
    bulk: u64,
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
fn fork(slot: &mut Slot, task: String, thread: usize, s: usize) -> Step {
    slot.generation += 1;
    slot.commits = 1;
    slot.open_calls.clear();
    Step::Fork(task, format!("t{thread}s{s}g{}", slot.generation))
}

/// What one call returned, and between which storage operations it ran: it started
/// after operation `start - 1` and returned before operation `end` began.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Event {
    pub thread: usize,
    pub step: Step,
    /// The seq a commit or fork returned (or, for a load, the seq loaded).
    pub seq: u64,
    /// For a fork: the source's seq it forked (0 if it failed before it knew).
    pub forked_seq: u64,
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

fn step(
    store: &Store<Tally>,
    step: &Step,
    forked_seq: &mut u64,
) -> agentwal::Result<(u64, Option<Tally>)> {
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
        Step::Fork(from, to) => {
            let Some(latest) = store.load_latest(from)? else {
                return Err(Error::InvalidArgument(format!(
                    "{from} has nothing to fork"
                )));
            };
            *forked_seq = latest.seq;
            store.fork(from, latest.seq, to).map(|seq| (seq, None))
        }
    }
}

/// Runs the plan, one thread per entry (inline when there is one), and logs every call.
pub fn run(store: &Store<Tally>, sim: &SimStorage, plan: &[Vec<Step>]) -> Vec<Event> {
    let events = Mutex::new(Vec::new());
    let thread = |t: usize, steps: &[Step]| {
        for s in steps {
            let start = sim.ops();
            let mut forked_seq = 0;
            let result = step(store, s, &mut forked_seq);
            let end = sim.ops();
            let poisoned = matches!(result, Err(Error::Poisoned { .. }));
            let (seq, loaded) = result.as_ref().cloned().unwrap_or_default();
            events.lock().unwrap().push(Event {
                thread: t,
                step: s.clone(),
                seq,
                forked_seq,
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

/// One checkpoint's part in a task's history: a commit's delta, or a fork's state.
#[derive(Clone)]
enum Piece<'a> {
    Delta(&'a Vec<u8>),
    Base(Tally),
}

fn fold(pieces: &[Piece<'_>]) -> Tally {
    let mut state = Tally::default();
    for piece in pieces {
        match piece {
            Piece::Delta(d) => state.apply(d),
            Piece::Base(base) => state = base.clone(),
        }
    }
    state
}

/// Per event index, the state a fork of it wrote (or would have written): the fold of its
/// source's acknowledged checkpoints up to the seq it forked. The source belongs to the
/// fork's thread, so every checkpoint of it before the fork had returned when it began.
/// `None` for a fork that failed before it knew the seq (it wrote nothing), and an error
/// for a fork that succeeded at a seq other than the source's latest acknowledged one.
fn fork_bases(events: &[Event]) -> Result<BTreeMap<usize, Option<Tally>>, String> {
    // Per task: its acknowledged checkpoints, and the state after the last one.
    let mut acked: BTreeMap<&str, (Vec<Piece<'_>>, Tally)> = BTreeMap::new();
    let mut bases = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        match (&e.step, &e.outcome) {
            (Step::Commit(task, delta), Ok(())) => {
                let (pieces, state) = acked.entry(task).or_default();
                pieces.push(Piece::Delta(delta));
                state.apply(delta);
            }
            (Step::Delete(task), Ok(())) => drop(acked.remove(task.as_str())),
            (Step::Fork(from, to), outcome) => {
                let (source, latest) = acked.get(from.as_str()).cloned().unwrap_or_default();
                let at = e.forked_seq as usize;
                if outcome.is_ok() && at != source.len() {
                    return Err(format!(
                        "fork of {from} forked seq {at}, but {} checkpoints were acknowledged",
                        source.len()
                    ));
                }
                let base = match at {
                    0 => None,
                    _ if at == source.len() => Some(latest),
                    _ => (at < source.len()).then(|| fold(&source[..at])),
                };
                if let (Some(base), Ok(())) = (&base, outcome) {
                    acked.insert(to, (vec![Piece::Base(base.clone())], base.clone()));
                }
                bases.insert(i, base);
            }
            _ => {}
        }
    }
    Ok(bases)
}

/// Judges recovered contents against the events, for a crash before operation `n`:
/// every acknowledged commit, fork, call record and deletion is there, nothing that had
/// not started is, and each task's states are folds of a prefix of its attempted commits
/// (a fork's first). A finished call may be missing whole if a compaction may have pruned
/// it (see `may_be_pruned`).
pub fn check(got: &Contents, events: &[Event], n: u64) -> Result<(), String> {
    let compactions: Vec<&Event> = (events.iter())
        .filter(|e| matches!(e.step, Step::Compact) && e.started(n))
        .collect();
    let bases = fork_bases(events)?;
    let mut by_task: BTreeMap<&str, Vec<(&Event, Option<Piece<'_>>)>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate().filter(|(_, e)| e.started(n)) {
        let piece = match &e.step {
            Step::Commit(_, delta) => Some(Piece::Delta(delta)),
            // A fork without a base wrote nothing: it is no attempt.
            Step::Fork(..) => match &bases[&i] {
                Some(base) => Some(Piece::Base(base.clone())),
                None => continue,
            },
            _ => None,
        };
        if let Some(task) = e.step.task() {
            by_task.entry(task).or_default().push((e, piece));
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
    evs: &[(&Event, Option<Piece<'_>>)],
    got: Option<&TaskContents>,
    n: u64,
    compactions: &[&Event],
) -> Result<(), String> {
    let delete = evs.iter().find(|e| matches!(e.0.step, Step::Delete(_)));
    // Commits and forks, with what their checkpoint holds.
    let commits: Vec<(&Event, &Piece<'_>)> = evs
        .iter()
        .filter_map(|(e, piece)| Some((*e, piece.as_ref()?)))
        .collect();
    let acked: Vec<_> = commits.iter().filter(|e| e.0.acked(n)).collect();
    let acked_any = evs
        .iter()
        .any(|e| e.0.acked(n) && !matches!(e.0.step, Step::Load(_)));
    let Some((cps, calls)) = got else {
        return match delete.is_some() || !acked_any {
            true => Ok(()),
            false => Err("missing, with acknowledged records and no deletion".into()),
        };
    };
    if delete.is_some_and(|d| d.0.acked(n)) {
        return Err("present after an acknowledged deletion".into());
    }
    for (i, e) in acked.iter().enumerate() {
        if e.0.seq != i as u64 + 1 {
            return Err(format!("acknowledged seqs are not 1..: {} at {i}", e.0.seq));
        }
    }
    // Checkpoints in seq order: acknowledged commits, then the attempts after the last one.
    let last_acked = commits
        .iter()
        .rposition(|e| e.0.acked(n))
        .map_or(0, |i| i + 1);
    let acked_then_rest = commits[..last_acked].iter().filter(|e| e.0.acked(n));
    let deltas: Vec<Piece<'_>> = acked_then_rest
        .chain(&commits[last_acked..])
        .map(|e| e.1.clone())
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
    // The folds of every prefix, each from the one before.
    let mut folded = vec![Tally::default()];
    for piece in &deltas[..latest as usize] {
        let mut state = folded.last().expect("the empty prefix").clone();
        match piece {
            Piece::Delta(d) => state.apply(d),
            Piece::Base(base) => state = base.clone(),
        }
        folded.push(state);
    }
    for (seq, state) in cps {
        if *state != folded[*seq as usize] {
            return Err(format!("state at seq {seq} is not the fold of its commits"));
        }
    }
    let mut begun = BTreeMap::new();
    let mut finished = BTreeMap::new();
    for (e, _) in evs {
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
/// compaction dropped it, before a crash at operation `n` (docs/store.md §4): it finished,
/// and a compaction ran after the task's oldest retained checkpoint (`max(1, latest -
/// keep + 1)`: the handle never reopens, so no history is headless) was committed after
/// the finish. That takes `keep` checkpoints (commits, or the fork that made the task)
/// after the finish, or one if none came before it.
fn may_be_pruned(
    evs: &[(&Event, Option<Piece<'_>>)],
    call: &str,
    n: u64,
    compactions: &[&Event],
) -> bool {
    let Some(keep) = options().keep_checkpoints else {
        return false;
    };
    let evs: Vec<&Event> = evs.iter().map(|(e, _)| *e).collect();
    let is_checkpoint = |e: &&&Event| matches!(e.step, Step::Commit(..) | Step::Fork(..));
    let finish = evs
        .iter()
        .position(|e| matches!(&e.step, Step::Finish(_, c, _) if c == call));
    let Some(finish) = finish.filter(|&i| evs[i].started(n)) else {
        return false;
    };
    let committed_before = evs[..finish]
        .iter()
        .filter(is_checkpoint)
        .any(|e| e.outcome.is_ok());
    let needed = if committed_before { keep as usize } else { 1 };
    let Some(horizon) = evs[finish + 1..]
        .iter()
        .filter(is_checkpoint)
        .nth(needed - 1)
    else {
        return false;
    };
    (compactions.iter()).any(|c| horizon.started(n) && horizon.start < c.end)
}

/// Every load that succeeded returned the fold of the task's commits (and fork)
/// acknowledged before it (the live handle's view; tasks belong to one thread, so
/// "before" is plan order); so did every fork, at the seq it forked.
pub fn check_loads(events: &[Event]) -> Result<(), String> {
    let bases = fork_bases(events)?;
    // Per task: acknowledged checkpoints, and the state after them.
    let mut acked: BTreeMap<&str, (u64, Tally)> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        match (&e.step, &e.outcome) {
            (Step::Commit(task, delta), Ok(())) => {
                let (seq, state) = acked.entry(task).or_default();
                *seq += 1;
                state.apply(delta);
            }
            (Step::Fork(_, task), Ok(())) => {
                let base = bases[&i].clone().expect("an acknowledged fork has a base");
                acked.insert(task, (1, base));
            }
            (Step::Delete(task), Ok(())) => drop(acked.remove(task.as_str())),
            (Step::Load(task), Ok(())) => {
                let (seq, state) = acked.get(task.as_str()).cloned().unwrap_or_default();
                let expected = (seq > 0).then_some(state);
                if e.seq != seq || e.loaded != expected {
                    return Err(format!(
                        "load of {task} returned seq {} after {seq} acknowledged commits, or \
                         another state",
                        e.seq,
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// What a recorded run exercised of format v2's segment kinds, from its storage
/// operations and events: the sweeps print it and assert that none is 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Segment files retired for reuse (renamed to a `.free` name).
    pub retired: u64,
    /// Rotations that made a segment from a retired file (renamed from a `.free` name).
    pub recycled: u64,
    /// Segments sized for a record larger than `segment_bytes` (preallocated past it).
    pub oversized: u64,
    /// Compacted segments installed.
    pub compactions: u64,
    /// Forks that succeeded, and of those, forks of a state larger than a segment.
    pub forks: u64,
    pub big_forks: u64,
    /// Snapshots larger than a segment the store held at the end (set by the caller,
    /// [`big_snapshots`]).
    pub big_snapshots: u64,
    /// Bytes of the largest state acknowledged (its `bulk`).
    pub max_state_bytes: u64,
    /// Checkpoint bodies the store held compressed at the end (set by the caller,
    /// [`compressed_bodies`]): compaction rewrote records with new payloads.
    pub compressed: u64,
}

/// `len` bytes from an alphabet of 16 letters: zstd stores them in about half the space.
/// Draws one number per byte, as `Rng::bytes` does.
pub fn compressible_bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| b'a' + rng.below(16) as u8).collect()
}

/// Checkpoint bodies that `store` holds compressed (compaction compressed them).
pub fn compressed_bodies(store: &Store<Tally>) -> u64 {
    store.verify().expect("verify").bodies_compressed
}

/// Snapshot checkpoints larger than a segment that `store` holds.
pub fn big_snapshots(store: &Store<Tally>) -> u64 {
    let tasks = store.tasks().expect("tasks");
    let infos = tasks
        .iter()
        .flat_map(|t| store.list_checkpoints(t).expect("list_checkpoints"));
    infos
        .filter(|i| i.snapshot && i.bytes > options().segment_bytes)
        .count() as u64
}

impl Coverage {
    pub fn of(ops: &[SimOp], events: &[Event]) -> Coverage {
        let ends = |p: &std::path::Path, suffix: &str| p.to_string_lossy().ends_with(suffix);
        let mut c = Coverage::default();
        for op in ops {
            match op {
                SimOp::Rename(from, _) if ends(from, ".wal.free") => c.recycled += 1,
                SimOp::Rename(_, to) if ends(to, ".wal.free") => c.retired += 1,
                SimOp::Rename(from, _) | SimOp::Exchange(from, _) if ends(from, ".compact.tmp") => {
                    c.compactions += 1
                }
                SimOp::Allocate(_, len) if *len > options().segment_bytes => c.oversized += 1,
                _ => {}
            }
        }
        let bases = fork_bases(events).unwrap_or_default();
        let mut states: BTreeMap<&str, Tally> = BTreeMap::new();
        for (i, e) in events.iter().enumerate() {
            let state = match (&e.step, &e.outcome, bases.get(&i)) {
                (Step::Commit(task, delta), Ok(()), _) => {
                    let state = states.entry(task).or_default();
                    state.apply(delta);
                    state
                }
                (Step::Fork(_, task), Ok(()), Some(Some(base))) => {
                    states.entry(task).insert_entry(base.clone()).into_mut()
                }
                _ => continue,
            };
            c.max_state_bytes = c.max_state_bytes.max(state.bulk.len() as u64);
        }
        for (i, e) in events.iter().enumerate() {
            if matches!(e.step, Step::Fork(..)) && e.outcome.is_ok() {
                c.forks += 1;
                let big = bases.get(&i).and_then(|b| b.as_ref());
                let state_bytes = big.map_or(0, |b| b.bulk.len() as u64);
                c.big_forks += u64::from(state_bytes > options().segment_bytes);
            }
        }
        c
    }

    pub fn add(&mut self, o: &Coverage) {
        self.retired += o.retired;
        self.recycled += o.recycled;
        self.oversized += o.oversized;
        self.compactions += o.compactions;
        self.forks += o.forks;
        self.big_forks += o.big_forks;
        self.big_snapshots += o.big_snapshots;
        self.max_state_bytes = self.max_state_bytes.max(o.max_state_bytes);
        self.compressed += o.compressed;
    }

    /// Fails naming what was not covered (a sweep that stopped covering recycling,
    /// oversized records or forks of big states must not pass silently).
    pub fn assert_all(&self, what: &str) {
        let missing: Vec<&str> = [
            ("retired files", self.retired),
            ("recycled segments", self.recycled),
            ("oversized segments", self.oversized),
            ("compactions", self.compactions),
            ("forks", self.forks),
            ("forks of states larger than a segment", self.big_forks),
            ("snapshots larger than a segment", self.big_snapshots),
            ("bodies compressed by compaction", self.compressed),
        ]
        .into_iter()
        .filter(|(_, n)| *n == 0)
        .map(|(name, _)| name)
        .collect();
        assert!(
            missing.is_empty(),
            "{what}: the workload no longer covers {missing:?} ({self:?})"
        );
    }
}
