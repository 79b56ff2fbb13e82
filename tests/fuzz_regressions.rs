//! Replays saved fuzz inputs as ordinary tests.
//!
//! Every file under `fuzz/regressions/<target>/` (inputs that once broke a target, kept
//! after the fix) goes through the same check function the fuzz target runs: the checks
//! live once, in `fuzz/src/`, which this file includes as a module (see the comment at
//! the top of `fuzz/src/lib.rs`). A few built-in inputs run too, so each check is
//! exercised even for a target without saved inputs.
//!
//! To replay one input by hand: `AGENTWAL_FUZZ_INPUT=path cargo test --test
//! fuzz_regressions <target>`; under libFuzzer: `cargo +nightly fuzz run <target> path`.

#[path = "../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod checks;

use std::path::{Path, PathBuf};

fn inputs(target: &str) -> Vec<PathBuf> {
    if let Some(one) = std::env::var_os("AGENTWAL_FUZZ_INPUT") {
        return vec![PathBuf::from(one)];
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != "README.md"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

fn replay(target: &str, check: fn(&[u8]), builtin: &[&[u8]]) {
    for input in builtin {
        check(input);
    }
    let files = inputs(target);
    for path in &files {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        eprintln!("{target}: replaying {}", path.display());
        check(&data);
    }
    eprintln!("{target}: {} saved inputs replayed", files.len());
}

/// Inputs of all zeros, all ones and a counting pattern, in a few lengths.
fn patterns() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for len in [0usize, 1, 19, 20, 40, 64, 300, 2000] {
        out.push(vec![0; len]);
        out.push(vec![0xff; len]);
        out.push((0..len).map(|i| i as u8).collect());
    }
    out
}

/// Inputs that `record_decode` wraps into checkpoint payloads with zstd bodies: a control
/// byte (body tag 3, a compressed snapshot), the length decompressed as a varint, then a
/// real frame, whole or damaged, and lengths that disagree with it.
fn compressed_bodies() -> Vec<Vec<u8>> {
    let raw: Vec<u8> = (0..3000u32)
        .map(|i| b"agent tool state "[i as usize % 17])
        .collect();
    let frame = zstd::bulk::compress(&raw, 1).expect("compress");
    let input = |raw_len: u64, body: &[u8]| {
        let mut out = vec![3];
        let mut n = raw_len;
        while n >= 0x80 {
            out.push(n as u8 | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
        out.extend_from_slice(body);
        out
    };
    let mut flipped = frame.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    vec![
        input(3000, &frame),
        input(2999, &frame),
        input(1 << 27, &frame),
        input(3000, &frame[..frame.len() - 1]),
        input(3000, &[frame.as_slice(), b"more"].concat()),
        input(3000, &frame[..4]),
        // Last: a flipped byte may fall where zstd cannot tell (no checksum in the frame;
        // the record's CRC covers it on disk).
        input(3000, &flipped),
    ]
}

/// The first of [`compressed_bodies`] is a sound record: the check reaches zstd's decoder
/// and accepts it, so the damaged ones after it test the decoder's refusals (all but the
/// last are refused).
#[test]
fn record_decode_builds_a_sound_compressed_record() {
    let payload = checks::record_decode::checkpoint_payload(&compressed_bodies()[0]).unwrap();
    let rec = agentwal::log::RecordRef {
        segment_id: 1,
        offset: 0,
        lsn: 1,
        kind: 1,
        payload: &payload,
        segment: Path::new("x.wal"),
    };
    let body = agentwal::describe_record(&rec).body.expect("a checkpoint");
    assert_eq!((body.codec, body.bytes, body.error), ("zstd", 3000, None));
    let inputs = compressed_bodies();
    for damaged in &inputs[1..inputs.len() - 1] {
        let payload = checks::record_decode::checkpoint_payload(damaged).unwrap();
        let rec = agentwal::log::RecordRef {
            payload: &payload,
            ..rec
        };
        let body = agentwal::describe_record(&rec).body.expect("a checkpoint");
        assert!(body.error.is_some(), "{body:?}");
    }
}

#[test]
fn record_decode() {
    let mut inputs = patterns();
    inputs.extend(compressed_bodies());
    let builtin: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    replay("record_decode", checks::record_decode::check, &builtin);
}

#[test]
fn recover_dir() {
    let patterns = patterns();
    let builtin: Vec<&[u8]> = patterns.iter().map(Vec::as_slice).collect();
    replay("recover_dir", checks::recover_dir::check, &builtin);
}

#[test]
fn store_ops() {
    let patterns = patterns();
    let builtin: Vec<&[u8]> = patterns.iter().map(Vec::as_slice).collect();
    replay("store_ops", checks::store_ops::check, &builtin);
}
