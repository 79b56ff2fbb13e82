//! Segment rotation: seals the full segment (a seal record naming the next one, then an
//! fdatasync) and makes its successor, from a retired file when one waits for reuse or
//! else a new file with zeros ahead, before the batch that needs it.

use std::sync::atomic::Ordering;

use super::{Io, Writer};
use crate::error::Result;
use crate::log::format::*;
use crate::log::record::{self, Internal, Salt};
use crate::log::recycle;
use crate::log::segment::{Chain, SegmentHeader, create_segment, recycle_segment};
use crate::storage::StorageFile;

impl Io {
    /// Seals the current segment (seal record + fsync), unless it is sealed already, then
    /// makes `next_id`, large enough for a first record of `first_record_bytes`.
    pub(super) fn rotate(
        &mut self,
        next_id: u64,
        next_lsn: u64,
        first_record_bytes: usize,
        w: &Writer,
    ) -> Result<()> {
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
        // A record too large for a segment of `segment_bytes` gets one of its own (docs/format.md §5).
        let needed = (SEGMENT_HEADER_BYTES + first_record_bytes + SEAL_RECORD_BYTES) as u64;
        self.segment_end = self.segment_bytes.max(needed);
        let raw_salt = self.salts.next();
        let salt = Salt::Salted(raw_salt);
        let mut header = SegmentHeader {
            id: next_id,
            first_lsn: next_lsn,
            flags: 0,
            salt,
            // Ties the new segment to its store and to the one just sealed (§2.2).
            chain: Some(Chain {
                store_id: w.store_id,
                prev_link: self.hand_on.unwrap_or(0),
                next_link: raw_salt,
            }),
        };
        let free = recycle::take(&*self.storage, &self.dir, needed, self.segment_end)?;
        let file: Box<dyn StorageFile> = match free {
            Some(free) => {
                header.flags |= SEGMENT_FLAG_RECYCLED;
                let file = recycle_segment(&*self.storage, &self.dir, &free.path, header)?;
                // Written through by its earlier life (data and zeros), as far as the
                // extent map says: no zeros to write ahead, no extents to convert.
                self.allocated_end = free.file_bytes;
                self.zeroed_end = file.written_end(SEGMENT_HEADER_BYTES as u64);
                self.recycled = true;
                w.counters.recycled.fetch_add(1, Ordering::Relaxed);
                file
            }
            None => {
                let prealloc =
                    PREALLOCATE_BYTES.min(self.segment_end) - SEGMENT_HEADER_BYTES as u64;
                let file = create_segment(&*self.storage, &self.dir, header, prealloc)?;
                self.allocated_end = SEGMENT_HEADER_BYTES as u64 + prealloc;
                self.zeroed_end = SEGMENT_HEADER_BYTES as u64;
                self.recycled = false;
                file
            }
        };
        self.file = Some(file);
        self.segment_id = next_id;
        self.salt = salt;
        self.hand_on = Some(raw_salt);
        self.write_pos = SEGMENT_HEADER_BYTES as u64;
        self.synced_pos = self.write_pos;
        self.zeroed_end = self.zeroed_end.clamp(self.write_pos, self.allocated_end);
        // A recycled file's earlier life lies ahead: fill the blocks writes end in.
        self.set_cold_end(if self.recycled {
            self.zeroed_end
        } else {
            self.write_pos
        });
        // Zeros for the first batches of the new segment, durable before they come (as
        // at open): the rotating batch pays for them, not the next ones.
        self.zero_ahead(w)?;
        self.sync(w)?;
        w.active_segment.store(next_id, Ordering::Release);
        w.counters.rotations.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            segment = next_id,
            first_lsn = next_lsn,
            recycled = self.recycled,
            "rotated to a new segment"
        );
        Ok(())
    }

    /// Writes the seal record handing on `next_lsn` to `next_id`, and fdatasyncs it.
    fn seal(&mut self, next_id: u64, next_lsn: u64, w: &Writer) -> Result<()> {
        self.write_internal(Internal::Seal { next_id }, next_lsn, w)?;
        self.sync(w)
    }

    /// Writes an internal record (a seal, or a close record) carrying `lsn` as a batch of
    /// its own at the end of the data. Nothing follows either: no zeroing ahead (nor
    /// preallocating for it).
    pub(super) fn write_internal(&mut self, record: Internal, lsn: u64, w: &Writer) -> Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let durable_before = self.synced_pos == self.write_pos;
        record::encode_internal(&mut buf, self.salt, record, lsn, durable_before);
        let written = self.write_at_end(&buf, false, w);
        self.buf = buf;
        written
    }
}

impl Writer {
    /// Seals the active segment if it holds a record, so that compaction can take it
    /// (`Store::compact` on a store smaller than a segment). The next append makes the
    /// next segment, as after an open that found the final segment sealed (§3.5, step
    /// 8). Returns whether it sealed one.
    ///
    /// Under `shared`, the tail moves past the segment's room, so every record appended
    /// from then on (LSN `target` and later) is planned in the next segment; once every record before
    /// `target` is written, the seal handing on `target` goes at the end of the data,
    /// unless a leader's rotation sealed the segment first (for a record planned there).
    pub fn seal_active(&self) -> Result<bool> {
        let (segment, target) = {
            let mut shared = self.shared.lock();
            if let Some(cause) = &shared.poisoned {
                return Err(crate::error::Error::Poisoned {
                    cause: cause.clone(),
                });
            }
            let tail = shared.tail;
            if tail.offset <= SEGMENT_HEADER_BYTES as u64 {
                return Ok(false);
            }
            // The tail stays in the sealed segment, past its room, as a reopened writer's
            // does (`Writer::new`): the next record, whatever its size, then goes to the
            // next segment. Moving the tail to the next segment's start instead sent a
            // record larger than a segment one further (`reserve` skips a full segment),
            // past a segment never created.
            shared.tail = crate::log::RecordPos {
                segment_id: tail.segment_id,
                offset: tail.offset.max(self.segment_bytes),
            };
            (tail.segment_id, shared.next_lsn)
        };
        self.drive(self.shared.lock(), target, false)?;
        let mut io = self.io.lock();
        if io.segment_id != segment || io.file.is_none() {
            return Ok(false);
        }
        if let Err(e) = io.seal(segment + 1, target, self) {
            // Half a seal may be on disk, or an fsync failed (whose pages the kernel may
            // have dropped): as after a failed batch, no more writes through this handle.
            drop(io);
            self.poison(&e);
            return Err(e);
        }
        io.file = None;
        io.sealed_next_lsn = target;
        self.active_segment.store(segment + 1, Ordering::Release);
        Ok(true)
    }
}
