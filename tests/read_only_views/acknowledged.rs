//! Read-only opens beside a compacting writer see only acknowledged states.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agentwal::{AgentDelta, AgentState, Message, Options, State, Store, Value};
use parking_lot::Mutex;

use crate::stress_secs;

/// What the writers acknowledged: per task, its latest acknowledged seq. The state at
/// each seq follows from [`step_delta`], so the test keeps no states: keeping one per seq
/// grew as the square of the steps and, in the long run (60 s), ran out of memory.
pub(crate) type History = Mutex<HashMap<String, u64>>;

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
pub(crate) struct Expected(pub(crate) HashMap<String, (u64, AgentState)>);

impl Expected {
    /// `task`'s state at `seq`.
    pub(crate) fn at(&mut self, task: &str, seq: u64) -> &AgentState {
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
