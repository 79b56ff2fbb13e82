//! The workload itself: what each task's steps change, deterministically, so every
//! backend commits the same deltas and runs compare.

use std::collections::BTreeMap;

use agentwal::{AgentDelta, AgentState, Message, State, Value};

const WORDS: [&str; 64] = [
    "the", "agent", "tool", "result", "search", "query", "file", "page", "token", "model", "plan",
    "step", "retry", "cache", "index", "vector", "document", "summary", "context", "memory",
    "observe", "action", "error", "status", "value", "return", "request", "response", "latency",
    "budget", "window", "prompt", "answer", "source", "record", "check", "update", "branch",
    "commit", "merge", "review", "test", "build", "deploy", "metric", "trace", "span", "event",
    "queue", "worker", "thread", "lock", "batch", "flush", "sync", "disk", "write", "read",
    "table", "row", "column", "schema", "user", "report",
];
const TOOLS: [&str; 6] = [
    "web_search",
    "read_file",
    "run_sql",
    "http_get",
    "python",
    "write_file",
];
const PHASES: [&str; 3] = ["plan", "act", "observe"];

/// splitmix64: deterministic pseudo-random numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// About `bytes` bytes of word salad.
    fn text(&mut self, bytes: usize) -> String {
        let mut s = String::with_capacity(bytes + 16);
        while s.len() < bytes {
            if !s.is_empty() {
                s.push_str(if self.below(12) == 0 { ". " } else { " " });
            }
            s.push_str(WORDS[self.below(WORDS.len())]);
        }
        s.truncate(bytes);
        s
    }
}

/// A task id as agent frameworks make them (UUID-shaped, 36 bytes).
pub fn task_id(task: usize) -> String {
    let mut rng = Rng(0xA6E7_0000 ^ task as u64);
    let (a, b) = (rng.next(), rng.next());
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xFFFF,
        a & 0xFFF,
        b >> 52,
        b & 0xFFFF_FFFF_FFFF
    )
}

/// What step `step` of task `task` changes.
pub fn make_delta(task: usize, step: usize) -> AgentDelta {
    let mut rng = Rng((task as u64) << 32 | step as u64);
    let tool = TOOLS[rng.below(TOOLS.len())];
    let call_id = format!("call_{:016x}", rng.next());
    let args = Value::Map(BTreeMap::from([
        ("query".to_string(), Value::Str(rng.text(90))),
        ("limit".to_string(), Value::Int(10)),
    ]));
    let assistant = Message::assistant(rng.text(140)).with_tool_call(call_id.clone(), tool, args);
    let result = Message::tool(call_id, rng.text(1500));
    AgentDelta::default()
        .message(assistant)
        .message(result)
        .set("phase", PHASES[step % PHASES.len()])
        .set("step", step as i64)
        .set("last_tool", tool)
}

/// The state of task `task` after `steps` steps.
pub fn expected_state(task: usize, steps: usize) -> AgentState {
    let mut state = AgentState::default();
    for step in 0..steps {
        state.apply(&make_delta(task, step));
    }
    state
}

/// Bytes of the whole run's deltas: (postcard, JSON).
pub fn delta_payload(threads: usize, steps: usize) -> (u64, u64) {
    let (mut postcard_bytes, mut json_bytes) = (0, 0);
    for task in 0..threads {
        for step in 0..steps {
            let d = make_delta(task, step);
            postcard_bytes += postcard::to_allocvec(&d).expect("encode").len() as u64;
            json_bytes += serde_json::to_vec(&d).expect("encode").len() as u64;
        }
    }
    (postcard_bytes, json_bytes)
}
