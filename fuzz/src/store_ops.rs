//! `store_ops`: a differential target. An arbitrary sequence of store operations runs
//! against a real [`Store`] (tiny segments, so rotation happens; snapshots every 1 to 4
//! commits; sometimes `keep_checkpoints`) and against a plain in-memory model. Every
//! answer must equal the model's: the same value, or an error of the same variant and
//! fields. A delta may carry a big message (up to 8 KiB, more than a 4 KiB segment), so
//! states grow larger than a segment and their snapshots, forks and big deltas get
//! segments of their own (format v2); compaction retires segment files, which rotations
//! recycle.
//!
//! Crashes: with `SyncMode::Always` every acknowledged operation is durable, so a crash may
//! only leave bytes that were never acknowledged. `Crash` drops the store (nothing is
//! flushed by a drop that a kill would not also skip; in a recycled segment the drop
//! appends a close record, which a kill would not) and then damages only what lies past
//! the last record of the newest segment: arbitrary garbage (a torn write of an
//! unacknowledged batch), or a cut of the preallocated zeros (or, in a recycled segment,
//! of an earlier life's bytes). The reopened store must equal the model exactly; garbage
//! must be reported as torn bytes, unless it follows a close record: after one, nothing
//! of this life follows, and bytes there are taken for an earlier life's.
//!
//! After every reopen, compaction and read-only view, a sweep compares every task, seq,
//! checkpoint list and tool call with the model.
//!
//! Journal pruning (docs/store.md §4): with `keep_checkpoints` set, each compaction pass
//! prunes the calls that finished before their task's oldest retained checkpoint. The
//! writer's index then hides them at once, but their two records leave the log only
//! when a pass drops both, which depends on where segments end; the model does not
//! track segments, so it leaves that open (`maybe_dropped`) and learns which it was from
//! the first answer that tells the two apart (a `begin_call` of the id, or a reopen),
//! holding every other answer exact meanwhile.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use agentwal::log::SegmentHeader;
use agentwal::log::record::{self, Salt};
use agentwal::log::{KIND_CLOSE, KIND_SEAL, SEGMENT_HEADER_BYTES, parse_segment_file_name};
use agentwal::{AgentDelta, AgentState, Error, Message, Options, State, Store, SyncMode};
use arbitrary::{Arbitrary, Unstructured};

const OPS_MAX: usize = 48;
const TASKS: [&str; 4] = ["a", "b", "c", "d"];
const CALLS: [&str; 3] = ["k1", "k2", "k3"];
const TOOLS: [&str; 2] = ["search", "write"];
const BLOBS: [&[u8]; 4] = [b"", b"x", b"yy", &[b'z'; 300]];
const VAR_KEYS: [&str; 3] = ["phase", "step", "n"];
const GARBAGE_BYTES_MAX: usize = 64;

#[derive(Debug, Arbitrary)]
struct Input {
    snapshot_every: u8,
    keep: Option<u8>,
    big_segments: bool,
    ops: Vec<Op>,
}

#[derive(Debug, Clone, Arbitrary)]
enum Op {
    Commit {
        task: u8,
        delta: DeltaSpec,
    },
    CommitIf {
        task: u8,
        expected: ExpectedSpec,
        delta: DeltaSpec,
    },
    /// Forks `task` at `seq % (latest + 2)` (so 0 and one past the latest happen too).
    Fork {
        task: u8,
        seq: u8,
        new_task: u8,
    },
    Delete {
        task: u8,
    },
    BeginCall {
        task: u8,
        call: u8,
        tool: u8,
        args: u8,
    },
    FinishCall {
        task: u8,
        call: u8,
        result: u8,
    },
    Reopen,
    Crash(TailDamage),
    /// A forced compaction pass. The run alternates its two shapes (so that inputs decode
    /// as before): the first, third, ... leave the active segment as a background pass
    /// does (`compact_sealed_segments`), the others are `Store::compact`, which seals it
    /// first and so drops every pruned call's records.
    Compact,
    ReadOnlyView,
}

#[derive(Debug, Clone, Copy, Arbitrary)]
enum ExpectedSpec {
    Latest,
    Above,
    Below,
    Exact(u8),
}

