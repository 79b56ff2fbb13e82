//! The harness: runs each operation on the store (blocking or async) and on the model,
//! and compares the answers.

use agentwal::{AgentDelta, Options, Store};
use tempfile::TempDir;

use crate::checks::{check_all, check_checkpoints, latest_of, pending_of};
use crate::model::{Model, matches_rem};
use crate::ops::{Cut, Expected, Fail, Keep, Op, Outcome, classify};
use crate::segments::{cut_last_record, records_per_segment};

// ---------------------------------------------------------------------------------------
// The harness

pub(crate) struct Harness {
    pub(crate) dir: TempDir,
    pub(crate) options: Options,
    pub(crate) store: Option<Store>,
    pub(crate) model: Model,
    /// The model before the newest record in the log, while that is known.
    pub(crate) undo: Option<Model>,
    /// Counters the store's `stats()` must report for the current handle.
    pub(crate) commits: u64,
    pub(crate) appends: u64,
    /// `Some`: the writes and loads go through the async API on this runtime.
    pub(crate) runtime: Option<Runtime>,
}

/// The runtime the async API runs on (without the `tokio` feature, none can exist).
#[cfg(feature = "tokio")]
pub(crate) type Runtime = tokio::runtime::Runtime;

#[cfg(not(feature = "tokio"))]
pub(crate) enum Runtime {}

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
    pub(crate) fn new(options: Options) -> Self {
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
    pub(crate) fn via_async(mut self) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        self.runtime = Some(rt);
        self
    }

    pub(crate) fn store(&self) -> &Store {
        self.store.as_ref().expect("store is open")
    }

    pub(crate) fn run(&mut self, ops: &[Op]) {
        for (i, op) in ops.iter().enumerate() {
            let ctx = format!("op #{i}: {op:?}");
            self.step(op, &ctx);
        }
        check_all(self.store(), &self.model, "after the last op");
    }

    /// Whether this commit lends its delta (`commit`, `commit_if`, or the async API) rather
    /// than hand it over (`commit_owned`, every other commit of the blocking API): both
    /// must give the model's answer.
    fn lends_delta(&self) -> bool {
        self.runtime.is_some() || self.commits.is_multiple_of(2)
    }

    pub(crate) fn step(&mut self, op: &Op, ctx: &str) {
        let before = self.model.clone();
        let store = self.store.clone().expect("store is open");
        match op {
            Op::Commit { task, delta } => {
                let want = self.model.commit(task, None, delta);
                let got = match self.lends_delta() {
                    true => api!(self, store, commit(task, delta)),
                    false => store.commit_owned(task, None, delta.clone()),
                }
                .map_err(classify);
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
                let got = match self.lends_delta() {
                    true => api!(self, store, commit_if(task, expected, delta)),
                    false => store.commit_owned(task, Some(expected), delta.clone()),
                }
                .map_err(classify);
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
    pub(crate) fn learn_snapshot(&mut self, task: &str, outcome: &Outcome<u64>, ctx: &str) {
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

    pub(crate) fn reopen(&mut self, cut: Option<Cut>, keep: Option<Keep>, ctx: &str) {
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
    pub(crate) fn read_only_view(&mut self, keep: Option<Keep>, ctx: &str) {
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
