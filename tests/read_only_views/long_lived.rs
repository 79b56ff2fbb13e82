//! Long-lived read-only handles serve the view they opened, checked against a model,
//! across appends, rotations, compactions, deletes and forks.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common::rng::Rng;
use agentwal::{AgentDelta, AgentState, Message, Options, State, Store, Value};

use crate::stress_secs;

/// What the writer acknowledged, per live task: its state after each seq (index seq - 1)
/// and its calls (result once finished).
#[derive(Clone, Default)]
pub(crate) struct Model {
    pub(crate) tasks: BTreeMap<String, TaskModel>,
    /// The writer's `keep_checkpoints`.
    pub(crate) keep: Option<u32>,
}

#[derive(Clone, Default)]
pub(crate) struct TaskModel {
    pub(crate) states: Vec<AgentState>,
    pub(crate) calls: BTreeMap<String, Option<Vec<u8>>>,
    /// Per finished call, how many checkpoints the task had when it finished.
    pub(crate) finished_after: BTreeMap<String, u64>,
}

impl TaskModel {
    /// Whether the writer's compaction may have dropped finished call `call_id`: with
    /// retention, one that finished before the task's oldest retained checkpoint
    /// (docs/store.md §4; the writer never reopens, so that is `latest - keep + 1`).
    pub(crate) fn may_be_pruned(&self, keep: Option<u32>, call_id: &str) -> bool {
        let (Some(keep), Some(&after)) = (keep, self.finished_after.get(call_id)) else {
            return false;
        };
        let latest = self.states.len() as u64;
        after < (latest + 1).saturating_sub(u64::from(keep)).max(1)
    }
}

/// A read-only handle and the model as it stood when the handle opened.
pub(crate) struct Reader {
    pub(crate) store: Store,
    pub(crate) seen: Model,
    pub(crate) opened_at_step: usize,
}