#[derive(Debug, Clone, Arbitrary)]
struct DeltaSpec {
    message: Option<(u8, u8)>,
    set: Option<(u8, i16)>,
    unset: Option<u8>,
    /// A big message: `(n % 16 + 1) * 512` bytes.
    big: Option<u8>,
}

#[derive(Debug, Clone, Arbitrary)]
enum TailDamage {
    /// Only the drop.
    Nothing,
    /// Garbage written `gap` bytes past the last record.
    Garbage { gap: u8, bytes: Vec<u8> },
    /// The file cut somewhere in the zeros past the last record.
    CutZeros { keep: u16 },
}

fn pick<T: Copy>(items: &[T], i: u8) -> T {
    items[usize::from(i) % items.len()]
}

impl DeltaSpec {
    fn delta(&self) -> AgentDelta {
        let mut d = AgentDelta::default();
        if let Some((role, len)) = self.message {
            let text = "m".repeat(usize::from(len % 24));
            d = d.message(match role % 4 {
                0 => Message::user(text),
                1 => Message::assistant(text),
                2 => Message::system(text),
                _ => Message::tool("k1", text),
            });
        }
        if let Some((key, value)) = self.set {
            d = d.set(pick(&VAR_KEYS, key), i64::from(value));
        }
        if let Some(key) = self.unset {
            d = d.unset(pick(&VAR_KEYS, key));
        }
        if let Some(n) = self.big {
            let text = char::from(b'a' + n % 26).to_string();
            d = d.message(Message::user(text.repeat((usize::from(n) % 16 + 1) * 512)));
        }
        d
    }
}

// ---------------------------------------------------------------------------------------
// Outcomes, compared by variant and fields

#[derive(Debug, Clone, PartialEq, Eq)]
enum Fail {
    Conflict {
        task: String,
        expected: u64,
        actual: u64,
    },
    UnknownSeq {
        task: String,
        seq: u64,
        latest: u64,
    },
    UnknownTask(String),
    TaskExists(String),
    /// Only the variant: the message is for humans.
    InvalidArgument,
    ReadOnly,
}

type Outcome<T> = Result<T, Fail>;

fn classify<T>(r: agentwal::Result<T>, what: &str) -> Outcome<T> {
    r.map_err(|e| match e {
        Error::Conflict {
            task,
            expected,
            actual,
        } => Fail::Conflict {
            task,
            expected,
            actual,
        },
        Error::UnknownSeq { task, seq, latest } => Fail::UnknownSeq { task, seq, latest },
        Error::UnknownTask { task } => Fail::UnknownTask(task),
        Error::TaskExists { task } => Fail::TaskExists(task),
        Error::InvalidArgument(_) => Fail::InvalidArgument,
        Error::ReadOnly => Fail::ReadOnly,
        other => panic!("{what}: an error the model never expects: {other}"),
    })
}

// ---------------------------------------------------------------------------------------
// The model

#[derive(Debug, Clone, PartialEq)]
struct CallModel {
    id: String,
    tool: String,
    args: Vec<u8>,
    result: Option<Vec<u8>>,
    /// The task's latest seq when the call finished: it finished before checkpoint
    /// `finished_at + 1`, and so before every later one.
    finished_at: Option<u64>,
    /// Pruned by a compaction pass: the writer's index hides it (no result, and its id
    /// is still taken while its records stay in the log).
    pruned: bool,
    /// Pruned, and a pass since may have dropped its records (then the id is free and a
    /// fresh open does not know it); unknown until an answer tells.
    maybe_dropped: bool,
}

#[derive(Debug, Clone, Default)]
struct TaskModel {
    /// `states[i]`: the state as of seq `i + 1`.
    states: Vec<AgentState>,
    origin: Option<(String, u64)>,
    /// In the order they began.
    calls: Vec<CallModel>,
}

/// Every task here exists: it has a checkpoint or a tool call.
#[derive(Debug, Default)]
struct Model {
    tasks: BTreeMap<String, TaskModel>,
    keep: Option<u64>,
    fates: Fates,
}

/// How often an answer told a pruned call's fate, by what it told.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Fates {
    /// Its records were still in the log.
    kept: u32,
    /// They had left it.
    dropped: u32,
}

