//! Checkpoint body compression (`Options::compression`, docs/format.md §8): compressed
//! snapshots and deltas round-trip through commit, load, fork, compaction and reopen, and
//! the async path; stores written uncompressed (format version 1) and compressed mix; the
//! snapshot policy and the size limit do not move with compression; a body compression
//! would not shrink is stored as encoded; a compressed record made by hand from the bytes
//! docs/format.md documents loads, and damaged ones are errors (never a panic, never a state).

mod common;

use std::path::Path;

use agentwal::log::{Log, LogOptions};
use agentwal::{
    AgentDelta, AgentState, BodyCheck, COMPRESSED_BODY_BYTES_MAX, COMPRESSION_BODY_BYTES_MIN,
    Compression, Error, Message, Options, RecordSummary, State, Store, Value, describe_record,
};
use common::rng::Rng;

const WORDS: [&str; 16] = [
    "agent", "tool", "search", "result", "the", "user", "asked", "for", "weather", "in", "paris",
    "found", "three", "pages", "about", "it",
];

/// `n` bytes of word salad: compresses as agent text does (about 0.3-0.5 with zstd 1).
fn text(rng: &mut Rng, n: usize) -> String {
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

fn steps(seed: u64, n: u64) -> Vec<AgentDelta> {
    let mut rng = Rng(seed);
    (1..=n).map(|i| step(&mut rng, i)).collect()
}

fn fold(deltas: &[AgentDelta]) -> AgentState {
    let mut s = AgentState::default();
    for d in deltas {
        s.apply(d);
    }
    s
}

fn options(compression: Compression) -> Options {
    Options {
        segment_bytes: 256 << 10,
        snapshot_every: 16,
        auto_compact: false,
        compression,
        ..Options::default()
    }
}

const ZSTD_1: Compression = Compression::Zstd {
    level: 1,
    deltas: true,
};

/// Every record of the store in `dir`, described (read-only: works beside a writer).
fn records(dir: &Path) -> Vec<RecordSummary> {
    let mut out = Vec::new();
    Log::open_read_only(dir, LogOptions::default(), |rec| {
        out.push(describe_record(&rec));
        Ok(())
    })
    .expect("open the log");
    out
}

/// (snapshots, deltas) of checkpoint records whose body is stored as `codec`.
fn count(records: &[RecordSummary], codec: &str) -> (usize, usize) {
    let of = |kind| {
        (records.iter())
            .filter(|r| r.kind == kind && r.body.as_ref().is_some_and(|b| b.codec == codec))
            .count()
    };
    (of("snapshot"), of("delta"))
}

/// The records of `tasks`.
fn of_tasks(records: &[RecordSummary], tasks: &[&str]) -> Vec<RecordSummary> {
    (records.iter())
        .filter(|r| r.task.as_deref().is_some_and(|t| tasks.contains(&t)))
        .cloned()
        .collect()
}

/// Commits 320 KB of deltas to a task of its own: more than a segment of `options`, so
/// that every record written before lies in a sealed segment, which compaction rewrites.
fn seal_what_came_before(store: &Store) {
    for d in steps(99, 200) {
        store.commit("filler", &d).unwrap();
    }
}

fn dir_bytes(dir: &Path) -> u64 {
    records(dir)
        .iter()
        .filter_map(|r| r.body.as_ref().map(|b| b.stored_bytes))
        .sum()
}

#[test]
#[cfg_attr(not(feature = "zstd"), ignore = "needs the zstd feature")]
fn compressed_snapshots_and_deltas_round_trip_through_load_fork_compaction_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let deltas = steps(1, 60);
    let store: Store = Store::open_with(dir.path(), options(ZSTD_1)).unwrap();
    for (i, d) in deltas.iter().enumerate() {
        assert_eq!(store.commit("t", d).unwrap(), i as u64 + 1);
    }
    store.fork("t", 20, "f").unwrap();
    let mut branch = deltas[..20].to_vec();
    for d in steps(2, 5) {
        store.commit("f", &d).unwrap();
        branch.push(d);
    }
    let check = |store: &Store, what: &str| {
        for seq in 1..=60u64 {
            let cp = store.load("t", seq).unwrap().expect("retained");
            assert_eq!(*cp.state, fold(&deltas[..seq as usize]), "{what}: t@{seq}");
        }
        let f = store.load_latest("f").unwrap().unwrap();
        assert_eq!((f.seq, &*f.state), (6, &fold(&branch)), "{what}: fork");
        let report = store.verify().unwrap();
        assert_eq!(report.bodies_decoded, 66, "{what}");
        assert!(report.bodies_compressed >= 60, "{what}: {report:?}");
        assert!(
            report.body_bytes_stored * 2 < report.body_bytes,
            "{what}: {report:?}"
        );
    };
    check(&store, "written");
    let written = records(dir.path());
    let (snapshots, deltas_zstd) = count(&written, "zstd");
    assert!(snapshots >= 3, "snapshots compressed: {snapshots}");
    assert!(deltas_zstd >= 50, "deltas compressed: {deltas_zstd}");
    // Fork's snapshot too.
    assert!(written.iter().any(|r| r.detail.contains("forked from t@20")
        && r.body.as_ref().is_some_and(|b| b.codec == "zstd")));
    // Every compressed body checks out and says its sizes.
    for r in &written {
        if let Some(b) = &r.body {
            assert_eq!(b.error, None, "{r:?}");
            if b.codec == "zstd" {
                assert!(b.stored_bytes < b.bytes, "{r:?}");
                assert!(
                    r.detail
                        .contains(&format!("zstd {} B of {} B", b.stored_bytes, b.bytes))
                );
            }
        }
    }
    drop(store);
    let store: Store = Store::open_with(dir.path(), options(ZSTD_1)).unwrap();
    check(&store, "reopened");
    store.compact().unwrap();
    check(&store, "compacted");
    drop(store);
    let store: Store = Store::open_read_only(dir.path()).unwrap();
    check(&store, "compacted, reopened read-only");
}

