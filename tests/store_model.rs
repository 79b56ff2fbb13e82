//! Model-based property test of the typed `Store`.
//!
//! Random sequences of operations run against a real store and against a plain in-memory
//! model: per task, the state after each seq, the fork origin and the tool calls in the
//! order they began. After every operation the store's answer must equal the model's: the
//! same `Ok` value, or an error of the same variant with the same fields. The store uses
//! 4 KiB segments and a snapshot every 1 to 5 commits, and large tool-call arguments fill
//! segments, so loads fold snapshots and deltas and many cases rotate segments.
//!
//! `Reopen` drops the store and opens it again, either cleanly or after cutting the
//! newest segment file inside its last record (truncating the file or zeroing the tail).
//! A single-threaded writer puts each record in a batch of its own and the last record is
//! always in the newest segment, so that cut must lose exactly the last record: the model
//! rolls back to its state before that record, and the recovery report must count the
//! surviving records and the torn bytes exactly. `Compact` forces a compaction pass, which
//! must change no answer and leaves every earlier record durable (no later cut may lose
//! one); the model tracks which task incarnation each record belongs to, so record counts
//! stay exact across compactions too (background compaction is off, as its timing would
//! make them unknowable). Every reopen, compaction and read-only view is
//! followed by a sweep comparing every task, seq and call with the model.
//!
//! The default case counts keep the file under ~30 s in a debug build; `PROPTEST_CASES`
//! overrides them. Failures are not persisted to files: a failing sequence found here
//! becomes a plain `#[test]` at the bottom of this file.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use agentwal::log::format::{
    KIND_SEAL, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, parse_segment_file_name,
};
use agentwal::log::record::{self, DecodeError};
use agentwal::{AgentDelta, AgentState, Error, Message, Options, Role, Store, SyncMode, Value};
use proptest::prelude::*;
use proptest::sample::select;
use tempfile::TempDir;

/// Task ids: the first four take most operations, so operations collide; "f" and "g" are
/// mostly fork targets and deleted often, so that many forks find their target free.
static TASKS: [&str; 6] = ["a", "b", "c", "d", "f", "g"];
static CALLS: [&str; 3] = ["k1", "k2", "k3"];
static TOOLS: [&str; 2] = ["search", "write"];
/// Arguments and results: few, so repeats with equal and with different bytes both happen;
/// half are large so that tool calls fill segments (and seal them, for compaction)
/// without growing states.
static BLOBS: [Blob; 4] = [
    Blob(b""),
    Blob(b"x"),
    Blob(&[b'y'; 1200]),
    Blob(&[b'z'; 1200]),
];

/// Tool-call arguments or a result; `Debug` stays short for the large ones.
#[derive(Clone, Copy, PartialEq)]
struct Blob(&'static [u8]);

impl std::fmt::Debug for Blob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            [b, rest @ ..] if rest.len() > 8 => write!(f, "[b'{}'; {}]", *b as char, self.0.len()),
            bytes => write!(f, "b{:?}", String::from_utf8_lossy(bytes)),
        }
    }
}
static VAR_KEYS: [&str; 4] = ["phase", "step", "n", "scratch"];
static META_KEYS: [&str; 2] = ["model", "retries"];

// ---------------------------------------------------------------------------------------
// Operations

/// What `commit_if` is told the latest seq is.
#[derive(Debug, Clone, Copy)]
enum Expected {
    /// The true latest seq.
    Latest,
    /// One more than the latest.
    Above,
    /// One less than the latest (1 if the task has none).
    Below,
    /// 0: "the task must not exist".
    Zero,
}

/// A seq for `load` or `fork`.
#[derive(Debug, Clone, Copy)]
enum Seq {
    /// This seq.
    Exact(u64),
    /// One of the task's seqs when the operation runs, `1 + n % latest` (`n` if the task
    /// has none), so that most picks exist however long the task's history is.
    Existing(u8),
}

impl Seq {
    fn resolve(self, latest: u64) -> u64 {
        match self {
            Seq::Exact(seq) => seq,
            Seq::Existing(n) if latest == 0 => u64::from(n),
            Seq::Existing(n) => 1 + u64::from(n) % latest,
        }
    }
}

/// Where `Reopen` cuts the last record: `at` picks the offset inside it.
#[derive(Debug, Clone, Copy)]
struct Cut {
    at: u16,
    /// Zero the bytes from the cut on (a preallocated file) instead of truncating the file.
    zero_fill: bool,
}

