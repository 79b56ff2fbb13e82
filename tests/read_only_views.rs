//! A read-only handle serves the view it opened, for as long as it lives, while a writer
//! appends, rotates, compacts, deletes and forks beside it (docs/log.md §3.4): every read
//! returns the record it was indexed at, or an error, never another record's data.
//!
//! The stress tests run for `AGENTWAL_RO_STRESS_SECS` seconds (default 3 each; CI uses the
//! default, `scripts/torture.sh` a longer run).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agentwal::{AgentDelta, AgentState, Message, Options, State, Store, Value};
use common::env::env_u64;
use common::rng::Rng;
use common::states::Padded;
use parking_lot::Mutex;

/// A state of fixed size: records of different seqs are the same size, so a stale offset
/// lands exactly on another record.
fn padded(n: u64) -> Padded {
    Padded {
        n,
        pad: vec![7u8; 300],
    }
}

fn small_segments() -> Options {
    Options {
        segment_bytes: 4096,
        snapshot_every: 1,
        auto_compact: false,
        ..Options::default()
    }
}

fn stress_secs() -> u64 {
    env_u64("AGENTWAL_RO_STRESS_SECS").unwrap_or(3)
}

#[test]
fn checkpoints_read_after_a_compaction_are_the_ones_indexed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let writer: Store<Padded> = Store::open_with(dir.path(), small_segments()).expect("open");
    for n in 1..=120 {
        assert_eq!(writer.commit("t", &padded(n)).expect("commit"), n);
    }
    let reader: Store<Padded> = Store::open_read_only(dir.path()).expect("open read-only");
    // Deleting the task makes every segment dead: compaction rewrites and deletes them.
    writer.delete_task("t").expect("delete");
    writer.commit("u", &padded(0)).expect("commit");
    writer.compact().expect("compact");
    for n in 1..=120 {
        let loaded = reader.load("t", n).expect("a pinned view always reads");
        let state = loaded.expect("checkpoint in the view").state;
        assert_eq!(state.n, n, "load(t, {n}) returned another record's state");
    }
}

#[test]
fn checkpoints_read_after_retention_compaction_are_the_ones_indexed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options {
        keep_checkpoints: Some(2),
        ..small_segments()
    };
    let writer: Store<Padded> = Store::open_with(dir.path(), options).expect("open");
    for n in 1..=120 {
        writer.commit("t", &padded(n)).expect("commit");
    }
    let reader: Store<Padded> = Store::open_read_only(dir.path()).expect("open read-only");
    writer.compact().expect("compact");
    for n in 1..=120 {
        match reader.load("t", n).expect("a pinned view always reads") {
            Some(c) => assert_eq!(c.state.n, n, "load(t, {n}) returned another state"),
            None => assert!(n < 119, "retained checkpoint {n} missing"),
        }
    }
    let latest = reader.load_latest("t").expect("load").expect("latest");
    assert_eq!(latest.state.n, 120);
}

#[test]
fn call_results_read_after_a_compaction_are_the_ones_indexed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let writer: Store<Padded> = Store::open_with(dir.path(), small_segments()).expect("open");
    writer.commit("t", &padded(1)).expect("commit");
    for i in 100..=300 {
        let id = format!("call-{i}");
        writer.begin_call("t", &id, "tool", b"args").expect("begin");
        writer
            .finish_call("t", &id, format!("result-{i}").as_bytes())
            .expect("finish");
    }
    let reader: Store<Padded> = Store::open_read_only(dir.path()).expect("open read-only");
    writer.delete_task("t").expect("delete");
    writer.commit("u", &padded(0)).expect("commit");
    writer.compact().expect("compact");
    for i in 100..=300 {
        let id = format!("call-{i}");
        let result = reader
            .call_result("t", &id)
            .expect("a pinned view always reads");
        assert_eq!(
            result.as_deref(),
            Some(format!("result-{i}").as_bytes()),
            "call_result(t, {id}) returned another call's result"
        );
    }
}

/// What the writers acknowledged: per task, its latest acknowledged seq. The state at
/// each seq follows from [`step_delta`], so the test keeps no states: keeping one per seq
/// grew as the square of the steps and, in the long run (60 s), ran out of memory.
type History = Mutex<HashMap<String, u64>>;