#[test]
#[cfg_attr(not(feature = "zstd"), ignore = "needs the zstd feature")]
fn stores_written_uncompressed_and_compressed_mix_and_keep_reading() {
    let dir = tempfile::tempdir().unwrap();
    let deltas = steps(3, 40);
    {
        let store: Store = Store::open_with(dir.path(), options(Compression::None)).unwrap();
        for d in &deltas[..20] {
            store.commit("t", d).unwrap();
        }
    }
    assert_eq!(count(&records(dir.path()), "zstd"), (0, 0));
    {
        let store: Store = Store::open_with(dir.path(), options(ZSTD_1)).unwrap();
        for d in &deltas[20..30] {
            store.commit("t", d).unwrap();
        }
    }
    {
        let store: Store = Store::open_with(dir.path(), options(Compression::None)).unwrap();
        for d in &deltas[30..] {
            store.commit("t", d).unwrap();
        }
        for seq in 1..=40u64 {
            let cp = store.load("t", seq).unwrap().unwrap();
            assert_eq!(*cp.state, fold(&deltas[..seq as usize]), "seq {seq}");
        }
        store.verify().unwrap();
    }
    let all = records(dir.path());
    let zstd = count(&all, "zstd");
    let raw = count(&all, "raw");
    assert!(
        zstd.0 + zstd.1 == 10 && raw.0 + raw.1 == 30,
        "zstd {zstd:?} raw {raw:?}"
    );
}