#[derive(Debug, Clone)]
enum Op {
    Commit {
        task: &'static str,
        delta: AgentDelta,
    },
    CommitIf {
        task: &'static str,
        expected: Expected,
        delta: AgentDelta,
    },
    Load {
        task: &'static str,
        seq: Seq,
    },
    LoadLatest {
        task: &'static str,
    },
    /// `load_latest_matching` accepting states with `(messages + vars) % 3 == rem`.
    LoadLatestMatching {
        task: &'static str,
        rem: usize,
    },
    Fork {
        task: &'static str,
        seq: Seq,
        new_task: &'static str,
    },
    Delete {
        task: &'static str,
    },
    BeginCall {
        task: &'static str,
        call: &'static str,
        tool: &'static str,
        args: Blob,
    },
    FinishCall {
        task: &'static str,
        call: &'static str,
        result: Blob,
    },
    CallResult {
        task: &'static str,
        call: &'static str,
    },
    PendingCalls {
        task: &'static str,
    },
    ListCheckpoints {
        task: &'static str,
    },
    Tasks,
    Stats,
    Reopen {
        cut: Option<Cut>,
    },
    /// A forced compaction pass: no answer may change.
    Compact,
    /// Opens a read-only handle next to the writer, sweeps it, and checks it refuses writes.
    ReadOnlyView,
}

// ---------------------------------------------------------------------------------------
// Errors, compared by variant and fields

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
    /// The message is for humans; only the variant is compared.
    InvalidArgument,
    ReadOnly,
}

type Outcome<T> = Result<T, Fail>;

fn classify(e: Error) -> Fail {
    match e {
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
        other => panic!("error the model never expects: {other}"),
    }
}

// ---------------------------------------------------------------------------------------
// The model

#[derive(Debug, Clone, PartialEq)]
struct CallModel {
    id: String,
    tool: String,
    args: Vec<u8>,
    result: Option<Vec<u8>>,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct TaskModel {
    /// Tells this life of the task id from earlier ones (deleted) and later ones.
    incarnation: u64,
    /// `states[i]` is the state as of seq `i + 1`.
    states: Vec<AgentState>,
    origin: Option<(String, u64)>,
    /// In the order they began.
    calls: Vec<CallModel>,
}

/// Every task in `tasks` exists (has a checkpoint or a call); failed operations never
/// add one.
#[derive(Debug, Clone, Default)]
struct Model {
    tasks: BTreeMap<String, TaskModel>,
    /// The records in the log, oldest first: the incarnation of the task a checkpoint or
    /// call record belongs to, `None` for a deletion record. Each successful write appends
    /// one; compaction drops those of dead tasks (and deletions) from sealed segments.
    log: Vec<Option<u64>>,
    incarnations: u64,
}

impl Model {
    fn records(&self) -> u64 {
        self.log.len() as u64
    }

    /// The task's model, created (as a new incarnation) if missing.
    fn task_mut(&mut self, task: &str) -> &mut TaskModel {
        let next = self.incarnations + 1;
        let t = self.tasks.entry(task.into()).or_insert_with(|| TaskModel {
            incarnation: next,
            ..TaskModel::default()
        });
        if t.incarnation == next {
            self.incarnations = next;
        }
        t
    }

    /// Appends the record of a write to `task` (`None`: a deletion).
    fn wrote(&mut self, task: Option<&str>) {
        let incarnation = task.map(|t| self.tasks[t].incarnation);
        self.log.push(incarnation);
    }

    /// What a forced compaction leaves: of the records before the active segment's
    /// `in_active`, only those of tasks that still exist; the active segment's all.
    fn compact(&mut self, in_active: usize) {
        let live: Vec<u64> = self.tasks.values().map(|t| t.incarnation).collect();
        let sealed = self.log.len() - in_active;
        let mut log: Vec<Option<u64>> = self.log[..sealed]
            .iter()
            .copied()
            .filter(|r| r.is_some_and(|i| live.contains(&i)))
            .collect();
        log.extend_from_slice(&self.log[sealed..]);
        self.log = log;
    }

    fn latest(&self, task: &str) -> u64 {
        self.tasks.get(task).map_or(0, |t| t.states.len() as u64)
    }

    fn task_ids(&self) -> Vec<String> {
        self.tasks.keys().cloned().collect()
    }

    fn commit(&mut self, task: &str, expected: Option<u64>, delta: &AgentDelta) -> Outcome<u64> {
        // The generators keep states far below what fits in one 4 KiB segment, so every
        // due snapshot is written and every fork's snapshot fits (`check_checkpoints`
        // relies on it). Fail loudly if they ever stop doing so.
        const STATE_BYTES_MAX: usize = 3000;
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
        let t = self.task_mut(task);
        let mut state = t.states.last().cloned().unwrap_or_default();
        agentwal::State::apply(&mut state, delta);
        let bytes = postcard::to_allocvec(&state).expect("encode").len();
        assert!(
            bytes < STATE_BYTES_MAX,
            "generated state of {bytes} bytes is too big"
        );
        t.states.push(state);
        self.wrote(Some(task));
        Ok(latest + 1)
    }

