//! Shared fixtures: compressible text, steps and their fold, options, record counts,
//! sealing and directory sizes.

use std::path::Path;

use crate::common::rng::Rng;
use agentwal::log::{Log, LogOptions};
use agentwal::{
    AgentDelta, AgentState, Compression, Message, Options, RecordSummary, State, Store,
    describe_record,
};

const WORDS: [&str; 16] = [
    "agent", "tool", "search", "result", "the", "user", "asked", "for", "weather", "in", "paris",
    "found", "three", "pages", "about", "it",
];

/// `n` bytes of word salad: compresses as agent text does (about 0.3-0.5 with zstd 1).
pub(crate) fn text(rng: &mut Rng, n: usize) -> String {
    let mut out = String::with_capacity(n + 8);
    while out.len() < n {
        out.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
        out.push(' ');
    }
    out.truncate(n);
    out
}

/// Step `i`: a tool result of 600 to 2,600 bytes of text (every delta's body is over
/// the compression threshold), and a counter.
fn step(rng: &mut Rng, i: u64) -> AgentDelta {
    let len = 600 + rng.below(2000) as usize;
    AgentDelta::default()
        .message(Message::assistant(format!("step {i}")).with_tool_call(
            format!("c{i}"),
            "search",
            "q",
        ))
        .message(Message::tool(format!("c{i}"), text(rng, len)))
        .set("step", i as i64)
}

pub(crate) fn steps(seed: u64, n: u64) -> Vec<AgentDelta> {
    let mut rng = Rng(seed);
    (1..=n).map(|i| step(&mut rng, i)).collect()
}

pub(crate) fn fold(deltas: &[AgentDelta]) -> AgentState {
    let mut s = AgentState::default();
    for d in deltas {
        s.apply(d);
    }
    s
}

pub(crate) fn options(compression: Compression) -> Options {
    Options {
        segment_bytes: 256 << 10,
        snapshot_every: 16,
        auto_compact: false,
        compression,
        ..Options::default()
    }
}

pub(crate) const ZSTD_1: Compression = Compression::Zstd {
    level: 1,
    deltas: true,
};

/// Every record of the store in `dir`, described (read-only: works beside a writer).
pub(crate) fn records(dir: &Path) -> Vec<RecordSummary> {
    let mut out = Vec::new();
    Log::open_read_only(dir, LogOptions::default(), |rec| {
        out.push(describe_record(&rec));
        Ok(())
    })
    .expect("open the log");
    out
}

/// (snapshots, deltas) of checkpoint records whose body is stored as `codec`.
pub(crate) fn count(records: &[RecordSummary], codec: &str) -> (usize, usize) {
    let of = |kind| {
        (records.iter())
            .filter(|r| r.kind == kind && r.body.as_ref().is_some_and(|b| b.codec == codec))
            .count()
    };
    (of("snapshot"), of("delta"))
}

/// The records of `tasks`.
pub(crate) fn of_tasks(records: &[RecordSummary], tasks: &[&str]) -> Vec<RecordSummary> {
    (records.iter())
        .filter(|r| r.task.as_deref().is_some_and(|t| tasks.contains(&t)))
        .cloned()
        .collect()
}

/// Commits 320 KB of deltas to a task of its own: more than a segment of `options`, so
/// that every record written before lies in a sealed segment, which compaction rewrites.
pub(crate) fn seal_what_came_before(store: &Store) {
    for d in steps(99, 200) {
        store.commit("filler", &d).unwrap();
    }
}

pub(crate) fn dir_bytes(dir: &Path) -> u64 {
    records(dir)
        .iter()
        .filter_map(|r| r.body.as_ref().map(|b| b.stored_bytes))
        .sum()
}
