//! Snapshots, retention, compaction and bounded disk.

use std::collections::BTreeMap;
use std::path::Path;

use agentwal::{AgentDelta, AgentState, Compression, Message, Options, Store};

mod bounded_disk;
mod journal;
mod reclaim;
mod salvage;

fn delta(task: usize, i: u64) -> AgentDelta {
    AgentDelta::default()
        .message(Message::assistant(format!(
            "t{task} step {i} {}",
            "m".repeat(40)
        )))
        .set("step", i as i64)
}

/// Every retained checkpoint of every task, loaded.
fn contents(store: &Store) -> BTreeMap<String, Vec<(u64, AgentState)>> {
    let mut out = BTreeMap::new();
    for task in store.tasks().unwrap() {
        let cps = store
            .list_checkpoints(&task)
            .unwrap()
            .into_iter()
            .map(|c| {
                (
                    c.seq,
                    (*store.load(&task, c.seq).unwrap().expect("retained").state).clone(),
                )
            })
            .collect();
        out.insert(task, cps);
    }
    out
}

fn small(keep: Option<u32>) -> Options {
    Options {
        segment_bytes: 16 << 10,
        snapshot_every: 4,
        keep_checkpoints: keep,
        auto_compact: false,
        // The segment counts these tests plan on are in bytes as encoded (compressed
        // records through compaction: tests/compression/).
        compression: Compression::None,
        ..Options::default()
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}
