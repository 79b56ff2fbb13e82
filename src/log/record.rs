//! Encoding and decoding of one record (header + payload).

use super::format::*;
use crate::error::CorruptionReason;

/// What a segment's record checksums mix in before the header bytes: nothing in a
/// format-v1 segment, the segment's 32-bit salt in a v2 one (docs/format.md §3). Two
/// different salts never give one record the same checksum: the two CRCs differ by the
/// CRC of a non-zero 32-bit burst, which CRC-32 always detects. So a record image from
/// another segment life, or another store, never validates here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Salt {
    /// Format v1: the checksum covers the header bytes and the payload only.
    Unsalted,
    /// Format v2: the salt's 4 little-endian bytes come first.
    Salted(u32),
}

impl Salt {
    /// A hasher that has already taken the salt in.
    pub fn hasher(self) -> crc32fast::Hasher {
        let mut h = crc32fast::Hasher::new();
        if let Salt::Salted(salt) = self {
            h.update(&salt.to_le_bytes());
        }
        h
    }

    /// The masked checksum of `bytes` (a record's header after its CRC field, then its
    /// payload) under this salt.
    pub fn checksum(self, bytes: &[u8]) -> u32 {
        let mut h = self.hasher();
        h.update(bytes);
        mask_crc(h.finalize())
    }
}

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

    /// The masked checksum of this header with a payload whose plain CRC32 is
    /// `payload_crc`, in a segment whose records carry `salt`.
    pub fn checksum(&self, salt: Salt, payload_crc: u32, payload_len: u64) -> u32 {
        let mut h = salt.hasher();
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

/// Appends an encoded record to `out`, checksummed for a segment whose records carry
/// `salt`.
pub fn encode_into(
    out: &mut Vec<u8>,
    salt: Salt,
    header: &RecordHeader,
    payload_crc: u32,
    payload: &[u8],
) {
    debug_assert_eq!(payload.len() as u64, u64::from(header.payload_len));
    debug_assert!(header.kind != KIND_UNWRITTEN, "kind 0 is reserved");
    let crc = header.checksum(salt, payload_crc, payload.len() as u64);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&header.covered());
    out.extend_from_slice(payload);
}

/// A record the log writes for itself at the end of a segment's data, never delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Internal {
    /// The seal ([`KIND_SEAL`]): ends a full segment and names the next one, its payload.
    Seal {
        /// The id of the segment that follows.
        next_id: u64,
    },
    /// The close record ([`KIND_CLOSE`]): no payload.
    Close,
}

