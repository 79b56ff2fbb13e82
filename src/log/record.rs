//! Encoding and decoding of one record (header + payload).

use super::format::*;
use crate::error::CorruptionReason;

/// A record header as stored on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Payload length in bytes.
    pub payload_len: u32,
    /// Log sequence number.
    pub lsn: u64,
    /// Record kind (never 0).
    pub kind: u8,
    /// Batch flags.
    pub flags: u8,
}

impl RecordHeader {
    /// Total bytes the record occupies (header + payload).
    pub fn record_bytes(&self) -> u64 {
        RECORD_HEADER_BYTES as u64 + u64::from(self.payload_len)
    }

    /// The header bytes covered by the checksum (everything but the CRC itself).
    fn covered(&self) -> [u8; RECORD_HEADER_BYTES - 4] {
        let mut b = [0u8; RECORD_HEADER_BYTES - 4];
        let base = REC_LEN_OFFSET;
        b[REC_LEN_OFFSET - base..][..4].copy_from_slice(&self.payload_len.to_le_bytes());
        b[REC_LSN_OFFSET - base..][..8].copy_from_slice(&self.lsn.to_le_bytes());
        b[REC_KIND_OFFSET - base] = self.kind;
        b[REC_FLAGS_OFFSET - base] = self.flags;
        b
    }

    /// The masked checksum of this header with a payload whose plain CRC32 is `payload_crc`.
    pub fn checksum(&self, payload_crc: u32, payload_len: u64) -> u32 {
        let mut h = crc32fast::Hasher::new();
        h.update(&self.covered());
        // The payload's CRC was computed apart (outside the writer's lock); combine()
        // yields the CRC of header bytes followed by payload bytes.
        h.combine(&crc32fast::Hasher::new_with_initial_len(
            payload_crc,
            payload_len,
        ));
        mask_crc(h.finalize())
    }
}

/// Plain CRC32 of a payload, computed once so the writer can do it outside its lock.
pub fn payload_crc(payload: &[u8]) -> u32 {
    crc32fast::hash(payload)
}

/// Appends an encoded record to `out`.
pub fn encode_into(out: &mut Vec<u8>, header: &RecordHeader, payload_crc: u32, payload: &[u8]) {
    debug_assert_eq!(payload.len() as u64, u64::from(header.payload_len));
    debug_assert!(header.kind != KIND_UNWRITTEN, "kind 0 is reserved");
    let crc = header.checksum(payload_crc, payload.len() as u64);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&header.covered());
    out.extend_from_slice(payload);
}

/// Why a position does not hold a valid record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The bytes are all zero: unwritten (preallocated) space.
    Unwritten,
    /// Fewer bytes remain than a header needs.
    Truncated,
    /// A check failed.
    Invalid(CorruptionReason),
}

/// Decodes and verifies the record at the start of `buf`.
/// Returns the header and the payload slice.
pub fn decode(buf: &[u8]) -> Result<(RecordHeader, &[u8]), DecodeError> {
    let header = decode_header(buf)?;
    let total = header.record_bytes();
    if total > buf.len() as u64 {
        return Err(DecodeError::Invalid(CorruptionReason::BadLength {
            length: u64::from(header.payload_len),
        }));
    }
    let payload = &buf[RECORD_HEADER_BYTES..total as usize];
    let stored = u32::from_le_bytes(buf[REC_CRC_OFFSET..][..4].try_into().unwrap_or_default());
    // The checksummed bytes (header after its CRC, then the payload) lie contiguous here:
    // one pass, no combine. `parse_header` rejected any byte `covered()` would not
    // reproduce, so this equals `header.checksum(payload_crc(payload), ..)`.
    let computed = mask_crc(crc32fast::hash(&buf[REC_LEN_OFFSET..total as usize]));
    if stored != computed {
        return Err(DecodeError::Invalid(CorruptionReason::ChecksumMismatch {
            stored,
            computed,
        }));
    }
    Ok((header, payload))
}