impl Model {
    fn latest(&self, task: &str) -> u64 {
        self.tasks.get(task).map_or(0, |t| t.states.len() as u64)
    }

    /// Oldest seq retention serves (0 for a task without checkpoints).
    fn retained_from(&self, task: &str) -> u64 {
        retained_from(self.latest(task), self.keep)
    }

    fn commit(&mut self, task: &str, expected: Option<u64>, delta: &AgentDelta) -> Outcome<u64> {
        let latest = self.latest(task);
        if let Some(expected) = expected
            && expected != latest
        {
            return Err(Fail::Conflict {
                task: task.into(),
                expected,
                actual: latest,
            });
        }
        let t = self.tasks.entry(task.into()).or_default();
        let mut state = t.states.last().cloned().unwrap_or_default();
        state.apply(delta);
        t.states.push(state);
        Ok(latest + 1)
    }

    fn load(&self, task: &str, seq: u64) -> Outcome<Option<AgentState>> {
        let Some(t) = self.tasks.get(task) else {
            return Ok(None);
        };
        let latest = t.states.len() as u64;
        if seq == 0 || seq > latest {
            return Err(Fail::UnknownSeq {
                task: task.into(),
                seq,
                latest,
            });
        }
        if seq < self.retained_from(task) {
            return Ok(None);
        }
        Ok(Some(t.states[seq as usize - 1].clone()))
    }

    fn fork(&mut self, task: &str, seq: u64, new_task: &str) -> Outcome<u64> {
        let Some(state) = self.load(task, seq)? else {
            return Err(match self.tasks.contains_key(task) {
                false => Fail::UnknownTask(task.into()),
                true => Fail::InvalidArgument,
            });
        };
        if self.latest(new_task) != 0 {
            return Err(Fail::TaskExists(new_task.into()));
        }
        let t = self.tasks.entry(new_task.into()).or_default();
        t.states.push(state);
        t.origin = Some((task.into(), seq));
        Ok(1)
    }

    fn delete(&mut self, task: &str) -> Outcome<()> {
        match self.tasks.remove(task) {
            Some(_) => Ok(()),
            None => Err(Fail::UnknownTask(task.into())),
        }
    }

    /// `got`: the store's answer, which alone tells whether a pruned call that may have
    /// been dropped was (the id began afresh) or was not (refused: it is finished).
    fn begin_call(
        &mut self,
        task: &str,
        call: &str,
        tool: &str,
        args: &[u8],
        got: &Outcome<()>,
    ) -> Outcome<()> {
        let calls = self.tasks.get_mut(task).map(|t| &mut t.calls);
        if let Some(calls) = calls
            && let Some(i) = calls.iter().position(|c| c.id == call)
        {
            let c = &mut calls[i];
            if c.maybe_dropped && got.is_ok() {
                self.fates.dropped += 1;
                calls.remove(i);
            } else {
                self.fates.kept += u32::from(c.maybe_dropped);
                c.maybe_dropped = false;
                return match c.result.is_none() && c.tool == tool && c.args == args {
                    true => Ok(()),
                    false => Err(Fail::InvalidArgument),
                };
            }
        }
        self.tasks
            .entry(task.into())
            .or_default()
            .calls
            .push(CallModel {
                id: call.into(),
                tool: tool.into(),
                args: args.to_vec(),
                result: None,
                finished_at: None,
                pruned: false,
                maybe_dropped: false,
            });
        Ok(())
    }

    fn finish_call(&mut self, task: &str, call: &str, result: &[u8]) -> Outcome<()> {
        let latest = self.latest(task);
        let Some(t) = self.tasks.get_mut(task) else {
            return Err(Fail::UnknownTask(task.into()));
        };
        let Some(c) = t.calls.iter_mut().find(|c| c.id == call) else {
            return Err(Fail::InvalidArgument);
        };
        // Pruned: refused whether its records stay (it is hidden) or were dropped (the id
        // names no call); both answers agree, so this tells nothing.
        if c.pruned {
            return Err(Fail::InvalidArgument);
        }
        match &c.result {
            Some(r) if r == result => Ok(()),
            Some(_) => Err(Fail::InvalidArgument),
            None => {
                c.result = Some(result.to_vec());
                c.finished_at = Some(latest);
                Ok(())
            }
        }
    }

