//! `record_decode`: arbitrary bytes into the record and segment-header decoders, and into
//! the store's record decoder (`describe_record`), which decompresses a compressed
//! checkpoint body.
//!
//! Properties: no panic on any input; whatever decodes re-encodes to the same bytes (so
//! the decoders accept exactly what the encoders write, and nothing else slips through);
//! a compressed body is accepted only if it decompresses to exactly the length its record
//! claims, which is at most `COMPRESSED_BODY_BYTES_MAX`.

use std::path::Path;

use agentwal::log::SegmentHeader;
use agentwal::log::record::{self, DecodeError, Salt};
use agentwal::log::{
    KIND_CLOSE, KIND_SEAL, KIND_UNWRITTEN, KIND_USER_MAX, RECORD_HEADER_BYTES, RecordRef,
    parse_segment_file_name, segment_file_name,
};
use agentwal::{COMPRESSED_BODY_BYTES_MAX, describe_record};

/// How many leading offsets of the input are tried as record starts.
const OFFSETS_TRIED: usize = 24;

/// Runs every decoder over `data`; panics on a violated property.
pub fn check(data: &[u8]) {
    for start in 0..data.len().min(OFFSETS_TRIED) {
        check_record(&data[start..]);
    }
    if data.is_empty() {
        check_record(data);
    }
    check_segment_header(data);
    check_store_payloads(data);
    if let Ok(name) = std::str::from_utf8(data)
        && let Some(id) = parse_segment_file_name(name)
    {
        assert_eq!(
            segment_file_name(id),
            name,
            "segment name does not round-trip"
        );
    }
}

/// Format v1 records carry no salt, v2 ones a segment's; the fuzzer tries both.
const SALTS: [Salt; 2] = [Salt::Unsalted, Salt::Salted(0x0bad_5eed)];

fn check_record(buf: &[u8]) {
    for salt in SALTS {
        check_record_salted(buf, salt);
    }
}

fn check_record_salted(buf: &[u8], salt: Salt) {
    let parsed = record::parse_header(buf);
    let with_len = record::decode_header(buf);
    match record::decode(buf, salt) {
        Ok((h, payload)) => {
            assert!(h.kind != KIND_UNWRITTEN, "decoded a record of kind 0");
            assert!(
                h.kind <= KIND_USER_MAX || h.kind == KIND_SEAL || h.kind == KIND_CLOSE,
                "decoded reserved kind {}",
                h.kind
            );
            assert_eq!(payload.len() as u64, u64::from(h.payload_len));
            assert_eq!(
                h.record_bytes() as usize,
                RECORD_HEADER_BYTES + payload.len()
            );
            assert_eq!(parsed.as_ref().ok(), Some(&h), "parse_header disagrees");
            assert_eq!(with_len.as_ref().ok(), Some(&h), "decode_header disagrees");
            let mut again = Vec::new();
            record::encode_into(&mut again, salt, &h, record::payload_crc(payload), payload);
            assert_eq!(
                again[..],
                buf[..again.len()],
                "a decoded record does not re-encode to its bytes"
            );
        }
        Err(DecodeError::Unwritten) => {
            let head = &buf[..buf.len().min(RECORD_HEADER_BYTES)];
            assert!(
                head.iter().all(|&b| b == 0),
                "non-zero bytes called unwritten"
            );
        }
        Err(DecodeError::Truncated) => {
            assert!(
                buf.len() < RECORD_HEADER_BYTES,
                "a full header called truncated"
            );
        }
        Err(DecodeError::Invalid(_)) => {
            // A header that parses and fits may still fail only its checksum.
            if let Ok(h) = &with_len {
                assert!(h.record_bytes() as usize <= buf.len());
            }
        }
    }
}

fn check_segment_header(buf: &[u8]) {
    let path = Path::new("fuzz.wal");
    if let Ok(h) = SegmentHeader::decode(buf, path) {
        assert_eq!(
            h.encode()[..],
            buf[..h.data_start() as usize],
            "a decoded segment header does not re-encode to its bytes"
        );
    }
}

/// The zstd frame magic (little-endian 0xFD2FB528).
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// `data` as a store record's payload of each kind, and, so that the fuzzer reaches the
/// body decoders without first finding a valid envelope, a checkpoint payload built
/// around it (docs/format.md §8): task "f", seq 1, time 0, schema version 1, then the body
/// tag and length decompressed taken from `data`'s first bytes, no origin, and the rest of
/// `data` as the body (after zstd's magic when the first byte asks for it).
fn check_store_payloads(data: &[u8]) {
    for kind in 1..=4 {
        check_store_payload(kind, data);
    }
    if let Some(payload) = checkpoint_payload(data) {
        check_store_payload(1, &payload);
    }
}

/// The checkpoint payload `check_store_payloads` builds around `data` (`None` for no
/// data).
pub fn checkpoint_payload(data: &[u8]) -> Option<Vec<u8>> {
    let (&control, rest) = data.split_first()?;
    let tag = control & 3;
    let mut payload = vec![1, b'f', 1, 0, 1, tag];
    let mut rest = rest;
    if tag >= 2 {
        // The length decompressed: a varint of up to 4 bytes from the input.
        let n = rest
            .iter()
            .take(4)
            .position(|b| b & 0x80 == 0)
            .map_or(rest.len().min(4), |i| i + 1);
        payload.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
    }
    payload.push(0);
    let mut body = Vec::new();
    if control & 4 != 0 {
        body.extend_from_slice(&ZSTD_MAGIC);
    }
    body.extend_from_slice(rest);
    varint(body.len() as u64, &mut payload);
    payload.extend_from_slice(&body);
    Some(payload)
}

fn varint(mut n: u64, out: &mut Vec<u8>) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn check_store_payload(kind: u8, payload: &[u8]) {
    let rec = RecordRef {
        segment_id: 1,
        offset: 0,
        lsn: 1,
        kind,
        payload,
        segment: Path::new("fuzz.wal"),
    };
    let summary = describe_record(&rec);
    let Some(body) = &summary.body else {
        return;
    };
    assert!(
        matches!(summary.kind, "snapshot" | "delta"),
        "a body described for a {}",
        summary.kind
    );
    match body.codec {
        "raw" => {
            assert_eq!(body.stored_bytes, body.bytes, "a raw body of two sizes");
            assert!(body.error.is_none(), "a raw body with an error");
        }
        "zstd" if body.error.is_none() => {
            assert!(
                body.bytes <= COMPRESSED_BODY_BYTES_MAX as u64,
                "a compressed body of {} bytes accepted",
                body.bytes
            );
        }
        "zstd" => {}
        other => panic!("unknown codec {other:?}"),
    }
}
