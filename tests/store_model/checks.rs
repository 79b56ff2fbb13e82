//! Whole-store checks after each step: checkpoints, pending calls and task infos against
//! the model.

use agentwal::log::RECORD_HEADER_BYTES;
use agentwal::{AgentState, Store};

use crate::model::{CallModel, Model, matches_rem};
use crate::ops::{CALLS, TASKS, classify};

pub(crate) fn latest_of(model: &Model, task: &str) -> Option<(u64, AgentState)> {
    let t = model.tasks.get(task)?;
    Some((t.states.len() as u64, t.states.last()?.clone()))
}

pub(crate) fn pending_of(store: &Store, task: &str) -> Vec<(String, String, Vec<u8>)> {
    store
        .pending_calls(task)
        .expect("pending_calls")
        .into_iter()
        .map(|p| (p.call_id, p.tool, p.args))
        .collect()
}

/// `list_checkpoints` against the model, plus the snapshot policy's bound: never
/// `snapshot_every` deltas in a row (states here are far too small to skip a snapshot).
pub(crate) fn check_checkpoints(store: &Store, model: &Model, task: &str, ctx: &str) {
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
pub(crate) fn check_all(store: &Store, model: &Model, ctx: &str) {
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
pub(crate) fn check_task_infos(store: &Store, model: &Model, ctx: &str) {
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