    /// A compaction pass with retention prunes every call that finished before its
    /// task's oldest retained checkpoint (a task without checkpoints prunes none); any
    /// pruned call's records may leave the log in this pass.
    fn compacted(&mut self) {
        if self.keep.is_none() {
            return;
        }
        for t in self.tasks.values_mut() {
            let horizon = retained_from(t.states.len() as u64, self.keep);
            for c in t.calls.iter_mut() {
                if c.finished_at.is_some_and(|at| at < horizon) || c.pruned {
                    c.pruned = true;
                    c.maybe_dropped = true;
                }
            }
        }
    }

    /// A store opened afresh on the log indexes every call whose records it still holds,
    /// none pruned. `result_of` asks it for a call's result, which tells a pruned call's
    /// fate where it was open: its result (kept) or none (dropped).
    fn reopened(&mut self, result_of: &dyn Fn(&str, &str) -> Option<Vec<u8>>) {
        let fates = &mut self.fates;
        for (task, t) in self.tasks.iter_mut() {
            t.calls.retain_mut(|c| {
                let kept = !c.maybe_dropped || result_of(task, &c.id) == c.result;
                if c.maybe_dropped {
                    *match kept {
                        true => &mut fates.kept,
                        false => &mut fates.dropped,
                    } += 1;
                }
                c.pruned = false;
                c.maybe_dropped = false;
                kept
            });
        }
    }
}

/// Oldest seq retention serves of a task whose latest seq is `latest` (0: no checkpoints).
fn retained_from(latest: u64, keep: Option<u64>) -> u64 {
    match (latest, keep) {
        (0, _) => 0,
        (_, None) => 1,
        (_, Some(k)) => latest.saturating_sub(k - 1).max(1),
    }
}

// ---------------------------------------------------------------------------------------
// The run

struct Run {
    dir: PathBuf,
    options: Options,
    store: Option<Store>,
    model: Model,
    /// Compaction passes run so far; picks the shape of the next (`Op::Compact`).
    compactions: u32,
}

/// Decodes the input and runs it; panics where the store and the model disagree.
pub fn check(data: &[u8]) {
    let u = Unstructured::new(data);
    if let Ok(input) = Input::arbitrary_take_rest(u) {
        run(&input);
    }
}

/// Runs `input`; returns what answers told of pruned calls' fates.
fn run(input: &Input) -> Fates {
    let scratch = super::scratch_dir();
    let keep = input.keep.map(|k| 1 + u64::from(k % 3));
    let options = Options {
        sync: SyncMode::Always,
        segment_bytes: if input.big_segments { 16384 } else { 4096 },
        snapshot_every: 1 + u32::from(input.snapshot_every % 4),
        keep_checkpoints: keep.map(|k| k as u32),
        auto_compact: false,
        ..Options::default()
    };
    let mut run = Run {
        dir: scratch.path().join("store"),
        options,
        store: None,
        model: Model {
            keep,
            ..Model::default()
        },
        compactions: 0,
    };
    run.reopen("the first open");
    for (i, op) in input.ops.iter().take(OPS_MAX).enumerate() {
        run.apply(op, &format!("op #{i} {op:?}"));
    }
    run.sweep(run.store(), true, "the final sweep");
    run.model.fates
}

impl Run {
    fn store(&self) -> &Store {
        self.store.as_ref().expect("the store is open")
    }

    fn reopen(&mut self, what: &str) -> agentwal::RecoveryReport {
        self.store = None;
        let store = Store::open_with(&self.dir, self.options)
            .unwrap_or_else(|e| panic!("{what}: open failed: {e}"));
        let report = store.recovery_report();
        self.model.reopened(&|task, call| {
            store
                .call_result(task, call)
                .unwrap_or_else(|e| panic!("{what}: call_result {call}: {e}"))
        });
        self.store = Some(store);
        report
    }

