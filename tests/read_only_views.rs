//! A read-only handle serves the view it opened, for as long as it lives, while a writer
//! appends, rotates, compacts, deletes and forks beside it (DESIGN.md §5.4): every read
//! returns the record it was indexed at, or an error, never another record's data.
//!
//! The stress tests run for `AGENTWAL_RO_STRESS_SECS` seconds (default 3 each; CI uses the
//! default, `scripts/torture.sh` a longer run).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agentwal::{AgentDelta, AgentState, Message, Options, State, Store, Value};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// A fixed-size state: its seq and padding, so records of different seqs are the same size
/// and a stale offset lands exactly on another record.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct Padded {
    n: u64,
    pad: Vec<u8>,
}

impl State for Padded {
    type Delta = Padded;
    fn apply(&mut self, delta: &Padded) {
        *self = delta.clone();
    }
}

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
    std::env::var("AGENTWAL_RO_STRESS_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
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

/// What the writers acknowledged: per task, the state after each acknowledged seq.
type History = Mutex<HashMap<String, Vec<Option<AgentState>>>>;

fn record(history: &History, task: &str, seq: u64, state: AgentState) {
    let mut h = history.lock();
    let states = h.entry(task.to_string()).or_default();
    while states.len() <= seq as usize {
        states.push(None);
    }
    states[seq as usize] = Some(state);
}

/// The realistic loop of the issue: writers commit agent steps with small segments,
/// auto-compaction and explicit compactions; the main thread opens read-only handles (as
/// `agentwal show` does) and every state it loads must be one the writers acknowledged.
#[test]
fn read_only_opens_beside_a_compacting_writer_see_only_acknowledged_states() {
    for keep in [None, Some(2)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = Options {
            segment_bytes: 4096,
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
                    let mut state = AgentState::default();
                    let mut seq = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let delta = AgentDelta::default()
                            .message(Message::assistant(format!(
                                "{task} step {seq} {}",
                                "x".repeat(180)
                            )))
                            .set("i", Value::from(seq as i64 + 1));
                        state.apply(&delta);
                        seq = writer.commit(&task, &delta).expect("commit");
                        record(&history, &task, seq, state.clone());
                        if seq % 50 == 0 {
                            writer.compact().expect("compact");
                        }
                    }
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(stress_secs());
        let (mut opens, mut loads) = (0u64, 0u64);
        while Instant::now() < deadline {
            let reader: Store = match Store::open_read_only(dir.path()) {
                Ok(r) => r,
                // A scan can lose the race with compaction more times than it retries;
                // that is an honest "try again", never a wrong answer.
                Err(agentwal::Error::StoreChanged { .. }) => continue,
                Err(e) => panic!("read-only open failed: {e}"),
            };
            opens += 1;
            for task in reader.tasks().expect("tasks") {
                let latest = reader
                    .load_latest(&task)
                    .expect("load_latest on a pinned view");
                let Some(latest) = latest else { continue };
                let h = history.lock();
                let acked = h
                    .get(&task)
                    .and_then(|s| s.get(latest.seq as usize))
                    .and_then(|s| s.as_ref());
                // A commit can be durable (and visible) a moment before its commit call
                // returns and the test records it: then the seq is one past the history.
                if let Some(acked) = acked {
                    assert_eq!(
                        *latest.state, *acked,
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
        eprintln!("keep {keep:?}: {opens} read-only opens, {loads} loads checked");
        assert!(opens > 0 && loads > 0, "the loop checked nothing");
    }
}