    /// `load`: `None` for a task that does not exist; seq 0 or past the latest is an error.
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
        Ok(Some(t.states[seq as usize - 1].clone()))
    }

    fn fork(&mut self, task: &str, seq: u64, new_task: &str) -> Outcome<u64> {
        let Some(state) = self.load(task, seq)? else {
            return Err(Fail::UnknownTask(task.into()));
        };
        if self.latest(new_task) != 0 {
            return Err(Fail::TaskExists(new_task.into()));
        }
        // A target with only tool calls keeps them.
        let t = self.task_mut(new_task);
        t.states.push(state);
        t.origin = Some((task.into(), seq));
        self.wrote(Some(new_task));
        Ok(1)
    }

    fn delete(&mut self, task: &str) -> Outcome<()> {
        if self.tasks.remove(task).is_none() {
            return Err(Fail::UnknownTask(task.into()));
        }
        self.wrote(None);
        Ok(())
    }

    fn begin_call(&mut self, task: &str, call: &str, tool: &str, args: &[u8]) -> Outcome<()> {
        if let Some(c) = self
            .tasks
            .get(task)
            .and_then(|t| t.calls.iter().find(|c| c.id == call))
        {
            return if c.result.is_none() && c.tool == tool && c.args == args {
                Ok(())
            } else {
                Err(Fail::InvalidArgument)
            };
        }
        self.task_mut(task).calls.push(CallModel {
            id: call.into(),
            tool: tool.into(),
            args: args.to_vec(),
            result: None,
        });
        self.wrote(Some(task));
        Ok(())
    }

    fn finish_call(&mut self, task: &str, call: &str, result: &[u8]) -> Outcome<()> {
        let Some(t) = self.tasks.get_mut(task) else {
            return Err(Fail::UnknownTask(task.into()));
        };
        let Some(c) = t.calls.iter_mut().find(|c| c.id == call) else {
            return Err(Fail::InvalidArgument);
        };
        match &c.result {
            Some(r) if r == result => Ok(()),
            Some(_) => Err(Fail::InvalidArgument),
            None => {
                c.result = Some(result.to_vec());
                self.wrote(Some(task));
                Ok(())
            }
        }
    }

    fn call_result(&self, task: &str, call: &str) -> Option<Vec<u8>> {
        self.tasks
            .get(task)
            .and_then(|t| t.calls.iter().find(|c| c.id == call))
            .and_then(|c| c.result.clone())
    }

    fn pending(&self, task: &str) -> Vec<(String, String, Vec<u8>)> {
        self.tasks.get(task).map_or_else(Vec::new, |t| {
            t.calls
                .iter()
                .filter(|c| c.result.is_none())
                .map(|c| (c.id.clone(), c.tool.clone(), c.args.clone()))
                .collect()
        })
    }

    fn checkpoints(&self) -> u64 {
        self.tasks.values().map(|t| t.states.len() as u64).sum()
    }
}

fn matches_rem(state: &AgentState, rem: usize) -> bool {
    (state.messages.len() + state.vars.len()) % 3 == rem
}

// ---------------------------------------------------------------------------------------
// The harness

struct Harness {
    dir: TempDir,
    options: Options,
    store: Option<Store>,
    model: Model,
    /// The model before the newest record in the log, while that is known.
    undo: Option<Model>,
    /// Counters the store's `stats()` must report for the current handle.
    commits: u64,
    appends: u64,
}