    fn apply(&mut self, op: &Op, what: &str) {
        match op {
            Op::Commit { task, delta } => {
                let (task, delta) = (pick(&TASKS, *task), delta.delta());
                let got = classify(self.store().commit(task, &delta), what);
                assert_eq!(got, self.model.commit(task, None, &delta), "{what}");
            }
            Op::CommitIf {
                task,
                expected,
                delta,
            } => {
                let (task, delta) = (pick(&TASKS, *task), delta.delta());
                let latest = self.model.latest(task);
                let expected = match expected {
                    ExpectedSpec::Latest => latest,
                    ExpectedSpec::Above => latest + 1,
                    ExpectedSpec::Below => latest.saturating_sub(1),
                    ExpectedSpec::Exact(n) => u64::from(*n),
                };
                let got = classify(self.store().commit_if(task, expected, &delta), what);
                let want = self.model.commit(task, Some(expected), &delta);
                assert_eq!(got, want, "{what}");
            }
            Op::Fork {
                task,
                seq,
                new_task,
            } => {
                let (task, new_task) = (pick(&TASKS, *task), pick(&TASKS, *new_task));
                let seq = u64::from(*seq) % (self.model.latest(task) + 2);
                let got = classify(self.store().fork(task, seq, new_task), what);
                assert_eq!(got, self.model.fork(task, seq, new_task), "{what}");
            }
            Op::Delete { task } => {
                let task = pick(&TASKS, *task);
                let got = classify(self.store().delete_task(task), what);
                assert_eq!(got, self.model.delete(task), "{what}");
            }
            Op::BeginCall {
                task,
                call,
                tool,
                args,
            } => {
                let (task, call) = (pick(&TASKS, *task), pick(&CALLS, *call));
                let (tool, args) = (pick(&TOOLS, *tool), pick(&BLOBS, *args));
                let got = classify(self.store().begin_call(task, call, tool, args), what);
                let want = self.model.begin_call(task, call, tool, args, &got);
                assert_eq!(got, want, "{what}");
            }
            Op::FinishCall { task, call, result } => {
                let (task, call) = (pick(&TASKS, *task), pick(&CALLS, *call));
                let result = pick(&BLOBS, *result);
                let got = classify(self.store().finish_call(task, call, result), what);
                assert_eq!(got, self.model.finish_call(task, call, result), "{what}");
            }
            Op::Reopen => {
                self.reopen(what);
                self.sweep(self.store(), true, what);
            }
            Op::Crash(damage) => {
                self.store = None;
                let garbage = damage_tail(&self.dir, damage);
                let report = self.reopen(what);
                if garbage {
                    assert!(
                        report.torn_bytes > 0,
                        "{what}: garbage past the data was not reported as torn"
                    );
                }
                self.sweep(self.store(), true, what);
            }
            Op::Compact => {
                let store = self.store();
                let done = match self.compactions % 2 {
                    0 => store.compact_sealed_segments(),
                    _ => store.compact(),
                };
                self.compactions += 1;
                done.unwrap_or_else(|e| panic!("{what}: compaction failed: {e}"));
                self.model.compacted();
                self.sweep(self.store(), true, what);
            }
            Op::ReadOnlyView => {
                let view: Store = Store::open_read_only(&self.dir)
                    .unwrap_or_else(|e| panic!("{what}: read-only open failed: {e}"));
                // Read-only handles use the default options: no retention.
                self.sweep(&view, false, what);
                let refused = classify(view.commit("a", &AgentDelta::default()), what);
                assert_eq!(refused, Err(Fail::ReadOnly), "{what}");
            }
        }
    }