/// The default (`ZstdAtCompaction`): commits and forks write bodies as encoded; a
/// compaction pass stores them compressed, snapshots and deltas, repoints the index at
/// their new sizes (the same a reopened store reads off the disk), and every checkpoint
/// loads as before, also after a reopen and read-only.
#[test]
#[cfg_attr(not(feature = "zstd"), ignore = "needs the zstd feature")]
fn the_default_writes_raw_bodies_and_compaction_compresses_them() {
    assert_eq!(
        Options::default().compression,
        Compression::ZstdAtCompaction {
            level: agentwal::ZSTD_LEVEL_DEFAULT,
            deltas: true
        }
    );
    let dir = tempfile::tempdir().unwrap();
    let deltas = steps(11, 60);
    let opts = options(Compression::default());
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    for d in &deltas {
        store.commit("t", d).unwrap();
    }
    store.fork("t", 20, "f").unwrap();
    let check = |store: &Store, what: &str| {
        for seq in 1..=60u64 {
            let cp = store.load("t", seq).unwrap().expect("retained");
            assert_eq!(*cp.state, fold(&deltas[..seq as usize]), "{what}: t@{seq}");
        }
        let f = store.load_latest("f").unwrap().unwrap();
        assert_eq!(*f.state, fold(&deltas[..20]), "{what}: fork");
        store.verify().unwrap();
    };
    check(&store, "written");
    let written = records(dir.path());
    assert_eq!(count(&written, "zstd"), (0, 0), "commits write raw bodies");
    let (raw_snapshots, raw_deltas) = count(&written, "raw");
    assert!(raw_snapshots >= 4 && raw_deltas >= 50);
    let raw_bytes = dir_bytes(dir.path());
    // Compaction leaves the active segment alone.
    seal_what_came_before(&store);
    let written = of_tasks(&records(dir.path()), &["t", "f"]);
    store.compact().unwrap();
    check(&store, "compacted");
    let compacted = of_tasks(&records(dir.path()), &["t", "f"]);
    let (zstd_snapshots, zstd_deltas) = count(&compacted, "zstd");
    assert_eq!(
        (zstd_snapshots, zstd_deltas),
        (raw_snapshots, raw_deltas),
        "every body compressed"
    );
    assert!(
        written.len() == compacted.len()
            && (written.iter().zip(&compacted))
                .all(|(a, b)| (a.kind, &a.task, a.seq) == (b.kind, &b.task, b.seq)),
        "the same records, in the same order"
    );
    let compressed_bytes: u64 = (compacted.iter())
        .filter_map(|r| r.body.as_ref().map(|b| b.stored_bytes))
        .sum();
    assert!(
        compressed_bytes * 2 < raw_bytes,
        "{compressed_bytes} vs {raw_bytes}"
    );
    let total_bytes = dir_bytes(dir.path());
    let sizes = |store: &Store| {
        let mut all = store.list_checkpoints("t").unwrap();
        all.extend(store.list_checkpoints("f").unwrap());
        all.iter().map(|c| (c.seq, c.bytes)).collect::<Vec<_>>()
    };
    let remapped = sizes(&store);
    drop(store);
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    check(&store, "compacted, reopened");
    assert_eq!(
        sizes(&store),
        remapped,
        "the index's sizes are those on disk"
    );
    // A second pass copies compressed bodies as they are.
    store.compact().unwrap();
    check(&store, "compacted twice");
    assert_eq!(dir_bytes(dir.path()), total_bytes);
    drop(store);
    let store: Store = Store::open_read_only(dir.path()).unwrap();
    check(&store, "read-only");
}

/// The default compresses a store without retention too: nothing is dead, but the
/// background compactor runs a pass once the segments no pass wrote outweigh the compacted
/// one (and a segment), so only the newest segments hold raw bodies. Under
/// `Compression::None` it runs none.
#[test]
#[cfg_attr(not(feature = "zstd"), ignore = "needs the zstd feature")]
fn background_compaction_compresses_a_store_without_retention() {
    let deltas = steps(13, 400);
    for (setting, compresses) in [(Compression::default(), true), (Compression::None, false)] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            segment_bytes: 64 << 10,
            auto_compact: true,
            ..options(setting)
        };
        let store: Store = Store::open_with(dir.path(), opts).unwrap();
        for d in &deltas {
            store.commit("t", d).unwrap();
        }
        // Passes run on a background thread after rotations: wait for one to have been
        // installed and counted (the count follows the install). Which segments it
        // covered depends on when it ran, so only some bodies need be compressed.
        let seen = || {
            let (snapshots, deltas) = count(&records(dir.path()), "zstd");
            (store.stats().compactions, snapshots, deltas)
        };
        let none_yet = |(passes, snapshots, deltas): (u64, usize, usize)| {
            passes == 0 || snapshots == 0 || deltas == 0
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while compresses && none_yet(seen()) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if !compresses {
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
        let (compactions, zstd_snapshots, zstd_deltas) = seen();
        if compresses {
            assert!(
                compactions >= 1 && zstd_snapshots >= 1 && zstd_deltas >= 1,
                "{setting:?}: {compactions} passes, {zstd_snapshots} snapshots and \
                 {zstd_deltas} deltas compressed"
            );
        } else {
            assert_eq!((compactions, zstd_snapshots, zstd_deltas), (0, 0, 0));
        }
        for seq in (1..=400u64).step_by(37) {
            let cp = store.load("t", seq).unwrap().unwrap();
            assert_eq!(
                *cp.state,
                fold(&deltas[..seq as usize]),
                "{setting:?} seq {seq}"
            );
        }
        drop(store);
        let store: Store = Store::open_with(dir.path(), opts).unwrap();
        store.verify().unwrap();
        assert_eq!(
            *store.load_latest("t").unwrap().unwrap().state,
            fold(&deltas)
        );
    }
}

