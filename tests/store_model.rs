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
//! must change no answer but the journal's retention (below) and leaves every earlier
//! record durable (no later cut may lose one); the model tracks which task incarnation each record belongs to, so record counts
//! stay exact across compactions too (background compaction is off, as its timing would
//! make them unknowable). Every reopen, compaction and read-only view is
//! followed by a sweep comparing every task, seq and call with the model.
//!
//! Retention: cases run with `keep_checkpoints` of 1 to 4 or `None`, and `Reopen` may
//! change it, as may a read-only view. The store must serve exactly the last `keep` seqs
//! of a task (the latest always): `list_checkpoints` lists only those, `load` of an older
//! seq is `Ok(None)` (seq 0 or past the latest is still `UnknownSeq`),
//! `load_latest_matching` looks only at those, and `fork` from an older one is
//! `InvalidArgument`. Compaction forgets, and drops from sealed segments, each task's
//! checkpoints before the fold base (the snapshot) of its oldest retained seq; what the
//! model knows of the log (which incarnation and seq each record holds, and which
//! checkpoints are snapshots, as the store reported when writing them) tells which
//! records survive, so record counts stay exact. With `keep` set, a pass also prunes each
//! finished call whose finish record lies before its task's oldest retained checkpoint:
//! from then on its result is `None`, it is listed nowhere, and writes of its id are
//! `InvalidArgument`. Its two records leave the log, and its id is free again, once both
//! are sealed and share one segment (the model reads which segment holds each record
//! before every pass); a reopen serves the calls still on disk again. `compact` seals the
//! active segment first, so a pass covers every record; a background pass leaves the
//! active segment alone, so a reopened store can hold a task's history from a delta in
//! the middle of a chain ("headless", `max_age_retention_across_compaction_and_reopen`);
//! a larger `keep` then still serves only from its first snapshot on. As
//! long as no compaction ran with a smaller `keep`, the model also checks the plain
//! promise (exactly the last `keep`) independently of that bookkeeping. `max_age` depends
//! on the clock, so a plain test covers it instead.
//!
//! `async_store_matches_model` (cargo feature `tokio`) runs the same operations through
//! the async API, which must give the same answers.
//!
//! The default case counts keep the file under ~30 s in a debug build; `PROPTEST_CASES`
//! overrides them. Failures are not persisted to files: a failing sequence found here
//! becomes a plain `#[test]` at the bottom of this file.

mod common;

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use agentwal::log::record::{self, DecodeError};
use agentwal::log::{
    KIND_CLOSE, KIND_SEAL, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, SegmentHeader,
};
use agentwal::{
    AgentDelta, AgentState, Error, Message, Options, Role, Store, SyncMode, ToolCall, Value,
};
use common::env::env_u64;
use common::newest_segment;
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
    /// Reopens the writer, with `keep_checkpoints` changed if `keep` says so.
    Reopen {
        cut: Option<Cut>,
        keep: Option<Keep>,
    },
    /// A forced compaction pass: no answer may change, but for the calls retention prunes.
    Compact,
    /// Opens a read-only handle next to the writer (with the writer's retention, or with
    /// `keep`), sweeps it, and checks it refuses writes.
    ReadOnlyView {
        keep: Option<Keep>,
    },
}

/// A `keep_checkpoints` setting.
#[derive(Debug, Clone, Copy)]
struct Keep(Option<u32>);

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
    /// Pruned by a compaction pass: finished before its task's oldest retained checkpoint
    /// (and still on disk: once its records go, the call goes from the model too).
    pruned: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct TaskModel {
    /// Tells this life of the task id from earlier ones (deleted) and later ones.
    incarnation: u64,
    /// `states[i]` is the state as of seq `i + 1`.
    states: Vec<AgentState>,
    /// `snapshots[i]`: whether checkpoint `i + 1` was written as a full snapshot. The
    /// snapshot policy is the store's to choose (`check_checkpoints` checks its bound), so
    /// this is learnt from `list_checkpoints` right after each commit; what it decides is
    /// which records retention keeps as fold bases.
    snapshots: Vec<bool>,
    /// The oldest seq the writer's index still holds (1 until compaction prunes the
    /// checkpoints retention no longer needs; after a reopen, the oldest the log holds).
    indexed_from: u64,
    origin: Option<(String, u64)>,
    /// In the order they began.
    calls: Vec<CallModel>,
}

impl TaskModel {
    fn latest(&self) -> u64 {
        self.states.len() as u64
    }

    fn is_snapshot(&self, seq: u64) -> bool {
        self.snapshots[seq as usize - 1]
    }

    /// The oldest seq a fold can rebuild from what the index holds: its first, unless
    /// that is a delta after seq 1 (a "headless" history compaction left behind), then
    /// the first snapshot after it.
    fn first_loadable(&self) -> u64 {
        let from = self.indexed_from.max(1);
        if from == 1 || self.is_snapshot(from) {
            return from;
        }
        let snapshot = (from..=self.latest()).find(|&s| self.is_snapshot(s));
        snapshot.unwrap_or_else(|| panic!("a headless history without a snapshot: {self:?}"))
    }

    /// The oldest seq retention serves (0 for a task without checkpoints): the last `keep`,
    /// and never one the index can no longer rebuild.
    fn retained_from(&self, keep: Option<u32>) -> u64 {
        let latest = self.latest();
        if latest == 0 {
            return 0;
        }
        let by_keep = keep.map_or(1, |k| (latest + 1).saturating_sub(u64::from(k)).max(1));
        self.first_loadable().max(by_keep)
    }

    /// The oldest record compaction keeps: the fold base of the oldest retained seq.
    fn needed_from(&self, keep: Option<u32>) -> u64 {
        let from = self.indexed_from.max(1);
        let retained = self.retained_from(keep);
        (from..=retained)
            .rev()
            .find(|&s| self.is_snapshot(s))
            .unwrap_or(from)
    }
}

/// One record of the log, as the model sees it.
#[derive(Debug, Clone, PartialEq)]
enum Rec {
    /// Checkpoint `seq` of a task incarnation.
    Checkpoint {
        incarnation: u64,
        seq: u64,
    },
    /// A tool call's begin or finish record.
    Call {
        incarnation: u64,
        call: String,
        finish: bool,
    },
    Delete,
}

