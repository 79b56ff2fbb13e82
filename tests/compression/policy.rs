//! Compression moves no snapshot and no commit outcome; bodies it would not shrink stay
//! as encoded; out-of-range levels are refused.

use crate::common::rng::Rng;
use agentwal::{
    AgentDelta, AgentState, COMPRESSION_BODY_BYTES_MIN, Compression, Error, Message, Options,
    Store, Value,
};

use crate::helpers::{ZSTD_1, dir_bytes, options, records, steps, text};

/// Same commits, each compression setting: the same snapshot seqs (the policy counts
/// uncompressed bytes), the same states, and fewer bytes with compression.
#[test]
#[cfg_attr(not(feature = "zstd"), ignore = "needs the zstd feature")]
fn compression_moves_no_snapshot() {
    let deltas = steps(4, 300);
    let mut runs = Vec::new();
    for compression in [
        Compression::None,
        ZSTD_1,
        Compression::Zstd {
            level: 3,
            deltas: false,
        },
    ] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            snapshot_every: 1024,
            ..options(compression)
        };
        let store: Store = Store::open_with(dir.path(), opts).unwrap();
        for d in &deltas {
            store.commit("t", d).unwrap();
        }
        let snapshots = |store: &Store| -> Vec<u64> {
            let list = store.list_checkpoints("t").unwrap();
            list.iter().filter(|c| c.snapshot).map(|c| c.seq).collect()
        };
        let written = snapshots(&store);
        let latest = store.load_latest("t").unwrap().unwrap().state;
        drop(store);
        // The counters replay from the records: a reopened store agrees, and its next
        // commits snapshot where a store that never closed would.
        let store: Store = Store::open_with(dir.path(), opts).unwrap();
        assert_eq!(snapshots(&store), written, "{compression:?} after a reopen");
        assert_eq!(*store.load_latest("t").unwrap().unwrap().state, *latest);
        runs.push((compression, written, dir_bytes(dir.path()), dir));
    }
    let (_, plain, plain_bytes, _) = &runs[0];
    assert!(plain.len() >= 4, "the policy wrote snapshots: {plain:?}");
    for (compression, snapshots, bytes, _) in &runs[1..] {
        assert_eq!(snapshots, plain, "{compression:?}");
        assert!(
            bytes < plain_bytes,
            "{compression:?}: {bytes} vs {plain_bytes}"
        );
    }
}

/// Compression never decides whether a commit fits: the record size limit counts the
/// record with its body uncompressed, so deltas around and beyond the limit of small
/// segments (a record's payload must fit one today) get the same outcome, success or
/// `RecordTooLarge` with the same sizes, with and without compression; those that commit
/// load back. (The check itself, on a limit a compressed payload fits: `compress.rs`'s
/// unit tests.)
#[test]
#[cfg_attr(not(feature = "zstd"), ignore = "needs the zstd feature")]
fn compression_changes_no_commit_outcome_near_the_size_limit() {
    let mut outcomes = Vec::new();
    for compression in [Compression::None, ZSTD_1] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            segment_bytes: 4096,
            ..options(compression)
        };
        let store: Store = Store::open_with(dir.path(), opts).unwrap();
        let mut rng = Rng(10);
        let mut outcome = Vec::new();
        for (i, len) in [1000, 3800, 3990, 4100, 5000, 20_000]
            .into_iter()
            .enumerate()
        {
            let task = format!("t{i}");
            let delta = AgentDelta::default().message(Message::user(text(&mut rng, len)));
            let result = store.commit(&task, &delta);
            if result.is_ok() {
                let state = store.load_latest(&task).unwrap().unwrap().state;
                assert_eq!(state.messages, delta.messages, "{compression:?} {len}");
            }
            outcome.push(match result {
                Ok(seq) => format!("{len}: seq {seq}"),
                Err(Error::RecordTooLarge {
                    payload_bytes,
                    limit_bytes,
                }) => format!("{len}: too large, {payload_bytes} > {limit_bytes}"),
                Err(e) => panic!("{compression:?} {len}: {e}"),
            });
        }
        let stored = records(dir.path());
        let codec = stored[0].body.as_ref().unwrap().codec;
        assert_eq!(codec, if compression == ZSTD_1 { "zstd" } else { "raw" });
        outcomes.push(outcome);
    }
    assert_eq!(outcomes[0], outcomes[1]);
}

#[test]
#[cfg_attr(not(feature = "zstd"), ignore = "needs the zstd feature")]
fn bodies_compression_would_not_shrink_are_stored_as_encoded() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open_with(dir.path(), options(ZSTD_1)).unwrap();
    let mut rng = Rng(5);
    // Random bytes: zstd cannot save 1/8 of them. Small text: under the threshold.
    let blob = Value::Bytes(rng.bytes(4000));
    let noise = AgentDelta::default().set("blob", blob.clone());
    let small = AgentDelta::default().message(Message::user(text(
        &mut rng,
        COMPRESSION_BODY_BYTES_MIN / 2,
    )));
    let prose = AgentDelta::default().message(Message::user(text(&mut rng, 4000)));
    store.commit("noise", &noise).unwrap();
    store.commit("small", &small).unwrap();
    store.commit("prose", &prose).unwrap();
    let by_task = |task: &str| {
        let all = records(dir.path());
        let r = all
            .into_iter()
            .find(|r| r.task.as_deref() == Some(task))
            .unwrap();
        r.body.unwrap()
    };
    let n = by_task("noise");
    assert_eq!((n.codec, n.stored_bytes), ("raw", n.bytes));
    assert!(n.bytes > 4000);
    assert_eq!(by_task("small").codec, "raw");
    assert_eq!(by_task("prose").codec, "zstd");
    assert_eq!(
        store.load_latest("noise").unwrap().unwrap().state.vars["blob"],
        blob
    );
}

#[test]
#[cfg_attr(not(feature = "zstd"), ignore = "needs the zstd feature")]
fn an_out_of_range_level_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let bad = Compression::Zstd {
        level: 1000,
        deltas: true,
    };
    assert!(matches!(
        Store::<AgentState>::open_with(dir.path(), options(bad)),
        Err(Error::InvalidArgument(m)) if m.contains("zstd level 1000")
    ));
}