impl Harness {
    fn new(options: Options) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open_with(dir.path(), options).expect("open a fresh store");
        Harness {
            dir,
            options,
            store: Some(store),
            model: Model::default(),
            undo: None,
            commits: 0,
            appends: 0,
        }
    }

    fn store(&self) -> &Store {
        self.store.as_ref().expect("store is open")
    }

    fn run(&mut self, ops: &[Op]) {
        for (i, op) in ops.iter().enumerate() {
            let ctx = format!("op #{i}: {op:?}");
            self.step(op, &ctx);
        }
        check_all(self.store(), &self.model, "after the last op");
    }

    fn step(&mut self, op: &Op, ctx: &str) {
        let before = self.model.clone();
        let store = self.store.clone().expect("store is open");
        match op {
            Op::Commit { task, delta } => {
                let want = self.model.commit(task, None, delta);
                let got = store.commit(task, delta).map_err(classify);
                assert_eq!(got, want, "{ctx}");
                self.commits += u64::from(got.is_ok());
            }
            Op::CommitIf {
                task,
                expected,
                delta,
            } => {
                let latest = self.model.latest(task);
                let expected = match expected {
                    Expected::Latest => latest,
                    Expected::Above => latest + 1,
                    Expected::Below => latest.saturating_sub(1).max(u64::from(latest == 0)),
                    Expected::Zero => 0,
                };
                let want = self.model.commit(task, Some(expected), delta);
                let got = store.commit_if(task, expected, delta).map_err(classify);
                assert_eq!(got, want, "{ctx}");
                self.commits += u64::from(got.is_ok());
            }
            Op::Load { task, seq } => {
                let seq = &seq.resolve(self.model.latest(task));
                let ctx = &format!("{ctx} (seq {seq})");
                let got = store.load(task, *seq).map_err(classify).map(|cp| {
                    cp.map(|cp| {
                        assert_eq!((cp.task.as_str(), cp.seq), (*task, *seq), "{ctx}");
                        cp.state
                    })
                });
                assert_eq!(got, self.model.load(task, *seq), "{ctx}");
            }
            Op::LoadLatest { task } => {
                let got = store
                    .load_latest(task)
                    .map_err(classify)
                    .map(|cp| cp.map(|cp| (cp.seq, cp.state)));
                assert_eq!(got, Ok(latest_of(&self.model, task)), "{ctx}");
            }
            Op::LoadLatestMatching { task, rem } => {
                let got = store
                    .load_latest_matching(task, |s| matches_rem(s, *rem))
                    .map_err(classify)
                    .map(|cp| cp.map(|cp| (cp.seq, cp.state)));
                let want = self.model.tasks.get(*task).and_then(|t| {
                    (1..=t.states.len())
                        .rev()
                        .find(|&seq| matches_rem(&t.states[seq - 1], *rem))
                        .map(|seq| (seq as u64, t.states[seq - 1].clone()))
                });
                assert_eq!(got, Ok(want), "{ctx}");
            }
            Op::Fork {
                task,
                seq,
                new_task,
            } => {
                let seq = &seq.resolve(self.model.latest(task));
                let ctx = &format!("{ctx} (seq {seq})");
                let want = self.model.fork(task, *seq, new_task);
                let got = store.fork(task, *seq, new_task).map_err(classify);
                assert_eq!(got, want, "{ctx}");
            }
            Op::Delete { task } => {
                let want = self.model.delete(task);
                let got = store.delete_task(task).map_err(classify);
                assert_eq!(got, want, "{ctx}");
            }
            Op::BeginCall {
                task,
                call,
                tool,
                args,
            } => {
                let want = self.model.begin_call(task, call, tool, args.0);
                let got = store.begin_call(task, call, tool, args.0).map_err(classify);
                assert_eq!(got, want, "{ctx}");
            }
            Op::FinishCall { task, call, result } => {
                let want = self.model.finish_call(task, call, result.0);
                let got = store.finish_call(task, call, result.0).map_err(classify);
                assert_eq!(got, want, "{ctx}");
            }
            Op::CallResult { task, call } => {
                let got = store.call_result(task, call).map_err(classify);
                assert_eq!(got, Ok(self.model.call_result(task, call)), "{ctx}");
            }
            Op::PendingCalls { task } => {
                assert_eq!(pending_of(&store, task), self.model.pending(task), "{ctx}");
            }
            Op::ListCheckpoints { task } => check_checkpoints(&store, &self.model, task, ctx),
            Op::Tasks => {
                assert_eq!(store.tasks().ok(), Some(self.model.task_ids()), "{ctx}");
            }
            Op::Stats => {
                let s = store.stats();
                let got = (s.tasks, s.checkpoints, s.commits, s.appends);
                let want = (
                    self.model.tasks.len() as u64,
                    self.model.checkpoints(),
                    self.commits,
                    self.appends,
                );
                assert_eq!(got, want, "{ctx}: (tasks, checkpoints, commits, appends)");
            }
            Op::Reopen { cut } => {
                drop(store);
                self.reopen(*cut, ctx);
                return;
            }
            Op::ReadOnlyView => {
                drop(store);
                self.read_only_view(ctx);
                return;
            }
            Op::Compact => {
                // Compaction never touches the active (newest) segment.
                let in_active = records_in(&newest_segment(self.dir.path())).len();
                if let Err(e) = store.compact() {
                    panic!("{ctx}: compact failed: {e}");
                }
                self.model.compact(in_active);
                // A pass makes every record before it durable (else a crash could undo a
                // deletion whose task's older records it dropped): no cut may lose them.
                self.undo = None;
                check_all(&store, &self.model, ctx);
                return;
            }
        }
        if self.model.records() != before.records() {
            assert_eq!(self.model.records(), before.records() + 1, "{ctx}");
            self.appends += 1;
            self.undo = Some(before);
        }
        // Cheap invariant after every op.
        assert_eq!(
            self.store().tasks().ok(),
            Some(self.model.task_ids()),
            "{ctx}: tasks() after the op"
        );
    }

    fn reopen(&mut self, cut: Option<Cut>, ctx: &str) {
        self.store = None; // a clean drop: every write reached the OS
        let mut torn_bytes = 0;
        if let Some(cut) = cut
            && let Some(undo) = self.undo.take()
        {
            torn_bytes = cut_last_record(self.dir.path(), cut);
            self.model = undo;
        }
        let store: Store = Store::open_with(self.dir.path(), self.options)
            .unwrap_or_else(|e| panic!("{ctx}: reopen failed: {e}"));
        let r = store.recovery_report();
        assert_eq!(
            (r.records, r.torn_bytes, r.tasks),
            (
                self.model.records(),
                torn_bytes,
                self.model.tasks.len() as u64
            ),
            "{ctx}: recovery report (records, torn_bytes, tasks): {r:?}"
        );
        assert!(r.skipped.is_empty() && r.lost.is_empty(), "{ctx}: {r:?}");
        check_all(&store, &self.model, ctx);
        self.store = Some(store);
        self.commits = 0;
        self.appends = 0;
    }

    fn read_only_view(&mut self, ctx: &str) {
        let ro: Store = Store::open_read_only(self.dir.path())
            .unwrap_or_else(|e| panic!("{ctx}: read-only open failed: {e}"));
        assert_eq!(ro.recovery_report().records, self.model.records(), "{ctx}");
        check_all(&ro, &self.model, ctx);
        let delta = AgentDelta::default();
        let refused = [
            ro.commit("a", &delta).err(),
            ro.commit_if("a", 0, &delta).err(),
            ro.fork("a", 1, "z").err(),
            ro.delete_task("a").err(),
            ro.begin_call("a", "k1", "search", b"").err(),
            ro.finish_call("a", "k1", b"").err(),
            ro.flush().err(),
            ro.compact().err(),
        ];
        for e in refused {
            assert_eq!(e.map(classify), Some(Fail::ReadOnly), "{ctx}");
        }
        drop(ro);
        // The read-only handle left the writer's view alone.
        check_all(self.store(), &self.model, ctx);
    }
}