/// Under `Compression::None` compaction copies bodies as they are; under `Zstd` without
/// `deltas`, it compresses the raw snapshots another setting wrote and leaves deltas raw.
#[test]
#[cfg_attr(not(feature = "zstd"), ignore = "needs the zstd feature")]
fn compaction_compresses_only_what_the_setting_names() {
    let deltas = steps(12, 40);
    let snapshots_only = Compression::Zstd {
        level: 1,
        deltas: false,
    };
    for (setting, expected) in [(Compression::None, (0, 0)), (snapshots_only, (1, 0))] {
        let dir = tempfile::tempdir().unwrap();
        {
            let store: Store = Store::open_with(dir.path(), options(Compression::None)).unwrap();
            for d in &deltas {
                store.commit("t", d).unwrap();
            }
            seal_what_came_before(&store);
        }
        let store: Store = Store::open_with(dir.path(), options(setting)).unwrap();
        store.compact().unwrap();
        let t = of_tasks(&records(dir.path()), &["t"]);
        let (snapshots, zstd_deltas) = count(&t, "zstd");
        let all_snapshots = count(&t, "raw").0 + snapshots;
        assert_eq!(
            (snapshots.min(1), zstd_deltas),
            expected,
            "{setting:?}: {snapshots} of {all_snapshots} snapshots"
        );
        if expected.0 == 1 {
            assert_eq!(snapshots, all_snapshots, "{setting:?}");
        }
        let latest = store.load_latest("t").unwrap().unwrap();
        assert_eq!(*latest.state, fold(&deltas), "{setting:?}");
    }
}

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

// Records made by hand, byte by byte as docs/format.md §8 documents them.

fn varint(mut n: u64, out: &mut Vec<u8>) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// A kind-1 payload: checkpoint `seq` of task "h", created at 1 ms, schema version 1,
/// with body tag `tag` (and its `raw_len`, for tags 2 and 3), no origin, and `body`.
fn checkpoint_payload(seq: u64, tag: u8, raw_len: Option<u64>, body: &[u8]) -> Vec<u8> {
    let mut p = vec![1, b'h'];
    varint(seq, &mut p);
    p.extend_from_slice(&[1, 1, tag]);
    if let Some(n) = raw_len {
        varint(n, &mut p);
    }
    p.push(0);
    varint(body.len() as u64, &mut p);
    p.extend_from_slice(body);
    p
}

fn encoded_state(rng: &mut Rng) -> Vec<u8> {
    let state = fold(&[AgentDelta::default().message(Message::user(text(rng, 3000)))]);
    postcard::to_allocvec(&state).unwrap()
}

/// Appends `payloads` as kind-1 records of a fresh log in `dir`.
fn write_log(dir: &Path, payloads: &[Vec<u8>]) {
    let log = Log::open_with(dir, LogOptions::default(), |_| Ok(())).unwrap();
    for p in payloads {
        log.append(1, p).unwrap();
    }
}

#[test]
#[cfg_attr(not(feature = "zstd"), ignore = "needs the zstd feature")]
fn a_record_made_by_hand_from_the_documented_bytes_loads() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(6);
    let raw = encoded_state(&mut rng);
    let frame = zstd::bulk::compress(&raw, 1).unwrap();
    let delta = postcard::to_allocvec(&AgentDelta::default().set("k", 7i64)).unwrap();
    let delta_frame = zstd::bulk::compress(&delta, 1).unwrap();
    write_log(
        dir.path(),
        &[
            checkpoint_payload(1, 3, Some(raw.len() as u64), &frame),
            // A delta compressed below the threshold (a writer may; this one does not).
            checkpoint_payload(2, 2, Some(delta.len() as u64), &delta_frame),
            checkpoint_payload(3, 0, None, &delta),
        ],
    );
    let store: Store = Store::open(dir.path()).unwrap();
    let latest = store.load_latest("h").unwrap().unwrap();
    let first: AgentState = postcard::from_bytes(&raw).unwrap();
    assert_eq!(latest.state.messages, first.messages);
    assert_eq!(latest.state.vars["k"], Value::Int(7));
    store.verify().unwrap();
    let info = store.list_checkpoints("h").unwrap();
    assert!(info[0].snapshot && !info[1].snapshot);
    // The index's sizes are those on disk.
    assert!(info[0].bytes < raw.len() as u64);
}

