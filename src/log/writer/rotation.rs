//! Segment rotation: seals the full segment (a seal record naming the next one, then an
//! fdatasync) and creates its successor with zeros ahead, before the batch that needs it.

use std::sync::atomic::Ordering;

use super::{Io, Writer};
use crate::error::Result;
use crate::log::format::*;
use crate::log::record::{self, RecordHeader};
use crate::log::segment::create_segment;

impl Io {
    /// creates `next_id`.
    pub(super) fn rotate(&mut self, next_id: u64, next_lsn: u64, w: &Writer) -> Result<()> {
        assert_eq!(
            next_id,
            self.segment_id + 1,
            "segments are created in order"
        );
        if self.file.is_some() {
            self.seal(next_id, next_lsn, w)?;
        } else {
            // Sealed by an earlier writer, and made durable by this one's open.
            debug_assert_eq!(next_lsn, self.sealed_next_lsn, "the seal's LSN comes next");
        }
        let prealloc = PREALLOCATE_BYTES.min(self.segment_bytes) - SEGMENT_HEADER_BYTES as u64;
        let file = create_segment(&*self.storage, &self.dir, next_id, next_lsn, prealloc)?;
        self.file = Some(file);
        self.segment_id = next_id;
        self.segment_end = self.segment_bytes;
        self.write_pos = SEGMENT_HEADER_BYTES as u64;
        self.synced_pos = self.write_pos;
        self.zeroed_end = self.write_pos;
        self.allocated_end = SEGMENT_HEADER_BYTES as u64 + prealloc;
        // Zeros for the first batches of the new segment, durable before they come (as
        // at open): the rotating batch pays for them, not the next ones.
        self.zero_ahead(w)?;
        self.sync(w)?;
        w.active_segment.store(next_id, Ordering::Release);
        w.counters.rotations.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            segment = next_id,
            first_lsn = next_lsn,
            "rotated to a new segment"
        );
        Ok(())
    }

    /// Writes the seal record handing on `next_lsn` to `next_id`, and fdatasyncs it.
    fn seal(&mut self, next_id: u64, next_lsn: u64, w: &Writer) -> Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let mut flags = FLAG_BATCH_START | FLAG_BATCH_END;
        if self.synced_pos == self.write_pos {
            flags |= FLAG_DURABLE_BEFORE;
        }
        let header = RecordHeader {
            payload_len: SEAL_PAYLOAD_BYTES as u32,
            lsn: next_lsn,
            kind: KIND_SEAL,
            flags,
        };
        let payload = next_id.to_le_bytes();
        record::encode_into(&mut buf, &header, record::payload_crc(&payload), &payload);
        // Nothing follows a seal: no zeroing ahead (nor preallocating for it).
        let written = self.write_at_end(&buf, false, w);
        self.buf = buf;
        written?;
        self.sync(w)
    }
}