fn latest_of(model: &Model, task: &str) -> Option<(u64, AgentState)> {
    let t = model.tasks.get(task)?;
    Some((t.states.len() as u64, t.states.last()?.clone()))
}

fn pending_of(store: &Store, task: &str) -> Vec<(String, String, Vec<u8>)> {
    store
        .pending_calls(task)
        .expect("pending_calls")
        .into_iter()
        .map(|p| (p.call_id, p.tool, p.args))
        .collect()
}

/// `list_checkpoints` against the model, plus the snapshot policy's bound: never
/// `snapshot_every` deltas in a row (states here are far too small to skip a snapshot).
fn check_checkpoints(store: &Store, model: &Model, task: &str, ctx: &str) {
    let list = store.list_checkpoints(task).expect("list_checkpoints");
    let got: Vec<(u64, Option<(String, u64)>)> = list
        .iter()
        .map(|c| (c.seq, c.forked_from.clone()))
        .collect();
    let want: Vec<(u64, Option<(String, u64)>)> =
        model.tasks.get(task).map_or_else(Vec::new, |t| {
            (1..=t.states.len() as u64)
                .map(|seq| (seq, if seq == 1 { t.origin.clone() } else { None }))
                .collect()
        });
    assert_eq!(
        got, want,
        "{ctx}: list_checkpoints({task:?}) (seq, forked_from)"
    );
    let every = store.options().snapshot_every as usize;
    let mut run = 0;
    for c in &list {
        assert!(c.bytes > RECORD_HEADER_BYTES as u64, "{ctx}: {c:?}");
        if c.forked_from.is_some() {
            assert!(c.snapshot, "{ctx}: a fork starts with a snapshot: {c:?}");
        }
        run = if c.snapshot { 0 } else { run + 1 };
        assert!(
            run < every.max(1),
            "{ctx}: {run} deltas in a row with snapshot_every {every}: {list:?}"
        );
    }
}

