//! The records measured: checkpoint bodies (snapshots and deltas) taken from a store the
//! workload generator wrote.

use std::path::Path;
use std::time::Instant;

use agentwal::log::{Log, LogOptions};
use agentwal::{AgentDelta, AgentState, Compression, Options, Store, SyncMode, describe_record};
use serde::Deserialize;

/// Mirror of `src/store/codec.rs`'s `CheckpointRec` (crate-private; docs/format.md §8).
#[derive(Deserialize)]
#[allow(dead_code)]
pub(crate) struct CheckpointRec<'a> {
    pub(crate) task: &'a str,
    pub(crate) seq: u64,
    pub(crate) created_at_ms: u64,
    pub(crate) schema_version: u32,
    pub(crate) body_kind: Body,
    #[serde(borrow)]
    pub(crate) origin: Option<Origin<'a>>,
    #[serde(with = "serde_bytes")]
    pub(crate) body: &'a [u8],
}

#[derive(Deserialize, PartialEq, Eq)]
pub(crate) enum Body {
    Delta,
    Snapshot,
}

#[derive(Deserialize)]
#[allow(dead_code)]
pub(crate) struct Origin<'a> {
    pub(crate) task: &'a str,
    pub(crate) seq: u64,
}

pub(crate) struct Rec {
    pub(crate) snapshot: bool,
    pub(crate) payload_len: usize,
    pub(crate) body: Vec<u8>,
}

/// Commits `tasks × steps` steps (round-robin over tasks, like concurrent tasks), then
/// replays the log: the checkpoint records, and the log's bytes (headers + payloads).
pub(crate) fn store_records(
    dir: &Path,
    tasks: usize,
    steps: usize,
    task_id: impl Fn(usize) -> String,
    step: impl Fn(usize, usize) -> AgentDelta,
) -> (Vec<Rec>, u64, f64) {
    let options = Options {
        sync: SyncMode::Never,
        // The candidates compress the encoded bodies (the mirror reads tags 0 and 1 only).
        compression: Compression::None,
        ..Options::default()
    };
    let ids: Vec<String> = (0..tasks).map(&task_id).collect();
    let t0 = Instant::now();
    {
        let store: Store<AgentState> = Store::open_with(dir, options).expect("open store");
        for s in 0..steps {
            for (t, id) in ids.iter().enumerate() {
                store.commit(id, &step(t, s)).expect("commit");
            }
        }
    }
    let commit_s = t0.elapsed().as_secs_f64();
    let mut recs = Vec::new();
    let mut log_bytes = 0u64;
    let log = Log::open_with(dir, LogOptions::default(), |rec| {
        log_bytes += 20 + rec.payload.len() as u64;
        if rec.kind == 1 {
            let c: CheckpointRec = postcard::from_bytes(rec.payload).expect("checkpoint");
            let snapshot = c.body_kind == Body::Snapshot;
            let kind = describe_record(&rec).kind;
            assert_eq!(kind, if snapshot { "snapshot" } else { "delta" });
            recs.push(Rec {
                snapshot,
                payload_len: rec.payload.len(),
                body: c.body.to_vec(),
            });
        }
        Ok(())
    })
    .expect("replay");
    drop(log);
    (recs, log_bytes, commit_s)
}