#[test]
#[cfg_attr(not(feature = "zstd"), ignore = "needs the zstd feature")]
fn a_damaged_compressed_body_is_a_decode_error_naming_its_record() {
    let mut rng = Rng(7);
    let raw = encoded_state(&mut rng);
    let frame = zstd::bulk::compress(&raw, 1).unwrap();
    let n = raw.len() as u64;
    let mut flipped = frame.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0xff;
    let mut longer = frame.clone();
    longer.extend_from_slice(b"tail");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "wrong length",
            checkpoint_payload(1, 3, Some(n - 1), &frame),
        ),
        (
            "beyond the bound",
            checkpoint_payload(1, 3, Some(COMPRESSED_BODY_BYTES_MAX as u64 + 1), &frame),
        ),
        ("not a frame", checkpoint_payload(1, 3, Some(n), &raw)),
        (
            "truncated",
            checkpoint_payload(1, 3, Some(n), &frame[..frame.len() / 2]),
        ),
        ("trailing bytes", checkpoint_payload(1, 3, Some(n), &longer)),
        ("flipped byte", checkpoint_payload(1, 3, Some(n), &flipped)),
        ("empty", checkpoint_payload(1, 3, Some(n), &[])),
    ];
    for (what, payload) in cases {
        let dir = tempfile::tempdir().unwrap();
        write_log(dir.path(), &[payload]);
        // Opening never reads a body; loading it is an error, not a state.
        let store: Store = Store::open(dir.path()).unwrap();
        let result = store.load_latest("h");
        let Err(Error::Decode {
            segment, reason, ..
        }) = &result
        else {
            // A flipped byte may land where zstd cannot tell (a literal): then the
            // state decodes or not, but the bytes are all there.
            assert_eq!(what, "flipped byte", "{what}: {result:?}");
            continue;
        };
        assert!(segment.exists(), "{what}: {segment:?}");
        assert!(
            reason.contains("checkpoint 1 of task \"h\""),
            "{what}: {reason}"
        );
        for check in [BodyCheck::Require, BodyCheck::Try, BodyCheck::Skip] {
            assert!(
                matches!(store.verify_with(check), Err(Error::Decode { .. })),
                "{what}: verify {check:?}"
            );
        }
        let described = records(dir.path());
        let body = described[0].body.as_ref().unwrap();
        assert!(body.error.is_some(), "{what}: {described:?}");
        assert_eq!(described[0].kind, "snapshot");
    }
}

/// A build without the `zstd` feature writes nothing compressed, refuses to be told to,
/// and reads a compressed record as an error that names the feature.
#[test]
#[cfg(not(feature = "zstd"))]
fn without_the_zstd_feature_a_compressed_body_is_an_error_naming_it() {
    assert_eq!(Options::default().compression, Compression::None);
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        Store::<AgentState>::open_with(dir.path(), options(ZSTD_1)),
        Err(Error::InvalidArgument(m)) if m.contains("cargo feature `zstd`")
    ));
    let mut rng = Rng(8);
    let raw = encoded_state(&mut rng);
    let frame = zstd::bulk::compress(&raw, 1).unwrap();
    write_log(
        dir.path(),
        &[checkpoint_payload(1, 3, Some(raw.len() as u64), &frame)],
    );
    let store: Store = Store::open(dir.path()).unwrap();
    assert!(matches!(
        store.load_latest("h"),
        Err(Error::Decode { reason, .. }) if reason.contains("cargo feature `zstd`")
    ));
    let body = records(dir.path())[0].body.clone().unwrap();
    assert!(body.error.unwrap().contains("cargo feature `zstd`"));
}

/// The async API's deferred commits (a delta appended from the runtime thread, a snapshot
/// due on a cached state) compress as the blocking path does.
#[test]
#[cfg(all(feature = "tokio", feature = "zstd"))]
fn async_commits_compress_as_blocking_ones_do() {
    let dir = tempfile::tempdir().unwrap();
    let deltas = steps(9, 40);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store: agentwal::AsyncStore =
            agentwal::AsyncStore::open_with(dir.path(), options(ZSTD_1))
                .await
                .unwrap();
        for d in &deltas {
            store.commit("t", d).await.unwrap();
        }
        let latest = store.load_latest("t").await.unwrap().unwrap();
        assert_eq!(*latest.state, fold(&deltas));
    });
    let (snapshots, zstd_deltas) = count(&records(dir.path()), "zstd");
    assert!(
        snapshots >= 2 && zstd_deltas >= 30,
        "{snapshots} {zstd_deltas}"
    );
    // A handle closes once its last clone and its queued writes are done: retry a while.
    let mut opened = Store::<AgentState>::open_with(dir.path(), options(ZSTD_1));
    for _ in 0..500 {
        if !matches!(opened, Err(Error::Locked { .. })) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        opened = Store::open_with(dir.path(), options(ZSTD_1));
    }
    let store = opened.unwrap();
    for seq in 1..=40u64 {
        let cp = store.load("t", seq).unwrap().unwrap();
        assert_eq!(*cp.state, fold(&deltas[..seq as usize]), "seq {seq}");
    }
}
