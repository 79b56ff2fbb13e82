//! The in-memory model: what every task, call and record should be after each operation.

use std::collections::BTreeMap;

use agentwal::{AgentDelta, AgentState};

use crate::ops::{Fail, Outcome};

// ---------------------------------------------------------------------------------------
// The model

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CallModel {
    pub(crate) id: String,
    pub(crate) tool: String,
    pub(crate) args: Vec<u8>,
    pub(crate) result: Option<Vec<u8>>,
    /// Pruned by a compaction pass: finished before its task's oldest retained checkpoint
    /// (and still on disk: once its records go, the call goes from the model too).
    pub(crate) pruned: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TaskModel {
    /// Tells this life of the task id from earlier ones (deleted) and later ones.
    pub(crate) incarnation: u64,
    /// `states[i]` is the state as of seq `i + 1`.
    pub(crate) states: Vec<AgentState>,
    /// `snapshots[i]`: whether checkpoint `i + 1` was written as a full snapshot. The
    /// snapshot policy is the store's to choose (`check_checkpoints` checks its bound), so
    /// this is learnt from `list_checkpoints` right after each commit; what it decides is
    /// which records retention keeps as fold bases.
    pub(crate) snapshots: Vec<bool>,
    /// The oldest seq the writer's index still holds (1 until compaction prunes the
    /// checkpoints retention no longer needs; after a reopen, the oldest the log holds).
    pub(crate) indexed_from: u64,
    pub(crate) origin: Option<(String, u64)>,
    /// In the order they began.
    pub(crate) calls: Vec<CallModel>,
}

impl TaskModel {
    pub(crate) fn latest(&self) -> u64 {
        self.states.len() as u64
    }

    pub(crate) fn is_snapshot(&self, seq: u64) -> bool {
        self.snapshots[seq as usize - 1]
    }

    /// The oldest seq a fold can rebuild from what the index holds: its first, unless
    /// that is a delta after seq 1 (a "headless" history compaction left behind), then
    /// the first snapshot after it.
    pub(crate) fn first_loadable(&self) -> u64 {
        let from = self.indexed_from.max(1);
        if from == 1 || self.is_snapshot(from) {
            return from;
        }
        let snapshot = (from..=self.latest()).find(|&s| self.is_snapshot(s));
        snapshot.unwrap_or_else(|| panic!("a headless history without a snapshot: {self:?}"))
    }

    /// The oldest seq retention serves (0 for a task without checkpoints): the last `keep`,
    /// and never one the index can no longer rebuild.
    pub(crate) fn retained_from(&self, keep: Option<u32>) -> u64 {
        let latest = self.latest();
        if latest == 0 {
            return 0;
        }
        let by_keep = keep.map_or(1, |k| (latest + 1).saturating_sub(u64::from(k)).max(1));
        self.first_loadable().max(by_keep)
    }

    /// The oldest record compaction keeps: the fold base of the oldest retained seq.
    pub(crate) fn needed_from(&self, keep: Option<u32>) -> u64 {
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
pub(crate) enum Rec {
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
pub(crate) struct Model {
    pub(crate) tasks: BTreeMap<String, TaskModel>,
    /// The records in the log, oldest first. Each successful write appends one;
    /// compaction drops, from sealed segments, those of dead tasks, deletions, and the
    /// checkpoints older than their task's fold base of the oldest retained seq.
    pub(crate) log: Vec<Rec>,
    pub(crate) incarnations: u64,
    /// `keep_checkpoints` of the handle this model describes.
    pub(crate) keep: Option<u32>,
    /// The smallest `keep_checkpoints` any compaction ran with (`None`: unbounded, or no
    /// compaction yet). While `keep` is no larger, retention must serve exactly the last
    /// `keep` checkpoints: no record it needs can have been dropped.
    pub(crate) compacted_keep: Option<u32>,
}

impl Model {
    pub(crate) fn records(&self) -> u64 {
        self.log.len() as u64
    }

    /// The task's model, created (as a new incarnation) if missing.
    pub(crate) fn task_mut(&mut self, task: &str) -> &mut TaskModel {
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
    pub(crate) fn wrote(&mut self, task: Option<&str>) {
        self.log.push(match task.map(|t| &self.tasks[t]) {
            None => Rec::Delete,
            Some(t) => Rec::Checkpoint {
                incarnation: t.incarnation,
                seq: t.latest(),
            },
        });
    }

    /// Appends the begin (or, if `finish`, the finish) record of `call` of `task`.
    pub(crate) fn wrote_call(&mut self, task: &str, call: &str, finish: bool) {
        self.log.push(Rec::Call {
            incarnation: self.tasks[task].incarnation,
            call: call.into(),
            finish,
        });
    }

    /// Where `rec` is in the log (it must be there).
    pub(crate) fn position(&self, rec: &Rec) -> usize {
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
    pub(crate) fn compact(&mut self, segments: &[usize]) {
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
    pub(crate) fn reopened(&self, keep: Option<u32>) -> Model {
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

    pub(crate) fn latest(&self, task: &str) -> u64 {
        self.tasks.get(task).map_or(0, TaskModel::latest)
    }

    /// The oldest seq of `task` retention serves (0 if it has no checkpoint).
    pub(crate) fn retained_from(&self, task: &str) -> u64 {
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
    pub(crate) fn retained(&self, task: &str) -> std::ops::RangeInclusive<u64> {
        self.retained_from(task).max(1)..=self.latest(task)
    }

    pub(crate) fn task_ids(&self) -> Vec<String> {
        self.tasks.keys().cloned().collect()
    }

    pub(crate) fn commit(
        &mut self,
        task: &str,
        expected: Option<u64>,
        delta: &AgentDelta,
    ) -> Outcome<u64> {
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
    pub(crate) fn load(&self, task: &str, seq: u64) -> Outcome<Option<AgentState>> {
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
    pub(crate) fn load_latest_matching(
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

    pub(crate) fn fork(&mut self, task: &str, seq: u64, new_task: &str) -> Outcome<u64> {
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

    pub(crate) fn delete(&mut self, task: &str) -> Outcome<()> {
        if self.tasks.remove(task).is_none() {
            return Err(Fail::UnknownTask(task.into()));
        }
        self.wrote(None);
        Ok(())
    }

    pub(crate) fn begin_call(
        &mut self,
        task: &str,
        call: &str,
        tool: &str,
        args: &[u8],
    ) -> Outcome<()> {
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

    pub(crate) fn finish_call(&mut self, task: &str, call: &str, result: &[u8]) -> Outcome<()> {
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

    pub(crate) fn call_result(&self, task: &str, call: &str) -> Option<Vec<u8>> {
        self.tasks
            .get(task)
            .and_then(|t| t.calls.iter().find(|c| c.id == call && !c.pruned))
            .and_then(|c| c.result.clone())
    }

    pub(crate) fn pending(&self, task: &str) -> Vec<(String, String, Vec<u8>)> {
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
    pub(crate) fn checkpoints(&self) -> u64 {
        self.tasks
            .values()
            .map(|t| (t.latest() + 1).saturating_sub(t.indexed_from.max(1)))
            .sum()
    }
}

pub(crate) fn matches_rem(state: &AgentState, rem: usize) -> bool {
    (state.messages.len() + state.vars.len()) % 3 == rem
}