    /// Compares everything the store answers with the model. `retention`: the writer's
    /// handle, which applies the model's retention and hides the calls it pruned;
    /// otherwise a fresh read-only view, which may also serve older seqs it still has and
    /// pruned calls whose records stay.
    fn sweep(&self, store: &Store, retention: bool, what: &str) {
        let what = format!("{what}, sweep");
        let ids: Vec<String> = self.model.tasks.keys().cloned().collect();
        assert_eq!(store.tasks().expect("tasks"), ids, "{what}: task ids");
        for task in TASKS {
            let what = format!("{what}, task {task}");
            let model = self.model.tasks.get(task);
            let latest = self.model.latest(task);
            let got = store
                .load_latest(task)
                .unwrap_or_else(|e| panic!("{what}: load_latest: {e}"))
                .map(|c| (c.seq, std::sync::Arc::unwrap_or_clone(c.state)));
            let want = model
                .and_then(|t| t.states.last().cloned())
                .map(|s| (latest, s));
            assert_eq!(got, want, "{what}: load_latest");
            for seq in 0..=latest + 1 {
                let got = classify(store.load(task, seq), &what)
                    .map(|c| c.map(|c| std::sync::Arc::unwrap_or_clone(c.state)));
                let want = self.model.load(task, seq);
                let older = seq < self.model.retained_from(task);
                let fine = match (&got, &want) {
                    (Ok(Some(g)), Ok(None)) if !retention && older => {
                        Some(g) == model.map(|t| &t.states[seq as usize - 1])
                    }
                    (g, w) => g == w,
                };
                assert!(fine, "{what}: load seq {seq}: got {got:?}, want {want:?}");
            }
            if retention {
                let got: Vec<(u64, Option<(String, u64)>)> = store
                    .list_checkpoints(task)
                    .unwrap_or_else(|e| panic!("{what}: list_checkpoints: {e}"))
                    .into_iter()
                    .map(|c| (c.seq, c.forked_from))
                    .collect();
                let from = self.model.retained_from(task).max(1);
                let want: Vec<(u64, Option<(String, u64)>)> = (from..=latest)
                    .map(|seq| {
                        let origin = model.and_then(|t| t.origin.clone());
                        (seq, origin.filter(|_| seq == 1))
                    })
                    .collect();
                assert_eq!(got, want, "{what}: list_checkpoints");
            }
            let calls = model.map(|t| t.calls.clone()).unwrap_or_default();
            let pending: Vec<(String, String, Vec<u8>)> = store
                .pending_calls(task)
                .unwrap_or_else(|e| panic!("{what}: pending_calls: {e}"))
                .into_iter()
                .map(|p| (p.call_id, p.tool, p.args))
                .collect();
            let want: Vec<(String, String, Vec<u8>)> = calls
                .iter()
                .filter(|c| c.result.is_none())
                .map(|c| (c.id.clone(), c.tool.clone(), c.args.clone()))
                .collect();
            assert_eq!(pending, want, "{what}: pending_calls");
            for call in CALLS {
                let got = store
                    .call_result(task, call)
                    .unwrap_or_else(|e| panic!("{what}: call_result {call}: {e}"));
                let model = calls.iter().find(|c| c.id == call);
                // The writer hides what it pruned; a fresh view shows what the log holds.
                let fine = match model {
                    None => got.is_none(),
                    Some(c) if retention && c.pruned => got.is_none(),
                    Some(c) if c.maybe_dropped => got.is_none() || got == c.result,
                    Some(c) => got == c.result,
                };
                assert!(
                    fine,
                    "{what}: call_result {call}: got {got:?}, model {model:?}"
                );
            }
        }
    }
}