/// The delta a writer commits as `task`'s seq `seq + 1`.
fn step_delta(task: &str, seq: u64) -> AgentDelta {
    AgentDelta::default()
        .message(Message::assistant(format!(
            "{task} step {seq} {}",
            "x".repeat(180)
        )))
        .set("i", Value::from(seq as i64 + 1))
}

/// The reader's expected states, one per task, folded forward from [`step_delta`] as the
/// seqs it loads advance (a task's latest seq never goes back).
#[derive(Default)]
struct Expected(HashMap<String, (u64, AgentState)>);

impl Expected {
    /// `task`'s state at `seq`.
    fn at(&mut self, task: &str, seq: u64) -> &AgentState {
        let (at, state) = self.0.entry(task.to_string()).or_default();
        if *at > seq {
            (*at, *state) = (0, AgentState::default());
        }
        while *at < seq {
            state.apply(&step_delta(task, *at));
            *at += 1;
        }
        state
    }
}

/// The realistic loop: writers commit agent steps with small segments,
/// auto-compaction and explicit compactions; the main thread opens read-only handles (as
/// `agentwal show` does) and every state it loads must be one the writers acknowledged.
#[test]
fn read_only_opens_beside_a_compacting_writer_see_only_acknowledged_states() {
    for (segment_bytes, keep) in [(4096, None), (64 << 10, Some(2))] {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = Options {
            segment_bytes,
            keep_checkpoints: keep,
            auto_compact: true,
            ..Options::default()
        };
        let writer: Store = Store::open_with(dir.path(), options).expect("open");
        let history: Arc<History> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (writer, history, stop) = (writer.clone(), history.clone(), stop.clone());
                std::thread::spawn(move || {
                    let task = format!("task-{t}");
                    let mut seq = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        seq = writer
                            .commit(&task, &step_delta(&task, seq))
                            .expect("commit");
                        history.lock().insert(task.clone(), seq);
                        if seq.is_multiple_of(50) {
                            writer.compact().expect("compact");
                        }
                    }
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(stress_secs());
        let (mut opens, mut loads, mut changed) = (0u64, 0u64, 0u64);
        let mut expected = Expected::default();
        while Instant::now() < deadline {
            let reader: Store = match Store::open_read_only(dir.path()) {
                Ok(r) => r,
                // A scan can lose the race with compaction more times than it retries;
                // that is an honest "try again", never a wrong answer.
                Err(agentwal::Error::StoreChanged { .. }) => {
                    changed += 1;
                    continue;
                }
                Err(e) => panic!("read-only open failed: {e}"),
            };
            opens += 1;
            for task in reader.tasks().expect("tasks") {
                let latest = reader
                    .load_latest(&task)
                    .expect("load_latest on a pinned view");
                let Some(latest) = latest else { continue };
                let acked = history.lock().get(&task).copied().unwrap_or(0);
                // A commit can be durable (and visible) a moment before its commit call
                // returns and the test records it: then the seq is one past the history.
                if latest.seq <= acked {
                    assert!(
                        *latest.state == *expected.at(&task, latest.seq),
                        "{task} seq {} is not the state acknowledged",
                        latest.seq
                    );
                    loads += 1;
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().expect("writer thread");
        }
        eprintln!(
            "{segment_bytes} B segments, keep {keep:?}: {opens} read-only opens, \
             {loads} loads checked, {changed} opens gave up (StoreChanged)"
        );
        assert!(opens > 0 && loads > 0, "the loop checked nothing");
    }
}

/// What the writer acknowledged, per live task: its state after each seq (index seq - 1)
/// and its calls (result once finished).
#[derive(Clone, Default)]
struct Model {
    tasks: BTreeMap<String, TaskModel>,
    /// The writer's `keep_checkpoints`.
    keep: Option<u32>,
}

#[derive(Clone, Default)]
struct TaskModel {
    states: Vec<AgentState>,
    calls: BTreeMap<String, Option<Vec<u8>>>,
    /// Per finished call, how many checkpoints the task had when it finished.
    finished_after: BTreeMap<String, u64>,
}

impl TaskModel {
    /// Whether the writer's compaction may have dropped finished call `call_id`: with
    /// retention, one that finished before the task's oldest retained checkpoint
    /// (docs/store.md §4; the writer never reopens, so that is `latest - keep + 1`).
    fn may_be_pruned(&self, keep: Option<u32>, call_id: &str) -> bool {
        let (Some(keep), Some(&after)) = (keep, self.finished_after.get(call_id)) else {
            return false;
        };
        let latest = self.states.len() as u64;
        after < (latest + 1).saturating_sub(u64::from(keep)).max(1)
    }
}

/// A read-only handle and the model as it stood when the handle opened.
struct Reader {
    store: Store,
    seen: Model,
    opened_at_step: usize,
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

/// Segments larger than the copy threshold are pinned by their memory map, the final one by
/// its open file: after the writer compacts (renaming a new file over a segment and deleting
/// the ones below it), every record the handle indexed reads back as it was.
#[test]
fn mapped_and_open_segments_stay_readable_after_compaction() {
    use agentwal::log::{Log, LogOptions, RecordPos};
    let dir = tempfile::tempdir().expect("tempdir");
    let options = LogOptions {
        sync: agentwal::SyncMode::Never,
        segment_bytes: 2 << 20,
        ..LogOptions::default()
    };
    let writer = Log::open(dir.path(), options).expect("open");
    let payload = |i: u32| vec![(i % 251) as u8; 60_000 + i as usize];
    let mut appended = Vec::new();
    for i in 0..110 {
        appended.push((writer.append(1, &payload(i)).expect("append").pos, i));
    }
    writer.flush().expect("flush");
    let mut seen = Vec::new();
    let reader = Log::open_read_only(dir.path(), options, |rec| {
        seen.push(rec.pos());
        Ok(())
    })
    .expect("open read-only");
    assert_eq!(seen, appended.iter().map(|(p, _)| *p).collect::<Vec<_>>());
    // Keep one record of the first segment; everything else the writer sealed goes.
    let hooks = KeepOnly {
        lock: parking_lot::RwLock::new(()),
        at: Mutex::new(appended[0].0),
    };
    let done = writer
        .compact(true, &hooks)
        .expect("compact")
        .expect("a pass ran");
    assert!(
        done.removed.len() >= 2,
        "the test needs sealed segments of more than 1 MiB"
    );
    assert_ne!(*hooks.at.lock(), appended[0].0, "the kept record moved");
    assert_eq!(
        writer
            .read(*hooks.at.lock())
            .expect("the writer reads it there"),
        payload(0)
    );
    for (pos, i) in &appended {
        let read = reader.read(*pos).expect("a pinned segment reads");
        assert_eq!(read, payload(*i), "record {i} at {pos:?}");
    }
    let elsewhere = RecordPos {
        segment_id: 1 << 40,
        offset: 40,
    };
    assert!(matches!(
        reader.read(elsewhere),
        Err(agentwal::Error::StoreChanged { .. })
    ));
}

/// Compaction hooks of an index that holds one record.
struct KeepOnly {
    lock: parking_lot::RwLock<()>,
    /// Where the one indexed record is now.
    at: Mutex<agentwal::log::RecordPos>,
}

impl agentwal::log::CompactionHooks for KeepOnly {
    fn positions_lock(&self) -> &parking_lot::RwLock<()> {
        &self.lock
    }
    fn live_records(
        &self,
        sealed: &dyn Fn(agentwal::log::RecordPos) -> bool,
    ) -> (Vec<agentwal::log::RecordPos>, u64) {
        let at = *self.at.lock();
        (vec![at].into_iter().filter(|p| sealed(*p)).collect(), 0)
    }
    fn orphan(
        &self,
        vanishes: &dyn Fn(agentwal::log::RecordPos) -> bool,
        moved: &HashMap<agentwal::log::RecordPos, agentwal::log::Moved>,
    ) -> Option<agentwal::log::RecordPos> {
        let at = *self.at.lock();
        (vanishes(at) && !moved.contains_key(&at)).then_some(at)
    }
    fn remap(&self, moved: &HashMap<agentwal::log::RecordPos, agentwal::log::Moved>) {
        let mut at = self.at.lock();
        if let Some(new) = moved.get(&*at) {
            *at = new.pos;
        }
    }
}
