//! `record_decode`: arbitrary bytes into the record and segment-header decoders.
//!
//! Properties: no panic on any input; whatever decodes re-encodes to the same bytes (so
//! the decoders accept exactly what the encoders write, and nothing else slips through).

use std::path::Path;

use agentwal::log::SegmentHeader;
use agentwal::log::record::{self, DecodeError, Salt};
use agentwal::log::{
    KIND_CLOSE, KIND_SEAL, KIND_UNWRITTEN, KIND_USER_MAX, RECORD_HEADER_BYTES,
    SEGMENT_HEADER_BYTES, parse_segment_file_name, segment_file_name,
};

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
            buf[..SEGMENT_HEADER_BYTES],
            "a decoded segment header does not re-encode to its bytes"
        );
    }
}
