//! The queue appenders fill and a leader writes: each record's planned position, and the
//! encoded records back to back in one buffer (headers filled in by the leader).

use crate::log::RecordPos;
use crate::log::format::*;
use crate::log::record::{RecordHeader, Salt};

/// A batch's buffers are shrunk back to this many bytes after use (one huge batch should
/// not pin its memory for the life of the log).
const SPARE_BYTES_MAX: usize = 4 << 20;

/// A record waiting for a leader to write it. Its bytes are in [`Batch::bytes`].
pub(super) struct Pending {
    pub(super) lsn: u64,
    pub(super) pos: RecordPos,
    pub(super) kind: u8,
    /// The payload's CRC when the appender computed it (large payloads only).
    pub(super) payload_crc: Option<u32>,
    pub(super) payload_len: u32,
}

impl Pending {
    #[inline]
    pub(super) fn record_bytes(&self) -> usize {
        RECORD_HEADER_BYTES + self.payload_len as usize
    }
}

/// Queued records, and their encoded bytes back to back in LSN order: each record is a
/// header (zeros until the leader fills it in) followed by its payload.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) records: Vec<Pending>,
    pub(super) bytes: Vec<u8>,
}

impl Batch {
    pub(super) fn push(&mut self, pending: Pending, payload: &[u8]) {
        self.bytes.extend_from_slice(&[0u8; RECORD_HEADER_BYTES]);
        self.bytes.extend_from_slice(payload);
        self.records.push(pending);
    }

    /// Empties the batch for reuse, keeping (bounded) capacity.
    pub(super) fn clear(&mut self) {
        self.records.clear();
        self.records
            .shrink_to(SPARE_BYTES_MAX / std::mem::size_of::<Pending>());
        self.bytes.clear();
        self.bytes.shrink_to(SPARE_BYTES_MAX);
    }
}

/// Plans where a record of `payload_bytes` goes, moving `tail` past it. A record that
/// would leave no room for the seal goes to the start of the next segment. One too large
/// for any segment of `segment_bytes` goes there too: that segment is made large enough
/// for it alone (the writer sizes it at rotation), and the tail then lies past
/// `segment_bytes`, so the next record goes to the segment after.
pub(super) fn reserve(tail: &mut RecordPos, payload_bytes: u64, segment_bytes: u64) -> RecordPos {
    let record_bytes = RECORD_HEADER_BYTES as u64 + payload_bytes;
    if tail.offset + record_bytes + SEAL_RECORD_BYTES as u64 > segment_bytes {
        *tail = RecordPos {
            segment_id: tail.segment_id + 1,
            offset: SEGMENT_HEADER_BYTES as u64,
        };
    }
    let pos = *tail;
    tail.offset += record_bytes;
    pos
}

/// Writes the encoded header of a record into `record` (its header bytes, then its
/// payload), exactly as [`record::encode_into`](crate::log::record::encode_into) lays it out. Without the payload's CRC at
/// hand, the checksum is computed over the record's bytes as they lie.
pub(super) fn put_header(
    record: &mut [u8],
    salt: Salt,
    header: &RecordHeader,
    payload_crc: Option<u32>,
) {
    debug_assert_eq!(record.len() as u64, header.record_bytes());
    record[REC_LEN_OFFSET..][..4].copy_from_slice(&header.payload_len.to_le_bytes());
    record[REC_LSN_OFFSET..][..8].copy_from_slice(&header.lsn.to_le_bytes());
    record[REC_KIND_OFFSET] = header.kind;
    record[REC_FLAGS_OFFSET] = header.flags;
    record[REC_RESERVED_OFFSET..RECORD_HEADER_BYTES].fill(0);
    let crc = match payload_crc {
        Some(payload_crc) => header.checksum(salt, payload_crc, u64::from(header.payload_len)),
        // The checksum covers the header after its CRC field, then the payload: here
        // contiguous.
        None => salt.checksum(&record[REC_LEN_OFFSET..]),
    };
    record[REC_CRC_OFFSET..][..4].copy_from_slice(&crc.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::record;
    use crate::log::writer::APPENDER_CRC_MIN_BYTES;

    #[test]
    fn put_header_matches_encode_into() {
        for (payload, lsn, kind, flags) in [
            (
                &b""[..],
                1,
                1,
                FLAG_BATCH_START | FLAG_BATCH_END | FLAG_DURABLE_BEFORE,
            ),
            (&b"hello"[..], u64::MAX - 1, KIND_USER_MAX, FLAG_BATCH_START),
            (&[0xA5u8; 300][..], 1 << 40, KIND_SEAL, FLAG_BATCH_END),
            (&[0u8; 4096][..], 7, 3, 0),
            (
                &[0x5Au8; APPENDER_CRC_MIN_BYTES + 1][..],
                9,
                2,
                FLAG_BATCH_END,
            ),
        ] {
            let header = RecordHeader {
                payload_len: payload.len() as u32,
                lsn,
                kind,
                flags,
            };
            let crc = record::payload_crc(payload);
            let salt = Salt::Salted(0xabcd_0123);
            let mut expected = Vec::new();
            record::encode_into(&mut expected, salt, &header, crc, payload);
            // Both ways: with the payload's CRC from the appender, and computed in place.
            for given in [Some(crc), None] {
                let mut got = vec![0xFFu8; RECORD_HEADER_BYTES];
                got.extend_from_slice(payload);
                put_header(&mut got, salt, &header, given);
                assert_eq!(got, expected, "payload CRC given: {}", given.is_some());
            }
        }
    }

    #[test]
    fn batch_bytes_are_records_back_to_back() {
        let mut b = Batch::default();
        for (lsn, payload) in [(1u64, &b"ab"[..]), (2, &b""[..]), (3, &b"xyz"[..])] {
            let pos = RecordPos {
                segment_id: 1,
                offset: 0,
            };
            let pending = Pending {
                lsn,
                pos,
                kind: 1,
                payload_crc: None,
                payload_len: payload.len() as u32,
            };
            b.push(pending, payload);
        }
        let total: usize = b.records.iter().map(Pending::record_bytes).sum();
        assert_eq!(total, b.bytes.len());
        assert_eq!(&b.bytes[RECORD_HEADER_BYTES..][..2], b"ab");
        b.clear();
        assert!(b.records.is_empty() && b.bytes.is_empty());
    }
}