/// Every task in `tasks` exists (has a checkpoint or a call); failed operations never
/// add one.
#[derive(Debug, Clone, Default)]
struct Model {
    tasks: BTreeMap<String, TaskModel>,
    /// The records in the log, oldest first. Each successful write appends one;
    /// compaction drops, from sealed segments, those of dead tasks, deletions, and the
    /// checkpoints older than their task's fold base of the oldest retained seq.
    log: Vec<Rec>,
    incarnations: u64,
    /// `keep_checkpoints` of the handle this model describes.
    keep: Option<u32>,
    /// The smallest `keep_checkpoints` any compaction ran with (`None`: unbounded, or no
    /// compaction yet). While `keep` is no larger, retention must serve exactly the last
    /// `keep` checkpoints: no record it needs can have been dropped.
    compacted_keep: Option<u32>,
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
            indexed_from: 1,
            ..TaskModel::default()
        });
        if t.incarnation == next {
            self.incarnations = next;
        }
        t
    }

    /// Appends the record of a write to `task` (`None`: a deletion): its latest checkpoint.
    fn wrote(&mut self, task: Option<&str>) {
        self.log.push(match task.map(|t| &self.tasks[t]) {
            None => Rec::Delete,
            Some(t) => Rec::Checkpoint {
                incarnation: t.incarnation,
                seq: t.latest(),
            },
        });
    }

    /// Appends the begin (or, if `finish`, the finish) record of `call` of `task`.
    fn wrote_call(&mut self, task: &str, call: &str, finish: bool) {
        self.log.push(Rec::Call {
            incarnation: self.tasks[task].incarnation,
            call: call.into(),
            finish,
        });
    }

    /// Where `rec` is in the log (it must be there).
    fn position(&self, rec: &Rec) -> usize {
        let found = self.log.iter().position(|r| r == rec);
        found.unwrap_or_else(|| panic!("{rec:?} is not in the log"))
    }

    /// What a forced compaction leaves, given how many records each segment holds
    /// (oldest first; the last is the active one): of the sealed segments' records, only
    /// the live ones (checkpoints from their task's fold base of the oldest retained seq
    /// on, tool calls of tasks that still exist but those retention pruned whose two
    /// records share a segment); the active segment's all. The writer's index forgets
    /// the checkpoints before those fold bases, and prunes the calls that finished before
    /// their task's oldest retained checkpoint (with `keep` set).
    fn compact(&mut self, segments: &[usize]) {
        assert_eq!(
            segments.iter().sum::<usize>(),
            self.log.len(),
            "{segments:?}"
        );
        let keep = self.keep;
        let segment_of: Vec<usize> = (segments.iter().enumerate())
            .flat_map(|(id, &n)| std::iter::repeat_n(id, n))
            .collect();
        let sealed = self.log.len() - segments.last().copied().unwrap_or(0);
        let mut dropped = Vec::new();
        if keep.is_some() {
            let mut pruned = Vec::new();
            for t in self.tasks.values() {
                let retained = t.retained_from(keep);
                if retained == 0 {
                    continue;
                }
                let horizon = self.position(&Rec::Checkpoint {
                    incarnation: t.incarnation,
                    seq: retained,
                });
                for (i, c) in t.calls.iter().enumerate() {
                    let rec = |finish| Rec::Call {
                        incarnation: t.incarnation,
                        call: c.id.clone(),
                        finish,
                    };
                    if c.result.is_none() {
                        continue;
                    }
                    let (begin, finish) = (self.position(&rec(false)), self.position(&rec(true)));
                    if finish < horizon {
                        pruned.push((t.incarnation, i));
                        if finish < sealed && segment_of[begin] == segment_of[finish] {
                            dropped.push((t.incarnation, c.id.clone()));
                        }
                    }
                }
            }
            for t in self.tasks.values_mut() {
                for &(_, i) in pruned.iter().filter(|(inc, _)| *inc == t.incarnation) {
                    t.calls[i].pruned = true;
                }
                let inc = t.incarnation;
                t.calls.retain(|c| !dropped.contains(&(inc, c.id.clone())));
            }
        }
        let needed: BTreeMap<u64, u64> = self
            .tasks
            .values_mut()
            .map(|t| {
                let needed = t.needed_from(keep);
                t.indexed_from = t.indexed_from.max(needed);
                (t.incarnation, needed)
            })
            .collect();
        let live = |r: &&Rec| match r {
            Rec::Checkpoint { incarnation, seq } => {
                needed.get(incarnation).is_some_and(|n| seq >= n)
            }
            Rec::Call {
                incarnation, call, ..
            } => {
                needed.contains_key(incarnation) && !dropped.contains(&(*incarnation, call.clone()))
            }
            Rec::Delete => false,
        };
        let mut log: Vec<Rec> = self.log[..sealed].iter().filter(live).cloned().collect();
        log.extend_from_slice(&self.log[sealed..]);
        self.log = log;
        self.compacted_keep = match (self.compacted_keep, keep) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// The model of a store opened on this log with `keep_checkpoints` = `keep`: its
    /// index holds every checkpoint and call the log still holds, none pruned.
    fn reopened(&self, keep: Option<u32>) -> Model {
        let mut m = self.clone();
        m.keep = keep;
        for t in m.tasks.values_mut() {
            t.calls.iter_mut().for_each(|c| c.pruned = false);
            t.indexed_from = self
                .log
                .iter()
                .find_map(|r| match *r {
                    Rec::Checkpoint { incarnation, seq } if incarnation == t.incarnation => {
                        Some(seq)
                    }
                    _ => None,
                })
                .unwrap_or(1);
        }
        m
    }

    fn latest(&self, task: &str) -> u64 {
        self.tasks.get(task).map_or(0, TaskModel::latest)
    }

    /// The oldest seq of `task` retention serves (0 if it has no checkpoint).
    fn retained_from(&self, task: &str) -> u64 {
        let Some(t) = self.tasks.get(task) else {
            return 0;
        };
        let from = t.retained_from(self.keep);
        let never_more_than = |a: Option<u32>, b: Option<u32>| match (a, b) {
            (_, None) => true,
            (None, Some(_)) => false,
            (Some(a), Some(b)) => a <= b,
        };
        if never_more_than(self.keep, self.compacted_keep) && t.latest() > 0 {
            // The promise, independent of how the model tracks the log: the last `keep`
            // checkpoints, all of them without a limit.
            let k = self.keep.map_or(u64::MAX, u64::from);
            let promised = t.latest().saturating_sub(k - 1).max(1);
            assert_eq!(from, promised, "retention must serve the last {k} of {t:?}");
        }
        from
    }

    /// The seqs of `task` retention serves, oldest first.
    fn retained(&self, task: &str) -> std::ops::RangeInclusive<u64> {
        self.retained_from(task).max(1)..=self.latest(task)
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

    /// `load`: `None` for a task that does not exist or a seq retention no longer serves;
    /// seq 0 or past the latest is an error.
    fn load(&self, task: &str, seq: u64) -> Outcome<Option<AgentState>> {
        let Some(t) = self.tasks.get(task) else {
            return Ok(None);
        };
        let latest = t.latest();
        if seq == 0 || seq > latest {
            return Err(Fail::UnknownSeq {
                task: task.into(),
                seq,
                latest,
            });
        }
        if !self.retained(task).contains(&seq) {
            return Ok(None);
        }
        Ok(Some(t.states[seq as usize - 1].clone()))
    }

    /// The newest retained checkpoint whose state passes `accept`.
    fn load_latest_matching(
        &self,
        task: &str,
        accept: impl Fn(&AgentState) -> bool,
    ) -> Option<(u64, AgentState)> {
        let t = self.tasks.get(task)?;
        self.retained(task)
            .rev()
            .map(|seq| (seq, &t.states[seq as usize - 1]))
            .find(|(_, state)| accept(state))
            .map(|(seq, state)| (seq, state.clone()))
    }

    fn fork(&mut self, task: &str, seq: u64, new_task: &str) -> Outcome<u64> {
        let Some(state) = self.load(task, seq)? else {
            // A seq retention dropped: only the message says why.
            return Err(if self.tasks.contains_key(task) {
                Fail::InvalidArgument
            } else {
                Fail::UnknownTask(task.into())
            });
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
        // A pruned call is finished: refused above, its id taken until its records go.
        self.task_mut(task).calls.push(CallModel {
            id: call.into(),
            tool: tool.into(),
            args: args.to_vec(),
            result: None,
            pruned: false,
        });
        self.wrote_call(task, call, false);
        Ok(())
    }

    fn finish_call(&mut self, task: &str, call: &str, result: &[u8]) -> Outcome<()> {
        let Some(t) = self.tasks.get_mut(task) else {
            return Err(Fail::UnknownTask(task.into()));
        };
        let Some(c) = t.calls.iter_mut().find(|c| c.id == call) else {
            return Err(Fail::InvalidArgument);
        };
        if c.pruned {
            return Err(Fail::InvalidArgument);
        }
        match &c.result {
            Some(r) if r == result => Ok(()),
            Some(_) => Err(Fail::InvalidArgument),
            None => {
                c.result = Some(result.to_vec());
                self.wrote_call(task, call, true);
                Ok(())
            }
        }
    }

    fn call_result(&self, task: &str, call: &str) -> Option<Vec<u8>> {
        self.tasks
            .get(task)
            .and_then(|t| t.calls.iter().find(|c| c.id == call && !c.pruned))
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

    /// The checkpoints the index holds over all tasks (what `stats()` counts): the
    /// retained ones and, until compaction prunes them, older ones.
    fn checkpoints(&self) -> u64 {
        self.tasks
            .values()
            .map(|t| (t.latest() + 1).saturating_sub(t.indexed_from.max(1)))
            .sum()
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
    /// `Some`: the writes and loads go through the async API on this runtime.
    runtime: Option<Runtime>,
}

/// The runtime the async API runs on (without the `tokio` feature, none can exist).
#[cfg(feature = "tokio")]
type Runtime = tokio::runtime::Runtime;
#[cfg(not(feature = "tokio"))]
enum Runtime {}

/// Calls `$method` on the blocking store, or the same method of the async API, by the
/// harness's mode: both must give the model's answer.
#[cfg(feature = "tokio")]
macro_rules! api {
    ($harness:expr, $store:expr, $method:ident($($arg:expr),*)) => {
        match &$harness.runtime {
            None => $store.$method($($arg),*),
            Some(rt) => rt.block_on(agentwal::AsyncStore::from($store.clone()).$method($($arg),*)),
        }
    };
}
#[cfg(not(feature = "tokio"))]
macro_rules! api {
    ($harness:expr, $store:expr, $method:ident($($arg:expr),*)) => {
        match &$harness.runtime {
            None => $store.$method($($arg),*),
            Some(rt) => match *rt {},
        }
    };
}

impl Harness {
    fn new(options: Options) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open_with(dir.path(), options).expect("open a fresh store");
        Harness {
            dir,
            options,
            store: Some(store),
            model: Model {
                keep: options.keep_checkpoints,
                ..Model::default()
            },
            undo: None,
            commits: 0,
            appends: 0,
            runtime: None,
        }
    }

    /// The same harness with the async API on a `current_thread` runtime.
    #[cfg(feature = "tokio")]
    fn via_async(mut self) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        self.runtime = Some(rt);
        self
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
                let got = api!(self, store, commit(task, delta)).map_err(classify);
                assert_eq!(got, want, "{ctx}");
                self.commits += u64::from(got.is_ok());
                self.learn_snapshot(task, &got, ctx);
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
                let got = api!(self, store, commit_if(task, expected, delta)).map_err(classify);
                assert_eq!(got, want, "{ctx}");
                self.commits += u64::from(got.is_ok());
                self.learn_snapshot(task, &got, ctx);
            }
            Op::Load { task, seq } => {
                let seq = &seq.resolve(self.model.latest(task));
                let ctx = &format!("{ctx} (seq {seq})");
                let got = api!(self, store, load(task, *seq))
                    .map_err(classify)
                    .map(|cp| {
                        cp.map(|cp| {
                            assert_eq!((cp.task.as_str(), cp.seq), (*task, *seq), "{ctx}");
                            std::sync::Arc::unwrap_or_clone(cp.state)
                        })
                    });
                assert_eq!(got, self.model.load(task, *seq), "{ctx}");
            }
            Op::LoadLatest { task } => {
                let got = api!(self, store, load_latest(task))
                    .map_err(classify)
                    .map(|cp| cp.map(|cp| (cp.seq, std::sync::Arc::unwrap_or_clone(cp.state))));
                assert_eq!(got, Ok(latest_of(&self.model, task)), "{ctx}");
            }
            Op::LoadLatestMatching { task, rem } => {
                let rem = *rem;
                let got = api!(
                    self,
                    store,
                    load_latest_matching(task, move |s| matches_rem(s, rem))
                )
                .map_err(classify)
                .map(|cp| cp.map(|cp| (cp.seq, std::sync::Arc::unwrap_or_clone(cp.state))));
                let want = self
                    .model
                    .load_latest_matching(task, |s| matches_rem(s, rem));
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
                let got = api!(self, store, fork(task, *seq, new_task)).map_err(classify);
                assert_eq!(got, want, "{ctx}");
                self.learn_snapshot(new_task, &got, ctx);
            }
            Op::Delete { task } => {
                let want = self.model.delete(task);
                let got = api!(self, store, delete_task(task)).map_err(classify);
                assert_eq!(got, want, "{ctx}");
            }
            Op::BeginCall {
                task,
                call,
                tool,
                args,
            } => {
                let want = self.model.begin_call(task, call, tool, args.0);
                let got = api!(self, store, begin_call(task, call, tool, args.0)).map_err(classify);
                assert_eq!(got, want, "{ctx}");
            }
            Op::FinishCall { task, call, result } => {
                let want = self.model.finish_call(task, call, result.0);
                let got = api!(self, store, finish_call(task, call, result.0)).map_err(classify);
                assert_eq!(got, want, "{ctx}");
            }
            Op::CallResult { task, call } => {
                let got = api!(self, store, call_result(task, call)).map_err(classify);
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
            Op::Reopen { cut, keep } => {
                drop(store);
                self.reopen(*cut, *keep, ctx);
                return;
            }
            Op::ReadOnlyView { keep } => {
                drop(store);
                self.read_only_view(*keep, ctx);
                return;
            }
            Op::Compact => {
                // `compact` seals the active segment first (if it holds a record), then
                // compacts every sealed one; a pruned call goes only with both its
                // records, which needs them in one segment.
                let mut segments = records_per_segment(self.dir.path());
                if segments.last().is_some_and(|&n| n > 0) {
                    segments.push(0);
                }
                if let Err(e) = store.compact() {
                    panic!("{ctx}: compact failed: {e}");
                }
                self.model.compact(&segments);
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

    /// Records whether the checkpoint a successful commit or fork just wrote is a
    /// snapshot (the latest checkpoint is always listed).
    fn learn_snapshot(&mut self, task: &str, outcome: &Outcome<u64>, ctx: &str) {
        let Ok(seq) = *outcome else { return };
        let list = self
            .store()
            .list_checkpoints(task)
            .expect("list_checkpoints");
        let last = list
            .last()
            .unwrap_or_else(|| panic!("{ctx}: nothing listed"));
        assert_eq!(
            last.seq, seq,
            "{ctx}: the latest is always listed: {list:?}"
        );
        let t = self.model.tasks.get_mut(task).expect("committed");
        t.snapshots.push(last.snapshot);
        assert_eq!(t.snapshots.len(), t.states.len(), "{ctx}");
    }

    fn reopen(&mut self, cut: Option<Cut>, keep: Option<Keep>, ctx: &str) {
        self.store = None; // a clean drop: every write reached the OS
        let mut torn_bytes = 0;
        if let Some(cut) = cut
            && let Some(undo) = self.undo.take()
        {
            torn_bytes = cut_last_record(self.dir.path(), cut);
            self.model = undo;
        }
        if let Some(Keep(keep)) = keep {
            self.options.keep_checkpoints = keep;
        }
        // The reopened index holds every checkpoint the log holds.
        self.model = self.model.reopened(self.options.keep_checkpoints);
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

    /// A read-only handle with the writer's retention, or with `keep` instead.
    fn read_only_view(&mut self, keep: Option<Keep>, ctx: &str) {
        let ro: Store = if let Some(Keep(keep)) = keep {
            let options = Options {
                keep_checkpoints: keep,
                ..Options::default()
            };
            Store::open_read_only_with(self.dir.path(), options)
        } else if self.options.keep_checkpoints.is_none() {
            Store::open_read_only(self.dir.path())
        } else {
            Store::open_read_only_with(self.dir.path(), self.options)
        }
        .unwrap_or_else(|e| panic!("{ctx}: read-only open failed: {e}"));
        assert_eq!(ro.recovery_report().records, self.model.records(), "{ctx}");
        let view = self.model.reopened(ro.options().keep_checkpoints);
        check_all(&ro, &view, ctx);
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
            model
                .retained(task)
                .map(|seq| (seq, if seq == 1 { t.origin.clone() } else { None }))
                .collect()
        });
    assert_eq!(
        got, want,
        "{ctx}: list_checkpoints({task:?}) (seq, forked_from)"
    );
    if let Some(t) = model.tasks.get(task) {
        let got: Vec<bool> = list.iter().map(|c| c.snapshot).collect();
        let want: Vec<bool> = model.retained(task).map(|s| t.is_snapshot(s)).collect();
        assert_eq!(
            got, want,
            "{ctx}: list_checkpoints({task:?}) snapshot flags"
        );
    }
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
            .map(|cp| cp.map(|cp| (cp.seq, std::sync::Arc::unwrap_or_clone(cp.state))));
        assert_eq!(
            got,
            Ok(latest_of(model, task)),
            "{ctx}: load_latest({task:?})"
        );
        for seq in 0..=latest + 1 {
            let got = store.load(task, seq).map_err(classify).map(|cp| {
                cp.map(|cp| {
                    let info = list.iter().find(|c| c.seq == seq);
                    let info = info.unwrap_or_else(|| panic!("{ctx}: {task}@{seq} not listed"));
                    assert_eq!(cp.created_at_ms, info.created_at_ms, "{ctx}: {task}@{seq}");
                    std::sync::Arc::unwrap_or_clone(cp.state)
                })
            });
            assert_eq!(got, model.load(task, seq), "{ctx}: load({task:?}, {seq})");
        }
        for rem in 0..3 {
            let got = store
                .load_latest_matching(task, |s| matches_rem(s, rem))
                .map_err(classify)
                .map(|cp| cp.map(|cp| (cp.seq, std::sync::Arc::unwrap_or_clone(cp.state))));
            let want = model.load_latest_matching(task, |s| matches_rem(s, rem));
            assert_eq!(
                got,
                Ok(want),
                "{ctx}: load_latest_matching({task:?}, {rem})"
            );
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
    check_task_infos(store, model, ctx);
}

/// `task_infos` and `calls` (the CLI's views) against the model.
fn check_task_infos(store: &Store, model: &Model, ctx: &str) {
    type Info = (String, u64, u64, u64, u64, Option<(String, u64)>);
    let infos = store.task_infos().expect("task_infos");
    let got: Vec<Info> = infos
        .into_iter()
        .map(|i| {
            let summary = (i.latest_seq, i.checkpoints, i.snapshots, i.calls);
            (
                i.task,
                summary.0,
                summary.1,
                summary.2,
                summary.3,
                i.forked_from,
            )
        })
        .collect();
    let want: Vec<Info> = model
        .tasks
        .iter()
        .map(|(id, t)| {
            let retained = model.retained(id);
            let indexed = t.indexed_from.max(1)..=t.latest();
            (
                id.clone(),
                t.latest(),
                retained.clone().count() as u64,
                indexed.filter(|&s| t.is_snapshot(s)).count() as u64,
                t.calls.iter().filter(|c| !c.pruned).count() as u64,
                // Where a task came from is its seq 1's to say, while that is retained.
                t.origin.clone().filter(|_| retained.contains(&1)),
            )
        })
        .collect();
    assert_eq!(
        got, want,
        "{ctx}: task_infos (task, latest_seq, checkpoints, snapshots, calls, forked_from)"
    );
    for task in TASKS {
        let got: Vec<CallModel> = store
            .calls(task)
            .expect("calls")
            .into_iter()
            .map(|c| CallModel {
                id: c.call_id,
                tool: c.tool,
                args: c.args,
                result: c.result,
                pruned: false,
            })
            .collect();
        let want: Vec<CallModel> = model.tasks.get(task).map_or_else(Vec::new, |t| {
            t.calls.iter().filter(|c| !c.pruned).cloned().collect()
        });
        assert_eq!(got, want, "{ctx}: calls({task:?})");
    }
}

/// How many records (seals and close records left out) each segment of `dir` holds,
/// oldest first, the active segment last: when the newest file is sealed (an open sealed
/// a recycled segment its writer did not close, and nothing was appended since), the
/// active segment is the one not created yet, which holds nothing.
fn records_per_segment(dir: &Path) -> Vec<usize> {
    let mut segments: Vec<(u64, std::path::PathBuf)> = std::fs::read_dir(dir)
        .expect("read store dir")
        .filter_map(|e| {
            let e = e.ok()?;
            let id = agentwal::log::parse_segment_file_name(&e.file_name().to_string_lossy())?;
            Some((id, e.path()))
        })
        .collect();
    segments.sort_unstable();
    let mut counts: Vec<usize> = (segments.iter())
        .map(|(_, path)| records_in(path).len())
        .collect();
    if let Some((_, newest)) = segments.last()
        && let Some(&(_, _, KIND_SEAL)) = walk_segment(newest).records.last()
    {
        counts.push(0);
    }
    counts
}

/// A segment file as the harness sees it: whether it is a recycled file, and its
/// records ((offset, end, kind) of each, seals and close records included, in order),
/// walked with the segment's salt up to the first position that does not validate.
struct SegmentWalk {
    recycled: bool,
    records: Vec<(usize, usize, u8)>,
}

fn walk_segment(path: &Path) -> SegmentWalk {
    let buf = std::fs::read(path).expect("read segment");
    let header = SegmentHeader::decode(&buf, path).expect("segment header");
    let mut pos = SEGMENT_HEADER_BYTES;
    let mut records = Vec::new();
    loop {
        match record::decode(&buf[pos..], header.salt) {
            Ok((h, _)) => {
                let end = pos + h.record_bytes() as usize;
                records.push((pos, end, h.kind));
                pos = end;
                if h.kind == KIND_SEAL {
                    break;
                }
            }
            // Past the data of a fresh segment only zeros (or the file's end) may follow;
            // past a recycled one's lie an earlier life's bytes, which never validate.
            Err(DecodeError::Unwritten) => break,
            Err(_) if header.is_recycled() => break,
            Err(e) => panic!("{}: bad record at {pos}: {e:?}", path.display()),
        }
    }
    SegmentWalk {
        recycled: header.is_recycled(),
        records,
    }
}

/// The records a reader of the segment sees: (offset, end, kind), seals and close records
/// left out.
fn records_in(path: &Path) -> Vec<(usize, usize, u8)> {
    let internal = [KIND_SEAL, KIND_CLOSE];
    let walk = walk_segment(path);
    walk.records
        .into_iter()
        .filter(|r| !internal.contains(&r.2))
        .collect()
}

/// Cuts the newest segment inside its last record, as a crash in the middle of writing
/// it would. Returns the torn bytes recovery must report.
///
/// In a fresh segment: the file is truncated or zeroed from the cut on, and the torn bytes
/// are the non-zero prefix left. In a recycled segment a crash cannot shorten the file (its
/// length is the earlier life's), and what follows the cut is an earlier life's bytes:
/// the cut garbles (or zeroes) the rest of the record instead, and the close records
/// after it (a clean close appends one in a recycled segment, or a seal when no room is
/// left for one) go too, as a writer that crashed while writing the record never wrote
/// them. Recovery then cannot bound the tear:
/// it reports every byte from the end of the data to the file's end, unless the data ends
/// with a close record, which tells it nothing of this life follows (a torn record right
/// after it looks like the earlier life's bytes), and it reports none.
fn cut_last_record(dir: &Path, cut: Cut) -> u64 {
    let path = newest_segment(dir);
    let buf = std::fs::read(&path).expect("read segment");
    let mut walk = walk_segment(&path);
    // Where the cut's damage ends: the record's end, or the end of the close records
    // after it (each clean close since it was written appended one), or of the seal the
    // last clean close wrote instead when a close record no longer fitted (`Writer::close`;
    // the next append then goes to a new segment, so a seal is only ever last here).
    let mut erase_end = None;
    if let Some(&(_, seal_end, KIND_SEAL)) = walk.records.last() {
        assert!(walk.recycled, "a close seals only a recycled segment");
        erase_end = Some(seal_end);
        walk.records.pop();
    }
    while let Some(&(_, close_end, KIND_CLOSE)) = walk.records.last() {
        assert!(walk.recycled, "close records only in recycled segments");
        erase_end = erase_end.or(Some(close_end));
        walk.records.pop();
    }
    let (start, end, kind) = walk
        .records
        .last()
        .copied()
        .expect("the newest segment holds the newest record");
    assert_ne!(kind, KIND_SEAL, "the newest segment is never sealed here");
    assert_ne!(kind, KIND_CLOSE, "a record follows the close record");
    let erase_end = erase_end.unwrap_or(end);
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
    if walk.recycled {
        let rest: Vec<u8> = match cut.zero_fill {
            true => vec![0u8; erase_end - at],
            // Every byte changed: the earlier life's bytes were anything but these.
            false => buf[at..erase_end].iter().map(|&b| b ^ 0x5a).collect(),
        };
        file.write_all_at(&rest, at as u64)
            .expect("garble the tail");
        let after_close =
            walk.records.len() >= 2 && walk.records[walk.records.len() - 2].2 == KIND_CLOSE;
        return match after_close {
            true => 0,
            false => (buf.len() - start) as u64,
        };
    }
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
        3 => (
            prop::option::weighted(0.5, (any::<u16>(), any::<bool>())
                .prop_map(|(at, zero_fill)| Cut { at, zero_fill })),
            prop::option::weighted(0.2, keep().prop_map(Keep)),
        )
            .prop_map(|(cut, keep)| Op::Reopen { cut, keep }),
        1 => prop::option::weighted(0.3, keep().prop_map(Keep))
            .prop_map(|keep| Op::ReadOnlyView { keep }),
        1 => Just(Op::Compact),
    ]
}

/// Operations for long histories of two tasks under retention: mostly commits, with
/// compactions, reopens that change `keep_checkpoints`, and read-only views with another
/// one. A compaction leaves a task's history "headless" when the active segment holds
/// deltas older than its fold base (they stay, the older records go); a reopen indexes
/// them again and a larger `keep` must then stop at the first snapshot.
fn retention_op() -> impl Strategy<Value = Op> {
    let task = || select(&TASKS[..2]);
    prop_oneof![
        12 => (task(), delta()).prop_map(|(task, delta)| Op::Commit { task, delta }),
        2 => (task(), seq()).prop_map(|(task, seq)| Op::Load { task, seq }),
        1 => (task(), 0usize..3).prop_map(|(task, rem)| Op::LoadLatestMatching { task, rem }),
        2 => (task(), seq(), fork_target())
            .prop_map(|(task, seq, new_task)| Op::Fork { task, seq, new_task }),
        1 => fork_target().prop_map(|task| Op::Delete { task }),
        1 => (task(), select(&CALLS[..]), select(&BLOBS[..]))
            .prop_map(|(task, call, args)| Op::BeginCall { task, call, tool: "search", args }),
        // Finished calls for retention to prune, often split across segments by the large
        // blobs.
        1 => (task(), select(&CALLS[..]), select(&BLOBS[..]))
            .prop_map(|(task, call, result)| Op::FinishCall { task, call, result }),
        1 => Just(Op::Stats),
        3 => Just(Op::Compact),
        3 => (
            prop::option::weighted(0.2, (any::<u16>(), any::<bool>())
                .prop_map(|(at, zero_fill)| Cut { at, zero_fill })),
            prop::option::weighted(0.5, keep().prop_map(Keep)),
        )
            .prop_map(|(cut, keep)| Op::Reopen { cut, keep }),
        2 => prop::option::weighted(0.8, keep().prop_map(Keep))
            .prop_map(|keep| Op::ReadOnlyView { keep }),
    ]
}

/// `keep_checkpoints`: mostly a small limit, so retention drops checkpoints constantly.
fn keep() -> impl Strategy<Value = Option<u32>> {
    prop_oneof![1 => Just(None), 3 => (1u32..=4).prop_map(Some)]
}

fn options(
    sync: SyncMode,
    snapshot_every: u32,
    keep_checkpoints: Option<u32>,
    cache_bytes: u64,
) -> Options {
    Options {
        sync,
        segment_bytes: 4096,
        snapshot_every,
        keep_checkpoints,
        cache_bytes,
        // Compaction runs only where `Op::Compact` says: a background pass would change
        // the record counts at times the model cannot know.
        auto_compact: false,
        ..Options::default()
    }
}

/// `cases` unless `PROPTEST_CASES` says otherwise (an explicit `cases` in a config
/// would otherwise shadow the variable).
fn config(cases: u32) -> ProptestConfig {
    let cases = env_u64("PROPTEST_CASES").map_or(cases, |c| {
        u32::try_from(c).expect("PROPTEST_CASES fits in a u32")
    });
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
        keep in keep(),
        // Off, a budget that holds a state or two (evictions), and the default.
        cache_bytes in select(vec![0u64, 400, agentwal::CACHE_BYTES_DEFAULT]),
        ops in prop::collection::vec(op(), 1..100),
    ) {
        Harness::new(options(SyncMode::Never, snapshot_every, keep, cache_bytes)).run(&ops);
    }
}

proptest! {
    #![proptest_config(config(32))]

    /// Durable commits: every acknowledged record survives, a cut loses only the last.
    #[test]
    fn store_matches_model_sync_always(
        keep in keep(),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let cache_bytes = agentwal::CACHE_BYTES_DEFAULT;
        Harness::new(options(SyncMode::Always, 3, keep, cache_bytes)).run(&ops);
    }
}

proptest! {
    #![proptest_config(config(64))]

    /// Retention across compactions and reopens, with `keep_checkpoints` changing.
    #[test]
    fn store_matches_model_retention(
        snapshot_every in select(vec![2u32, 3, 5]),
        keep in keep(),
        ops in prop::collection::vec(retention_op(), 1..150),
    ) {
        let cache_bytes = agentwal::CACHE_BYTES_DEFAULT;
        Harness::new(options(SyncMode::Never, snapshot_every, keep, cache_bytes)).run(&ops);
    }
}

#[cfg(feature = "tokio")]
proptest! {
    #![proptest_config(config(64))]

    /// The async API (`AsyncStore`) against the same model: its writes are deferred to
    /// the group commit's completions, its loads answered from the cache or on the
    /// blocking pool, and every answer must still be the model's.
    #[test]
    fn async_store_matches_model(
        sync in select(vec![SyncMode::Never, SyncMode::Always]),
        snapshot_every in select(vec![1u32, 3]),
        keep in keep(),
        cache_bytes in select(vec![0u64, agentwal::CACHE_BYTES_DEFAULT]),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        Harness::new(options(sync, snapshot_every, keep, cache_bytes)).via_async().run(&ops);
    }
}

// ---------------------------------------------------------------------------------------
// Regressions: minimal sequences the property found, replayed as plain tests.

fn replay(ops: &[Op]) {
    Harness::new(options(
        SyncMode::Never,
        3,
        None,
        agentwal::CACHE_BYTES_DEFAULT,
    ))
    .run(ops);
}
/// A clean close of a recycled segment with no room left for a close record seals it
/// (`Writer::close`), and the harness's cut of the last record took that seal for the
/// segment's last record ("the newest segment is never sealed here"): a gap in the
/// harness, not in the store, which the property found after a `Compact` had retired
/// files for rotations to recycle. The minimal sequence it found (`cache_bytes = 0`).
#[test]
fn regression_a_cut_after_a_close_that_sealed_a_recycled_segment() {
    let ops = [
        Op::Commit { task: "b", delta: AgentDelta { messages: vec![], set: BTreeMap::from([("scratch".to_string(), Value::Bool(false))]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::Commit { task: "d", delta: AgentDelta { messages: vec![Message { role: Role::System, content: "".into(), tool_calls: vec![], tool_call_id: None, data: None }, Message { role: Role::System, content: "aa   a".into(), tool_calls: vec![], tool_call_id: None, data: None }], set: BTreeMap::from([("scratch".to_string(), Value::Null)]), unset: vec![], metadata: BTreeMap::from([("retries".to_string(), Value::Bool(false))]) } },
        Op::Commit { task: "a", delta: AgentDelta { messages: vec![], set: BTreeMap::from([]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::Commit { task: "a", delta: AgentDelta { messages: vec![], set: BTreeMap::from([]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::CommitIf { task: "a", expected: Expected::Latest, delta: AgentDelta { messages: vec![], set: BTreeMap::from([]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::CommitIf { task: "c", expected: Expected::Latest, delta: AgentDelta { messages: vec![], set: BTreeMap::from([]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::Commit { task: "d", delta: AgentDelta { messages: vec![Message { role: Role::System, content: "a".into(), tool_calls: vec![ToolCall { id: "k1".into(), name: "search".into(), args: Value::Float(0.0) }], tool_call_id: None, data: None }, Message { role: Role::System, content: "".into(), tool_calls: vec![], tool_call_id: None, data: None }], set: BTreeMap::from([("phase".to_string(), Value::Bool(false)), ("step".to_string(), Value::List(vec![]))]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::Commit { task: "b", delta: AgentDelta { messages: vec![Message { role: Role::System, content: "aa a".into(), tool_calls: vec![ToolCall { id: "k1".into(), name: "search".into(), args: Value::Null }], tool_call_id: None, data: None }, Message { role: Role::System, content: " a".into(), tool_calls: vec![], tool_call_id: None, data: Some(Value::Float(0.0)) }], set: BTreeMap::from([("step".to_string(), Value::Map(BTreeMap::from([("phase".to_string(), Value::Float(0.0))])))]), unset: vec![], metadata: BTreeMap::from([("model".to_string(), Value::Null)]) } },
        Op::Commit { task: "f", delta: AgentDelta { messages: vec![], set: BTreeMap::from([]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::BeginCall { task: "b", call: "k1", tool: "search", args: Blob(b"") },
        Op::Compact,
        Op::Commit { task: "a", delta: AgentDelta { messages: vec![Message { role: Role::System, content: "".into(), tool_calls: vec![], tool_call_id: None, data: None }, Message { role: Role::System, content: "a ".into(), tool_calls: vec![ToolCall { id: "k1".into(), name: "search".into(), args: Value::Null }], tool_call_id: None, data: None }], set: BTreeMap::from([("phase".to_string(), Value::List(vec![Value::Null, Value::Float(0.0)]))]), unset: vec!["scratch".to_string()], metadata: BTreeMap::from([]) } },
        Op::BeginCall { task: "a", call: "k1", tool: "search", args: Blob(&[b'y'; 1200]) },
        Op::Commit { task: "f", delta: AgentDelta { messages: vec![Message { role: Role::System, content: " a  ".into(), tool_calls: vec![], tool_call_id: None, data: None }], set: BTreeMap::from([("n".to_string(), Value::List(vec![Value::Bool(false)]))]), unset: vec![], metadata: BTreeMap::from([("retries".to_string(), Value::Bool(false))]) } },
        Op::Fork { task: "d", seq: Seq::Existing(29), new_task: "g" },
        Op::Delete { task: "g" },
        Op::CommitIf { task: "f", expected: Expected::Latest, delta: AgentDelta { messages: vec![Message { role: Role::System, content: "a  a  ".into(), tool_calls: vec![ToolCall { id: "k1".into(), name: "search".into(), args: Value::Float(0.0) }], tool_call_id: None, data: None }], set: BTreeMap::from([("phase".to_string(), Value::Null)]), unset: vec![], metadata: BTreeMap::from([("model".to_string(), Value::Str("mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmm".into()))]) } },
        Op::Commit { task: "b", delta: AgentDelta { messages: vec![Message { role: Role::System, content: "   ".into(), tool_calls: vec![], tool_call_id: None, data: None }, Message { role: Role::System, content: "a  ".into(), tool_calls: vec![], tool_call_id: None, data: None }], set: BTreeMap::from([("phase".to_string(), Value::Bool(false))]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::Commit { task: "d", delta: AgentDelta { messages: vec![], set: BTreeMap::from([("step".to_string(), Value::List(vec![Value::Bool(false)]))]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::BeginCall { task: "c", call: "k1", tool: "search", args: Blob(&[b'y'; 1200]) },
        Op::Commit { task: "a", delta: AgentDelta { messages: vec![Message { role: Role::System, content: "".into(), tool_calls: vec![], tool_call_id: None, data: None }, Message { role: Role::System, content: "  ".into(), tool_calls: vec![ToolCall { id: "k1".into(), name: "search".into(), args: Value::Bool(false) }], tool_call_id: None, data: None }], set: BTreeMap::from([("step".to_string(), Value::Float(0.0))]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::BeginCall { task: "a", call: "k2", tool: "search", args: Blob(b"") },
        Op::Commit { task: "c", delta: AgentDelta { messages: vec![Message { role: Role::System, content: " ".into(), tool_calls: vec![], tool_call_id: None, data: None }], set: BTreeMap::from([("phase".to_string(), Value::Bool(false))]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::Fork { task: "b", seq: Seq::Existing(187), new_task: "g" },
        Op::Delete { task: "b" },
        Op::CommitIf { task: "f", expected: Expected::Latest, delta: AgentDelta { messages: vec![Message { role: Role::System, content: " a a  ".into(), tool_calls: vec![], tool_call_id: None, data: None }, Message { role: Role::System, content: "a".into(), tool_calls: vec![], tool_call_id: None, data: None }], set: BTreeMap::from([("scratch".to_string(), Value::List(vec![Value::Float(0.0)]))]), unset: vec![], metadata: BTreeMap::from([("model".to_string(), Value::Bool(false))]) } },
        Op::Commit { task: "a", delta: AgentDelta { messages: vec![Message { role: Role::System, content: "a aa ".into(), tool_calls: vec![], tool_call_id: None, data: None }], set: BTreeMap::from([("scratch".to_string(), Value::Bool(false))]), unset: vec![], metadata: BTreeMap::from([]) } },
        Op::Reopen { cut: Some(Cut { at: 0, zero_fill: false }), keep: None }
    ];
    Harness::new(options(SyncMode::Never, 3, None, 0)).run(&ops);
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
        Op::Reopen {
            cut: None,
            keep: None,
        },
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
    let mut h = Harness::new(options(
        SyncMode::Never,
        3,
        None,
        agentwal::CACHE_BYTES_DEFAULT,
    ));
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
    h.step(
        &Op::Reopen {
            cut: None,
            keep: None,
        },
        "reopen",
    );
}

/// `task_infos` reported a fork's origin from the index's memory of it, which outlives
/// the fork's checkpoint 1 under retention: with `keep_checkpoints: Some(1)` it said
/// `forked_from: Some(("b", 1))` while `list_checkpoints` no longer served seq 1, until a
/// compaction dropped seq 1's record and a reopen, which learns origins from that record,
/// said `None`. The answer depended on whether compaction and a reopen had happened; it
/// now follows seq 1's retention, as `list_checkpoints` does.
#[test]
fn regression_task_infos_forked_from_follows_retention() {
    let commit = |task| Op::Commit {
        task,
        delta: AgentDelta::default(),
    };
    let big_call = |task, call| Op::BeginCall {
        task,
        call,
        tool: "search",
        args: Blob(&[b'y'; 1200]),
    };
    let fork = Op::Fork {
        task: "b",
        seq: Seq::Exact(1),
        new_task: "a",
    };
    // a@1 (the fork) lands in a segment the large calls seal; compaction drops it.
    let ops = [
        commit("b"),
        fork,
        commit("a"),
        big_call("b", "k1"),
        big_call("b", "k2"),
        big_call("b", "k3"),
        big_call("a", "k1"),
        commit("a"),
        Op::Compact,
        Op::Reopen {
            cut: None,
            keep: None,
        },
    ];
    // Every checkpoint a snapshot: a@3 needs no older record.
    let mut h = Harness::new(options(
        SyncMode::Never,
        1,
        Some(1),
        agentwal::CACHE_BYTES_DEFAULT,
    ));
    for (i, op) in ops.iter().enumerate() {
        h.step(op, &format!("op #{i}: {op:?}"));
        check_task_infos(h.store(), &h.model, &format!("after op #{i}: {op:?}"));
    }
    // The reopened store no longer holds a@1: the origin is gone for good.
    assert!(
        h.model.tasks["a"].indexed_from > 1,
        "the setup must drop a@1"
    );
}

/// `max_age` retention, which the property leaves out (wall-clock time would make it
/// flaky there): checkpoints older than `max_age` are no longer served, the latest always
/// is, `fork` from a dropped one is refused, and all of it holds across a compaction and a
/// reopen, after which the history the log still holds starts mid-chain (headless).
#[test]
fn max_age_retention_across_compaction_and_reopen() {
    const MAX_AGE: std::time::Duration = std::time::Duration::from_millis(1000);
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options {
        max_age: Some(MAX_AGE),
        // The layout below (records per segment) is planned in bytes as encoded.
        compression: agentwal::Compression::None,
        ..options(SyncMode::Never, 3, None, agentwal::CACHE_BYTES_DEFAULT)
    };
    let commit =
        |store: &Store, task: &str, n: i64| store.commit(task, &AgentDelta::default().set("n", n));
    // Two of these fill a segment: rotations, so compaction has sealed segments to drop.
    let filler = |store: &Store, n: i64| {
        let delta = AgentDelta::default().meta("pad", "p".repeat(1500));
        store.commit("x", &delta.set("n", n))
    };
    let n_at = |store: &Store, task: &str, seq: u64| {
        let cp = store.load(task, seq).expect("load");
        cp.map(|cp| cp.state.vars["n"].clone())
    };
    let listed = |store: &Store, task: &str| -> Vec<(u64, bool)> {
        let list = store.list_checkpoints(task).expect("list_checkpoints");
        list.iter().map(|c| (c.seq, c.snapshot)).collect()
    };
    let store: Store = Store::open_with(dir.path(), options).expect("open");
    let ops = [("x", 1), ("x", 2), ("a", 1), ("a", 2), ("a", 3)];
    let ops = ops
        .into_iter()
        .chain([("x", 3), ("x", 4), ("a", 4), ("a", 5)]);
    for (task, n) in ops {
        let done = if task == "x" {
            filler(&store, n)
        } else {
            commit(&store, task, n)
        };
        done.expect("commit");
    }
    let all = [(1, false), (2, false), (3, true), (4, false), (5, false)];
    assert_eq!(listed(&store, "a"), all, "all young (snapshot_every 3)");
    std::thread::sleep(MAX_AGE + std::time::Duration::from_millis(100));
    commit(&store, "a", 6).expect("commit");
    commit(&store, "a", 7).expect("commit");
    // The layout the rest relies on: x@1, x@2 and a@1..3 in sealed segments; x@3, x@4,
    // a@4, a@5 (old deltas), a@6 (a snapshot: a@6's fold base) and a@7 in the active one.
    let active = records_in(&newest_segment(dir.path()));
    assert_eq!(active.len(), 6, "records in the active segment: {active:?}");
    let check = |store: &Store, ctx: &str| {
        assert_eq!(listed(store, "a"), [(6, true), (7, false)], "{ctx}: young");
        assert_eq!(
            listed(store, "x"),
            [(4, false)],
            "{ctx}: the latest is kept"
        );
        for seq in 1..=5 {
            assert_eq!(n_at(store, "a", seq), None, "{ctx}: a@{seq} is too old");
        }
        assert_eq!(n_at(store, "a", 6), Some(Value::Int(6)), "{ctx}");
        assert_eq!(n_at(store, "a", 7), Some(Value::Int(7)), "{ctx}");
        assert_eq!(n_at(store, "x", 3), None, "{ctx}");
        assert_eq!(n_at(store, "x", 4), Some(Value::Int(4)), "{ctx}");
        let unknown = store.load("a", 8).map_err(classify).err();
        let want = Fail::UnknownSeq {
            task: "a".into(),
            seq: 8,
            latest: 7,
        };
        assert_eq!(unknown, Some(want), "{ctx}");
        let matching = |n: i64| {
            let cp = store.load_latest_matching("a", |s| s.vars["n"] != Value::Int(n));
            cp.expect("load_latest_matching").map(|cp| cp.seq)
        };
        assert_eq!(matching(0), Some(7), "{ctx}");
        assert_eq!(matching(7), Some(6), "{ctx}");
        let only_old = store.load_latest_matching("a", |s| s.vars["n"] == Value::Int(5));
        assert_eq!(only_old.expect("load").map(|cp| cp.seq), None, "{ctx}");
        let refused = store.fork("a", 5, "f").map_err(classify);
        assert_eq!(refused, Err(Fail::InvalidArgument), "{ctx}: fork from a@5");
    };
    check(&store, "before compaction");
    // As a background pass does, leaving the active segment alone (`compact` seals it).
    store.compact_sealed_segments().expect("compact");
    check(&store, "after compaction");
    drop(store);
    // The log now holds a@4.. (a@4 a delta): served from the first snapshot, a@6.
    let store: Store = Store::open_with(dir.path(), options).expect("reopen");
    assert_eq!(
        store.recovery_report().records,
        6,
        "only the active segment's"
    );
    check(&store, "after reopen");
    let all: Store = Store::open_read_only(dir.path()).expect("read-only open");
    assert_eq!(listed(&all, "a"), [(6, true), (7, false)], "no retention");
    assert_eq!(n_at(&all, "a", 5), None, "a@5 cannot be rebuilt");
    drop(all);
    store.compact().expect("compact");
    check(&store, "after a second compaction");
    assert_eq!(store.fork("a", 6, "f").expect("fork"), 1);
    assert_eq!(n_at(&store, "f", 1), Some(Value::Int(6)));
}