/// Damages what lies past the last record of the newest segment. Returns whether
/// garbage (non-zero bytes) was left there.
fn damage_tail(dir: &Path, damage: &TailDamage) -> bool {
    let Some(path) = newest_segment(dir) else {
        return false;
    };
    let bytes = std::fs::read(&path).expect("reading the newest segment");
    let Some((end, closed)) = data_end(&bytes) else {
        return false; // sealed: nothing in it is unacknowledged
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("opening the newest segment");
    match damage {
        TailDamage::Nothing => false,
        TailDamage::CutZeros { keep } => {
            let zeros = bytes.len() - end;
            let len = end + usize::from(*keep) % (zeros + 1);
            file.set_len(len as u64).expect("cutting the segment");
            false
        }
        TailDamage::Garbage {
            gap,
            bytes: garbage,
        } => {
            let garbage = &garbage[..garbage.len().min(GARBAGE_BYTES_MAX)];
            let at = end + usize::from(*gap % 32);
            let mut damaged = bytes.clone();
            damaged.resize(damaged.len().max(at + garbage.len()), 0);
            damaged[at..at + garbage.len()].copy_from_slice(garbage);
            // Bytes that hold a valid record are not garbage but a forged write; a crash
            // cannot make them, so leave the file alone.
            let salt = salt_of(&bytes);
            if (end..at + garbage.len()).any(|q| record::decode(&damaged[q..], salt).is_ok()) {
                return false;
            }
            file.write_all_at(garbage, at as u64)
                .expect("writing garbage");
            // After a close record, no torn write of this life can lie: recovery takes
            // the bytes for an earlier life's.
            !closed && garbage.iter().any(|&b| b != 0)
        }
    }
}

fn newest_segment(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .expect("listing the store")
        .filter_map(|e| {
            let e = e.ok()?;
            let id = parse_segment_file_name(e.file_name().to_str()?)?;
            Some((id, e.path()))
        })
        .max()
        .map(|(_, p)| p)
}

/// The salt of the segment whose bytes are `bytes` (as its header says).
fn salt_of(bytes: &[u8]) -> Salt {
    SegmentHeader::decode(bytes, Path::new("segment")).map_or(Salt::Unsalted, |h| h.salt)
}

/// Offset just past the last record of a segment, and whether that record is a close
/// record; `None` if it ends with a seal.
fn data_end(bytes: &[u8]) -> Option<(usize, bool)> {
    let header = SegmentHeader::decode(bytes, Path::new("segment")).ok();
    let salt = header.map_or(Salt::Unsalted, |h| h.salt);
    let mut pos = header.map_or(SEGMENT_HEADER_BYTES, |h| h.data_start() as usize);
    let mut closed = false;
    while let Ok((h, _)) = record::decode(bytes.get(pos..)?, salt) {
        if h.kind == KIND_SEAL {
            return None;
        }
        closed = h.kind == KIND_CLOSE;
        pos += h.record_bytes() as usize;
    }
    Some((pos, closed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit() -> Op {
        let delta = DeltaSpec {
            message: Some((0, 5)),
            set: None,
            unset: None,
            big: None,
        };
        Op::Commit { task: 0, delta }
    }

    /// A call begun and finished; `blob` picks its args and result from `BLOBS`.
    fn call(task: u8, call: u8, blob: u8) -> [Op; 2] {
        [
            Op::BeginCall {
                task,
                call,
                tool: 0,
                args: blob,
            },
            Op::FinishCall {
                task,
                call,
                result: blob,
            },
        ]
    }

    /// Task a's calls k1 and k3 finish first; calls of tasks b and c with 300-byte args
    /// and results (records are not compressed) fill the segment, so it is sealed; k2
    /// finishes in the active one. With `keep_checkpoints = 1`, the first compaction (it
    /// leaves the active segment) prunes a's three calls and drops the records of k1 and
    /// k3; `then` runs next, and a new `begin_call` of k1 and a reopen (k3, k2) tell.
    fn pruned_calls(then: &[Op]) -> Fates {
        let mut ops: Vec<Op> = [call(0, 0, 3), call(0, 2, 3)].concat();
        for (task, id) in [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)] {
            ops.extend(call(task, id, 3));
        }
        ops.extend([commit(), commit()]);
        ops.extend(call(0, 1, 1));
        ops.extend([commit(), commit(), Op::Compact]);
        ops.extend_from_slice(then);
        ops.push(Op::BeginCall {
            task: 0,
            call: 0,
            tool: 1,
            args: 0,
        });
        ops.push(Op::Reopen);
        assert!(ops.len() <= OPS_MAX);
        let input = Input {
            snapshot_every: 0,
            keep: Some(0),
            big_segments: false,
            ops,
        };
        run(&input)
    }

    /// The model's open question has both answers within reach: k2's records stay in
    /// the active segment the pass left.
    #[test]
    fn the_model_learns_both_fates_of_a_pruned_call() {
        let fates = pruned_calls(&[]);
        assert_eq!(
            fates,
            Fates {
                kept: 1,
                dropped: 2
            }
        );
    }

    /// `Store::compact` seals the active segment first, so k2's records leave too.
    #[test]
    fn store_compact_drops_the_pruned_calls_of_the_active_segment() {
        let fates = pruned_calls(&[Op::Compact]);
        assert_eq!(
            fates,
            Fates {
                kept: 0,
                dropped: 3
            }
        );
    }
}