/// Compares everything a store can answer with the model: tasks, every checkpoint of
/// every task (and the seqs just outside), pending calls and call results, stats.
fn check_all(store: &Store, model: &Model, ctx: &str) {
    assert_eq!(store.tasks().ok(), Some(model.task_ids()), "{ctx}: tasks()");
    for task in TASKS {
        check_checkpoints(store, model, task, ctx);
        let list = store.list_checkpoints(task).expect("list_checkpoints");
        let latest = model.latest(task);
        let got = store
            .load_latest(task)
            .map_err(classify)
            .map(|cp| cp.map(|cp| (cp.seq, cp.state)));
        assert_eq!(
            got,
            Ok(latest_of(model, task)),
            "{ctx}: load_latest({task:?})"
        );
        for seq in 0..=latest + 1 {
            let got = store.load(task, seq).map_err(classify).map(|cp| {
                cp.map(|cp| {
                    let info = &list[seq as usize - 1];
                    assert_eq!(cp.created_at_ms, info.created_at_ms, "{ctx}: {task}@{seq}");
                    cp.state
                })
            });
            assert_eq!(got, model.load(task, seq), "{ctx}: load({task:?}, {seq})");
        }
        assert_eq!(
            pending_of(store, task),
            model.pending(task),
            "{ctx}: pending_calls({task:?})"
        );
        for call in CALLS {
            let got = store.call_result(task, call).map_err(classify);
            assert_eq!(
                got,
                Ok(model.call_result(task, call)),
                "{ctx}: call_result({task:?}, {call:?})"
            );
        }
    }
    let s = store.stats();
    assert_eq!(
        (s.tasks, s.checkpoints),
        (model.tasks.len() as u64, model.checkpoints()),
        "{ctx}: stats (tasks, checkpoints)"
    );
}

/// The newest segment file of `dir`.
fn newest_segment(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir)
        .expect("read store dir")
        .filter_map(|e| {
            let e = e.ok()?;
            let id = parse_segment_file_name(&e.file_name().to_string_lossy())?;
            Some((id, e.path()))
        })
        .max()
        .expect("a segment file")
        .1
}

/// The records of a segment file: (offset, end, kind) of each, in order.
fn records_in(path: &Path) -> Vec<(usize, usize, u8)> {
    let buf = std::fs::read(path).expect("read segment");
    let mut pos = SEGMENT_HEADER_BYTES;
    let mut records = Vec::new();
    while pos + RECORD_HEADER_BYTES <= buf.len() {
        let h = match record::parse_header(&buf[pos..]) {
            Ok(h) => h,
            Err(DecodeError::Unwritten) => break,
            Err(e) => panic!("{}: bad header at {pos}: {e:?}", path.display()),
        };
        let end = pos + h.record_bytes() as usize;
        assert!(end <= buf.len(), "record at {pos} runs past the file");
        records.push((pos, end, h.kind));
        pos = end;
    }
    records
}

/// Cuts the newest segment inside its last record, as a crash in the middle of writing
/// it would. Returns the torn bytes recovery must report: the non-zero prefix left.
fn cut_last_record(dir: &Path, cut: Cut) -> u64 {
    let path = newest_segment(dir);
    let buf = std::fs::read(&path).expect("read segment");
    let last = records_in(&path).last().copied();
    let (start, end, kind) = last.expect("the newest segment holds the newest record");
    assert_ne!(kind, KIND_SEAL, "the newest segment is never sealed here");
    // Zeroing only zeros changes nothing: a zero-fill cut starts at or before the
    // record's last non-zero byte (a record can end in zeros).
    let last_nonzero = start
        + buf[start..end]
            .iter()
            .rposition(|&b| b != 0)
            .expect("record");
    let cut_end = if cut.zero_fill { last_nonzero } else { end - 1 };
    let at = start + 1 + usize::from(cut.at) % (cut_end - start);
    let file = OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open segment");
    if cut.zero_fill {
        file.write_all_at(&vec![0u8; end - at], at as u64)
            .expect("zero the tail");
    } else {
        file.set_len(at as u64).expect("truncate");
    }
    buf[start..at]
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |i| i as u64 + 1)
}

// ---------------------------------------------------------------------------------------
// Strategies

fn task() -> impl Strategy<Value = &'static str> {
    prop_oneof![8 => select(&TASKS[..4]), 1 => select(&TASKS[4..])]
}

/// Targets of forks and deletions.
fn fork_target() -> impl Strategy<Value = &'static str> {
    prop_oneof![1 => select(&TASKS[..4]), 2 => select(&TASKS[4..])]
}