/// Appends internal record `record` to `out`, checksummed under `salt`, as a batch of its
/// own carrying `lsn` (the LSN it hands on: internal records have none of their own).
/// `durable_before`: every byte before it was durable when it was written. The one
/// encoder of seals and close records, so that every writer of one (rotation, close,
/// the seal at open, compaction) lays it out the same.
pub(crate) fn encode_internal(
    out: &mut Vec<u8>,
    salt: Salt,
    record: Internal,
    lsn: u64,
    durable_before: bool,
) {
    let next_id;
    let (kind, payload): (u8, &[u8]) = match record {
        Internal::Seal { next_id: id } => {
            next_id = id.to_le_bytes();
            (KIND_SEAL, &next_id)
        }
        Internal::Close => (KIND_CLOSE, &[]),
    };
    const _: () = assert!(SEAL_PAYLOAD_BYTES == std::mem::size_of::<u64>());
    let mut flags = FLAG_BATCH_START | FLAG_BATCH_END;
    if durable_before {
        flags |= FLAG_DURABLE_BEFORE;
    }
    let header = RecordHeader {
        payload_len: payload.len() as u32,
        lsn,
        kind,
        flags,
    };
    encode_into(out, salt, &header, payload_crc(payload), payload);
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

/// Decodes and verifies the record at the start of `buf`, in a segment whose records
/// carry `salt`. Returns the header and the payload slice.
pub fn decode(buf: &[u8], salt: Salt) -> Result<(RecordHeader, &[u8]), DecodeError> {
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
    // reproduce, so this equals `header.checksum(salt, payload_crc(payload), ..)`.
    let computed = salt.checksum(&buf[REC_LEN_OFFSET..total as usize]);
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
    let internal = header.kind == KIND_SEAL || header.kind == KIND_CLOSE;
    if header.kind == KIND_UNWRITTEN || (header.kind > KIND_USER_MAX && !internal) {
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

    const SALT: Salt = Salt::Salted(0x5eed_1234);

    fn encode(kind: u8, flags: u8, lsn: u64, payload: &[u8]) -> Vec<u8> {
        let h = RecordHeader {
            payload_len: payload.len() as u32,
            lsn,
            kind,
            flags,
        };
        let mut out = Vec::new();
        encode_into(&mut out, SALT, &h, payload_crc(payload), payload);
        out
    }

    #[test]
    fn round_trip() {
        let buf = encode(3, FLAG_BATCH_START | FLAG_BATCH_END, 42, b"hello");
        let (h, p) = decode(&buf, SALT).expect("valid");
        assert_eq!((h.kind, h.lsn, p), (3, 42, &b"hello"[..]));
    }

    #[test]
    fn internal_records_keep_their_layout() {
        // The seal: kind 0xFF, the next segment's id (u64 LE) as payload, a batch of its
        // own; the close record: kind 0xFE, no payload.
        let mut seal = Vec::new();
        encode_internal(&mut seal, SALT, Internal::Seal { next_id: 9 }, 77, true);
        let flags = FLAG_BATCH_START | FLAG_BATCH_END | FLAG_DURABLE_BEFORE;
        assert_eq!(seal, encode(KIND_SEAL, flags, 77, &9u64.to_le_bytes()));
        assert_eq!(seal.len(), SEAL_RECORD_BYTES);
        let mut close = Vec::new();
        encode_internal(&mut close, SALT, Internal::Close, 78, false);
        let flags = FLAG_BATCH_START | FLAG_BATCH_END;
        assert_eq!(close, encode(KIND_CLOSE, flags, 78, &[]));
    }

    #[test]
    fn zeros_are_unwritten_not_valid() {
        assert_eq!(
            decode(&[0u8; 64], SALT).unwrap_err(),
            DecodeError::Unwritten
        );
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
            let whole = SALT.checksum(&buf[REC_LEN_OFFSET..]);
            assert_eq!(whole, h.checksum(SALT, payload_crc(&payload), len as u64));
            assert_eq!(decode(&buf, SALT).expect("valid").0, h);
        }
    }

    #[test]
    fn every_bit_flip_is_detected() {
        let buf = encode(1, FLAG_BATCH_START | FLAG_BATCH_END, 7, &[9u8; 40]);
        for bit in 0..buf.len() * 8 {
            let mut b = buf.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(
                decode(&b, SALT).is_err(),
                "flip of bit {bit} went unnoticed"
            );
        }
    }

    #[test]
    fn a_record_never_validates_under_another_salt() {
        // Deterministic, not probabilistic: the two CRCs differ by the CRC of a non-zero
        // 32-bit burst. Spot-check many salt pairs, payload sizes and the v1 (unsalted)
        // checksum against the salted ones.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for len in [0usize, 1, 20, 300, 5000] {
            let payload: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            for _ in 0..200 {
                let (a, b) = (next() as u32, next() as u32);
                if a == b {
                    continue;
                }
                let h = RecordHeader {
                    payload_len: len as u32,
                    lsn: next(),
                    kind: 1,
                    flags: FLAG_BATCH_START | FLAG_BATCH_END,
                };
                let mut out = Vec::new();
                encode_into(
                    &mut out,
                    Salt::Salted(a),
                    &h,
                    payload_crc(&payload),
                    &payload,
                );
                assert!(decode(&out, Salt::Salted(a)).is_ok());
                assert!(
                    decode(&out, Salt::Salted(b)).is_err(),
                    "salt {a:#x} vs {b:#x}"
                );
            }
            let mut v1 = Vec::new();
            let h = RecordHeader {
                payload_len: len as u32,
                lsn: 7,
                kind: 2,
                flags: FLAG_BATCH_START | FLAG_BATCH_END,
            };
            encode_into(&mut v1, Salt::Unsalted, &h, payload_crc(&payload), &payload);
            assert!(decode(&v1, Salt::Unsalted).is_ok());
        }
    }
}
