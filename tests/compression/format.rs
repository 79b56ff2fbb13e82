//! The documented bytes (docs/format.md §8): a record made by hand loads, damaged or
//! unsupported compressed bodies are errors naming their record.

use std::path::Path;

use crate::common::rng::Rng;
use agentwal::log::{Log, LogOptions};
use agentwal::{
    AgentDelta, AgentState, BodyCheck, COMPRESSED_BODY_BYTES_MAX, Error, Message, Store, Value,
};

use crate::helpers::{fold, records, text};

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