/// Every answer `reader` gives is the one its view holds: each listed checkpoint loads as
/// the acknowledged state, the latest is the latest, every call result is the one
/// recorded, pending calls are the pending ones. No error, no other record's data.
fn check_reader(reader: &Reader, step: usize) {
    let at = format!(
        "reader opened at step {} checked at step {step}",
        reader.opened_at_step
    );
    let tasks = reader.store.tasks().expect("tasks");
    let expected: Vec<&String> = reader.seen.tasks.keys().collect();
    assert_eq!(tasks.iter().collect::<Vec<_>>(), expected, "{at}: tasks");
    for (task, model) in &reader.seen.tasks {
        let listed = reader.store.list_checkpoints(task).expect("list");
        assert!(!listed.is_empty(), "{at}: {task} lists no checkpoint");
        for info in &listed {
            let loaded = reader.store.load(task, info.seq);
            let loaded = loaded.unwrap_or_else(|e| panic!("{at}: load({task}, {}): {e}", info.seq));
            let state =
                loaded.unwrap_or_else(|| panic!("{at}: {task} {} listed, not loaded", info.seq));
            assert_eq!(
                *state.state,
                model.states[info.seq as usize - 1],
                "{at}: {task} seq {}",
                info.seq
            );
        }
        let latest = reader
            .store
            .load_latest(task)
            .expect("load_latest")
            .expect("latest");
        assert_eq!(
            latest.seq,
            model.states.len() as u64,
            "{at}: {task} latest seq"
        );
        for (call_id, result) in &model.calls {
            let got = reader.store.call_result(task, call_id);
            let got = got.unwrap_or_else(|e| panic!("{at}: call_result({task}, {call_id}): {e}"));
            if got.is_none() && model.may_be_pruned(reader.seen.keep, call_id) {
                continue;
            }
            assert_eq!(got.as_ref(), result.as_ref(), "{at}: {task} {call_id}");
        }
        let pending: Vec<String> = (reader
            .store
            .pending_calls(task)
            .expect("pending")
            .into_iter())
        .map(|p| p.call_id)
        .collect();
        let mut expected: Vec<String> = (model.calls.iter())
            .filter(|(_, r)| r.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        let mut sorted = pending.clone();
        sorted.sort();
        expected.sort();
        assert_eq!(sorted, expected, "{at}: {task} pending calls");
    }
}

/// One writer and up to four read-only handles of different ages in one thread, so each
/// handle's view is known exactly: the writer commits, journals calls, forks, deletes,
/// rotates and compacts (explicitly and in the background); every few steps each handle
/// is checked against the model as it stood when the handle opened.
#[test]
fn long_lived_read_only_handles_serve_their_view_across_compactions() {
    let deadline = Instant::now() + Duration::from_secs(stress_secs());
    let mut seed = 1u64;
    let mut checks = 0u64;
    while seed == 1 || Instant::now() < deadline {
        checks += run_handles_against_model(seed, &deadline);
        seed += 1;
    }
    eprintln!("{} seeds, {checks} handle checks", seed - 1);
}

fn run_handles_against_model(seed: u64, deadline: &Instant) -> u64 {
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options {
        segment_bytes: 8192,
        keep_checkpoints: [None, Some(1), Some(3)][rng.below(3) as usize],
        snapshot_every: 1 + rng.below(8) as u32,
        auto_compact: rng.below(2) == 0,
        ..Options::default()
    };
    let writer: Store = Store::open_with(dir.path(), options).expect("open");
    let mut model = Model {
        keep: options.keep_checkpoints,
        ..Model::default()
    };
    let mut readers: Vec<Reader> = Vec::new();
    let mut checks = 0;
    let mut next_task = 0u64;
    for step in 0..600 {
        let names: Vec<String> = model.tasks.keys().cloned().collect();
        let pick = |rng: &mut Rng| names[rng.below(names.len() as u64) as usize].clone();
        match rng.below(100) {
            0..=54 if !names.is_empty() || step == 0 => {
                let task = match rng.below(4) == 0 || names.is_empty() {
                    true => {
                        next_task += 1;
                        format!("task-{}", next_task % 7)
                    }
                    false => pick(&mut rng),
                };
                let delta = AgentDelta::default()
                    .message(Message::user(format!(
                        "{task} step {step} {}",
                        "y".repeat(rng.below(200) as usize)
                    )))
                    .set("step", Value::from(step as i64));
                let seq = writer.commit(&task, &delta).expect("commit");
                let t = model.tasks.entry(task).or_default();
                let mut state = t.states.last().cloned().unwrap_or_default();
                state.apply(&delta);
                t.states.push(state);
                assert_eq!(seq, t.states.len() as u64);
            }
            55..=69 if !names.is_empty() => {
                let task = pick(&mut rng);
                let t = model.tasks.get_mut(&task).expect("task");
                let pending: Vec<String> = (t.calls.iter())
                    .filter(|(_, r)| r.is_none())
                    .map(|(id, _)| id.clone())
                    .collect();
                if let Some(id) = pending.first().filter(|_| rng.below(2) == 0) {
                    let result = format!("result of {id} {}", rng.below(1000)).into_bytes();
                    writer.finish_call(&task, id, &result).expect("finish");
                    t.calls.insert(id.clone(), Some(result));
                    t.finished_after.insert(id.clone(), t.states.len() as u64);
                } else {
                    let id = format!("call-{step}");
                    writer
                        .begin_call(&task, &id, "tool", id.as_bytes())
                        .expect("begin");
                    t.calls.insert(id, None);
                }
            }
            70..=76 if !names.is_empty() => {
                let task = pick(&mut rng);
                let new_task = format!("fork-{step}");
                let seq = model.tasks[&task].states.len() as u64;
                // A state larger than a segment forks too: its snapshot gets a segment
                // of its own.
                if let Err(e) = writer.fork(&task, seq, &new_task) {
                    panic!("fork: {e}");
                }
                let state = model.tasks[&task].states[seq as usize - 1].clone();
                model.tasks.insert(
                    new_task,
                    TaskModel {
                        states: vec![state],
                        ..TaskModel::default()
                    },
                );
            }
            77..=82 if !names.is_empty() => {
                let task = pick(&mut rng);
                writer.delete_task(&task).expect("delete");
                model.tasks.remove(&task);
            }
            83..=89 => {
                writer.compact().expect("compact");
            }
            _ => {
                if readers.len() == 4 {
                    readers.remove(rng.below(4) as usize);
                }
                let store = Store::open_read_only(dir.path()).expect("open read-only");
                readers.push(Reader {
                    store,
                    seen: model.clone(),
                    opened_at_step: step,
                });
            }
        }
        if step.is_multiple_of(10) {
            for reader in &readers {
                check_reader(reader, step);
                checks += 1;
            }
        }
        if seed > 1 && Instant::now() > *deadline {
            break;
        }
    }
    for reader in &readers {
        check_reader(reader, usize::MAX);
        checks += 1;
    }
    checks
}
