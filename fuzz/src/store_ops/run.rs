//! Running the operations on a real store and on the model, comparing every answer, and
//! the sweeps after each reopen, compaction and read-only view.

use std::path::PathBuf;

use agentwal::{AgentDelta, Options, Store, SyncMode};

use super::OPS_MAX;
use super::damage::damage_tail;
use super::model::{Fail, Fates, Model, classify};
#[cfg(test)]
use super::ops::DeltaSpec;
use super::ops::{ExpectedSpec, Input, Op, pick};
use super::{BLOBS, CALLS, TASKS, TOOLS};

// ---------------------------------------------------------------------------------------
// The run

pub(crate) struct Run {
    pub(crate) dir: PathBuf,
    pub(crate) options: Options,
    pub(crate) store: Option<Store>,
    pub(crate) model: Model,
    /// Compaction passes run so far; picks the shape of the next (`Op::Compact`).
    pub(crate) compactions: u32,
}

/// Runs `input`; returns what answers told of pruned calls' fates.
pub(crate) fn run(input: &Input) -> Fates {
    let scratch = super::super::scratch_dir();
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
    pub(crate) fn store(&self) -> &Store {
        self.store.as_ref().expect("the store is open")
    }

    pub(crate) fn reopen(&mut self, what: &str) -> agentwal::RecoveryReport {
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

    pub(crate) fn apply(&mut self, op: &Op, what: &str) {
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
    pub(crate) fn sweep(&self, store: &Store, retention: bool, what: &str) {
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