/// Mostly seqs that exist; sometimes 0 or past the latest.
fn seq() -> impl Strategy<Value = Seq> {
    prop_oneof![
        3 => any::<u8>().prop_map(Seq::Existing),
        1 => (0u64..8).prop_map(Seq::Exact),
    ]
}

/// A large value: metadata replaces rather than accumulates, so it fills segments
/// without growing states without bound. (A string: its `Debug` stays on one line.)
fn big_value() -> impl Strategy<Value = Value> {
    (100usize..500, select(vec!['m', 'n'])).prop_map(|(n, c)| Value::Str(c.to_string().repeat(n)))
}

fn leaf_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..4).prop_map(Value::Int),
        (-4i32..4).prop_map(|i| Value::Float(f64::from(i) / 2.0)),
        "[a-c]{0,3}".prop_map(Value::Str),
        prop::collection::vec(any::<u8>(), 0..3).prop_map(Value::Bytes),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => leaf_value(),
        1 => prop::collection::vec(leaf_value(), 0..3).prop_map(Value::List),
        1 => prop::collection::btree_map(select(&VAR_KEYS[..]), leaf_value(), 0..2)
            .prop_map(|m| Value::Map(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    let role = select(vec![Role::System, Role::User, Role::Assistant, Role::Tool]);
    let call = (select(&CALLS[..]), select(&TOOLS[..]), leaf_value());
    (
        role,
        "[a-z ]{0,6}",
        prop::option::weighted(0.3, call),
        prop::option::weighted(0.2, leaf_value()),
    )
        .prop_map(|(role, content, call, data)| {
            let mut m = Message {
                role,
                content,
                data,
                ..Message::default()
            };
            if let Some((id, name, args)) = call {
                if role == Role::Tool {
                    m.tool_call_id = Some(id.to_string());
                } else {
                    m = m.with_tool_call(id, name, args);
                }
            }
            m
        })
}

fn delta() -> impl Strategy<Value = AgentDelta> {
    (
        prop::collection::vec(message(), 0..3),
        prop::collection::btree_map(select(&VAR_KEYS[..]), value(), 0..3),
        prop::collection::vec(select(&VAR_KEYS[..]), 0..2),
        prop::collection::btree_map(
            select(&META_KEYS[..]),
            prop_oneof![leaf_value(), big_value()],
            0..2,
        ),
    )
        .prop_map(|(messages, set, unset, metadata)| AgentDelta {
            messages,
            set: set.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            unset: unset.into_iter().map(String::from).collect(),
            metadata: metadata
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        })
}

fn expected() -> impl Strategy<Value = Expected> {
    prop_oneof![
        3 => Just(Expected::Latest),
        1 => Just(Expected::Above),
        1 => Just(Expected::Below),
        1 => Just(Expected::Zero),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let call = select(&CALLS[..]);
    let blob = select(&BLOBS[..]);
    prop_oneof![
        8 => (task(), delta()).prop_map(|(task, delta)| Op::Commit { task, delta }),
        4 => (task(), expected(), delta())
            .prop_map(|(task, expected, delta)| Op::CommitIf { task, expected, delta }),
        3 => (task(), seq()).prop_map(|(task, seq)| Op::Load { task, seq }),
        2 => task().prop_map(|task| Op::LoadLatest { task }),
        1 => (task(), 0usize..3).prop_map(|(task, rem)| Op::LoadLatestMatching { task, rem }),
        4 => (task(), seq(), fork_target())
            .prop_map(|(task, seq, new_task)| Op::Fork { task, seq, new_task }),
        2 => fork_target().prop_map(|task| Op::Delete { task }),
        4 => (task(), call.clone(), select(&TOOLS[..]), blob.clone())
            .prop_map(|(task, call, tool, args)| Op::BeginCall { task, call, tool, args }),
        4 => (task(), call.clone(), blob)
            .prop_map(|(task, call, result)| Op::FinishCall { task, call, result }),
        1 => (task(), call).prop_map(|(task, call)| Op::CallResult { task, call }),
        1 => task().prop_map(|task| Op::PendingCalls { task }),
        1 => task().prop_map(|task| Op::ListCheckpoints { task }),
        1 => Just(Op::Tasks),
        1 => Just(Op::Stats),
        3 => prop::option::weighted(0.5, (any::<u16>(), any::<bool>())
            .prop_map(|(at, zero_fill)| Cut { at, zero_fill }))
            .prop_map(|cut| Op::Reopen { cut }),
        1 => Just(Op::ReadOnlyView),
        1 => Just(Op::Compact),
    ]
}

fn options(sync: SyncMode, snapshot_every: u32) -> Options {
    Options {
        sync,
        segment_bytes: 4096,
        snapshot_every,
        // Compaction runs only where `Op::Compact` says: a background pass would change
        // the record counts at times the model cannot know.
        auto_compact: false,
        ..Options::default()
    }
}

/// `cases` unless `PROPTEST_CASES` says otherwise (an explicit `cases` in a config
/// would otherwise shadow the variable).
fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// Most cases: no fsyncs, so many long sequences run quickly. A clean drop keeps every
    /// write (it reached the OS), and a cut still loses exactly the last record.
    #[test]
    fn store_matches_model(
        snapshot_every in select(vec![1u32, 2, 3, 5]),
        ops in prop::collection::vec(op(), 1..100),
    ) {
        Harness::new(options(SyncMode::Never, snapshot_every)).run(&ops);
    }
}

proptest! {
    #![proptest_config(config(32))]

    /// Durable commits: every acknowledged record survives, a cut loses only the last.
    #[test]
    fn store_matches_model_sync_always(
        ops in prop::collection::vec(op(), 1..60),
    ) {
        Harness::new(options(SyncMode::Always, 3)).run(&ops);
    }
}

// ---------------------------------------------------------------------------------------
// Regressions: minimal sequences the property found, replayed as plain tests.

fn replay(ops: &[Op]) {
    Harness::new(options(SyncMode::Never, 3)).run(ops);
}

/// A `commit_if` that conflicts on a task that does not exist left an empty slot in the
/// index, and the task half-existed until the store was reopened: `tasks()` did not list
/// it, but `load` and `fork` answered `UnknownSeq` instead of `Ok(None)` / `UnknownTask`,
/// `finish_call` answered `InvalidArgument` instead of `UnknownTask`, and `delete_task`
/// succeeded and appended a deletion record for a task that never existed.
#[test]
fn regression_conflicting_commit_if_does_not_create_the_task() {
    let commit_if = Op::CommitIf {
        task: "a",
        expected: Expected::Above,
        delta: AgentDelta::default(),
    };
    // The minimal sequences the property found.
    replay(std::slice::from_ref(&commit_if)); // the final sweep: load("a", 0)
    replay(&[
        commit_if.clone(),
        Op::FinishCall {
            task: "a",
            call: "k1",
            result: Blob(b""),
        },
    ]);
    // Every operation that looked the task up, then a reopen that counts the records.
    replay(&[
        commit_if,
        Op::Load {
            task: "a",
            seq: Seq::Exact(1),
        },
        Op::Fork {
            task: "a",
            seq: Seq::Exact(1),
            new_task: "f",
        },
        Op::Delete { task: "a" },
        Op::Reopen { cut: None },
        Op::Tasks,
    ]);
}

/// Compaction drops the records a deletion made dead, so the deletion must be durable
/// first. It was not: with `SyncMode::Periodic` or `Never`, a crash after a pass could lose
/// the (unflushed) deletion record while the task's older records were already gone, and
/// the task came back with only its newer records: listed by `tasks()`, one delta in
/// `list_checkpoints`, `load_latest` = `None`, a state that never existed. The property
/// found it as a cut of the deletion after `Compact`; the fix flushes the log in the pass,
/// which this test observes as an fsync of the writer (nothing else fsyncs in `Never`).
#[test]
fn regression_compaction_makes_the_deletions_it_relies_on_durable() {
    let big = Blob(&[b'y'; 1200]);
    let call = |call| Op::BeginCall {
        task: "a",
        call,
        tool: "search",
        args: big,
    };
    let commit = |n: i64| Op::Commit {
        task: "c",
        delta: AgentDelta::default().set("n", n),
    };
    // c@1 and four large calls fill segment 1; c@2 and the deletion go to segment 2.
    let ops = [
        commit(1),
        call("k1"),
        call("k2"),
        call("k3"),
        Op::BeginCall {
            task: "b",
            call: "k1",
            tool: "search",
            args: big,
        },
        commit(2),
        Op::Delete { task: "c" },
    ];
    let mut h = Harness::new(options(SyncMode::Never, 3));
    for (i, op) in ops.iter().enumerate() {
        h.step(op, &format!("op #{i}: {op:?}"));
    }
    let segments = std::fs::read_dir(h.dir.path())
        .expect("read dir")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "wal"))
        })
        .count();
    assert_eq!(segments, 2, "the setup must seal segment 1");
    let fsyncs = h.store().stats().fsyncs;
    h.step(&Op::Compact, "compact");
    assert!(
        h.store().stats().fsyncs > fsyncs,
        "compaction dropped c's records without making the deletion durable"
    );
    h.step(&Op::Reopen { cut: None }, "reopen");
}