/// Parses and sanity-checks a header without verifying the checksum; the record must
/// fit in `buf`.
pub fn decode_header(buf: &[u8]) -> Result<RecordHeader, DecodeError> {
    let header = parse_header(buf)?;
    if header.record_bytes() > buf.len() as u64 {
        return Err(DecodeError::Invalid(CorruptionReason::BadLength {
            length: u64::from(header.payload_len),
        }));
    }
    Ok(header)
}

/// Parses and sanity-checks the header at the start of `buf` (at least a header long),
/// without checking that its payload fits.
pub fn parse_header(buf: &[u8]) -> Result<RecordHeader, DecodeError> {
    let Some(h) = buf.get(..RECORD_HEADER_BYTES) else {
        return if buf.iter().all(|&b| b == 0) {
            Err(DecodeError::Unwritten)
        } else {
            Err(DecodeError::Truncated)
        };
    };
    if h.iter().all(|&b| b == 0) {
        return Err(DecodeError::Unwritten);
    }
    let le32 = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
    let mut lsn = [0u8; 8];
    lsn.copy_from_slice(&h[REC_LSN_OFFSET..REC_LSN_OFFSET + 8]);
    let header = RecordHeader {
        payload_len: le32(REC_LEN_OFFSET),
        lsn: u64::from_le_bytes(lsn),
        kind: h[REC_KIND_OFFSET],
        flags: h[REC_FLAGS_OFFSET],
    };
    if header.kind == KIND_UNWRITTEN || (header.kind > KIND_USER_MAX && header.kind != KIND_SEAL) {
        return Err(DecodeError::Invalid(CorruptionReason::UnknownKind(
            header.kind,
        )));
    }
    let reserved = &h[REC_RESERVED_OFFSET..RECORD_HEADER_BYTES];
    if header.flags & !FLAGS_KNOWN != 0
        || reserved.iter().any(|&b| b != 0)
        || (header.flags & FLAG_DURABLE_BEFORE != 0 && header.flags & FLAG_BATCH_START == 0)
    {
        return Err(DecodeError::Invalid(CorruptionReason::BadFlags(
            header.flags,
        )));
    }
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(kind: u8, flags: u8, lsn: u64, payload: &[u8]) -> Vec<u8> {
        let h = RecordHeader {
            payload_len: payload.len() as u32,
            lsn,
            kind,
            flags,
        };
        let mut out = Vec::new();
        encode_into(&mut out, &h, payload_crc(payload), payload);
        out
    }

    #[test]
    fn round_trip() {
        let buf = encode(3, FLAG_BATCH_START | FLAG_BATCH_END, 42, b"hello");
        let (h, p) = decode(&buf).expect("valid");
        assert_eq!((h.kind, h.lsn, p), (3, 42, &b"hello"[..]));
    }

    #[test]
    fn zeros_are_unwritten_not_valid() {
        assert_eq!(decode(&[0u8; 64]).unwrap_err(), DecodeError::Unwritten);
    }

    #[test]
    fn contiguous_checksum_equals_the_combined_one() {
        for len in [0usize, 1, 7, 64, 1000, 70_000] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let h = RecordHeader {
                payload_len: len as u32,
                lsn: 0x0123_4567_89ab_cdef,
                kind: 7,
                flags: FLAG_BATCH_START | FLAG_DURABLE_BEFORE,
            };
            let buf = encode(h.kind, h.flags, h.lsn, &payload);
            let whole = mask_crc(crc32fast::hash(&buf[REC_LEN_OFFSET..]));
            assert_eq!(whole, h.checksum(payload_crc(&payload), len as u64));
            assert_eq!(decode(&buf).expect("valid").0, h);
        }
    }

    #[test]
    fn every_bit_flip_is_detected() {
        let buf = encode(1, FLAG_BATCH_START | FLAG_BATCH_END, 7, &[9u8; 40]);
        for bit in 0..buf.len() * 8 {
            let mut b = buf.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&b).is_err(), "flip of bit {bit} went unnoticed");
        }
    }
}
