//! The in-memory model: what every task, seq and call should be, and how an error is
//! classified for comparison.

use std::collections::BTreeMap;

use agentwal::{AgentDelta, AgentState, Error, State};

// ---------------------------------------------------------------------------------------
// Outcomes, compared by variant and fields

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fail {
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

pub(crate) type Outcome<T> = Result<T, Fail>;

pub(crate) fn classify<T>(r: agentwal::Result<T>, what: &str) -> Outcome<T> {
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
pub(crate) struct CallModel {
    pub(crate) id: String,
    pub(crate) tool: String,
    pub(crate) args: Vec<u8>,
    pub(crate) result: Option<Vec<u8>>,
    /// The task's latest seq when the call finished: it finished before checkpoint
    /// `finished_at + 1`, and so before every later one.
    pub(crate) finished_at: Option<u64>,
    /// Pruned by a compaction pass: the writer's index hides it (no result, and its id
    /// is still taken while its records stay in the log).
    pub(crate) pruned: bool,
    /// Pruned, and a pass since may have dropped its records (then the id is free and a
    /// fresh open does not know it); unknown until an answer tells.
    pub(crate) maybe_dropped: bool,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct TaskModel {
    /// `states[i]`: the state as of seq `i + 1`.
    pub(crate) states: Vec<AgentState>,
    pub(crate) origin: Option<(String, u64)>,
    /// In the order they began.
    pub(crate) calls: Vec<CallModel>,
}

/// Every task here exists: it has a checkpoint or a tool call.
#[derive(Debug, Default)]
pub(crate) struct Model {
    pub(crate) tasks: BTreeMap<String, TaskModel>,
    pub(crate) keep: Option<u64>,
    pub(crate) fates: Fates,
}

/// How often an answer told a pruned call's fate, by what it told.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fates {
    /// Its records were still in the log.
    pub(crate) kept: u32,
    /// They had left it.
    pub(crate) dropped: u32,
}

impl Model {
    pub(crate) fn latest(&self, task: &str) -> u64 {
        self.tasks.get(task).map_or(0, |t| t.states.len() as u64)
    }

    /// Oldest seq retention serves (0 for a task without checkpoints).
    pub(crate) fn retained_from(&self, task: &str) -> u64 {
        retained_from(self.latest(task), self.keep)
    }

    pub(crate) fn commit(
        &mut self,
        task: &str,
        expected: Option<u64>,
        delta: &AgentDelta,
    ) -> Outcome<u64> {
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

    pub(crate) fn load(&self, task: &str, seq: u64) -> Outcome<Option<AgentState>> {
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

    pub(crate) fn fork(&mut self, task: &str, seq: u64, new_task: &str) -> Outcome<u64> {
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

    pub(crate) fn delete(&mut self, task: &str) -> Outcome<()> {
        match self.tasks.remove(task) {
            Some(_) => Ok(()),
            None => Err(Fail::UnknownTask(task.into())),
        }
    }

    /// `got`: the store's answer, which alone tells whether a pruned call that may have
    /// been dropped was (the id began afresh) or was not (refused: it is finished).
    pub(crate) fn begin_call(
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

    pub(crate) fn finish_call(&mut self, task: &str, call: &str, result: &[u8]) -> Outcome<()> {
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
    pub(crate) fn compacted(&mut self) {
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
    pub(crate) fn reopened(&mut self, result_of: &dyn Fn(&str, &str) -> Option<Vec<u8>>) {
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
pub(crate) fn retained_from(latest: u64, keep: Option<u64>) -> u64 {
    match (latest, keep) {
        (0, _) => 0,
        (_, None) => 1,
        (_, Some(k)) => latest.saturating_sub(k - 1).max(1),
    }
}
