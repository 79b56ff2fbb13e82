//! The leader's file side: writes a batch as one run of records per segment, preallocates
//! ahead of it, and fdatasyncs it.

use std::sync::atomic::Ordering;

use super::batch::{Batch, Pending, put_header};
use super::block_fill::FILL_BLOCK_BYTES;
use super::{Io, Writer};
use crate::error::{Error, Result};
use crate::log::format::*;
use crate::log::record::RecordHeader;
use crate::log::segment::{preallocate, segment_path};
use crate::storage::StorageFile;

impl Io {
    /// Writes `batch` (consecutive LSNs, positions planned by `reserve`); syncs if asked.
    /// Returns whether everything written so far is durable.
    pub(super) fn write_batch(
        &mut self,
        batch: &mut Batch,
        sync: bool,
        w: &Writer,
    ) -> Result<bool> {
        let mut rest = &batch.records[..];
        let mut bytes = &mut batch.bytes[..];
        while let Some(first) = rest.first() {
            if first.pos.segment_id != self.segment_id {
                self.rotate(first.pos.segment_id, first.lsn, first.record_bytes(), w)?;
            }
            let run = rest
                .iter()
                .take_while(|p| p.pos.segment_id == self.segment_id)
                .count();
            let run_bytes = rest[..run].iter().map(Pending::record_bytes).sum();
            let (these, others) = std::mem::take(&mut bytes).split_at_mut(run_bytes);
            self.write_run(&rest[..run], these, w)?;
            rest = &rest[run..];
            bytes = others;
            if sync || !rest.is_empty() {
                // Invariant (Always mode): at most one unsynced batch exists.
                self.sync_batch(w)?;
            }
        }
        if sync && self.synced_pos < self.write_pos {
            self.sync_batch(w)?;
        }
        Ok(self.synced_pos == self.write_pos)
    }

    /// Writes records of one segment (`bytes`: their encoded bytes, headers still to be
    /// filled in) as one batch with one `write`.
    fn write_run(&mut self, run: &[Pending], bytes: &mut [u8], w: &Writer) -> Result<()> {
        let durable_before = self.synced_pos == self.write_pos;
        let mut at = 0usize;
        for (i, p) in run.iter().enumerate() {
            // Invariant: the leader writes exactly where reservation planned.
            assert_eq!(
                p.pos.offset,
                self.write_pos + at as u64,
                "planned position drifted"
            );
            let mut flags = 0;
            if i == 0 {
                flags |= FLAG_BATCH_START;
                if durable_before {
                    flags |= FLAG_DURABLE_BEFORE;
                }
            }
            if i + 1 == run.len() {
                flags |= FLAG_BATCH_END;
            }
            let header = RecordHeader {
                payload_len: p.payload_len,
                lsn: p.lsn,
                kind: p.kind,
                flags,
            };
            let end = at + p.record_bytes();
            put_header(&mut bytes[at..end], self.salt, &header, p.payload_crc);
            at = end;
        }
        debug_assert_eq!(at, bytes.len(), "run bytes match its records");
        self.write_at_end(bytes, true, w)?;
        w.counters.batches.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Writes `bytes` at `write_pos`. For a `batch` of records (not an internal record,
    /// which nothing follows until a later writer), with zeros to the end of its last
    /// block where the blocks were written before (`block_fill.rs`), and then zeros ahead
    /// if it is time to.
    pub(super) fn write_at_end(&mut self, bytes: &[u8], batch: bool, w: &Writer) -> Result<()> {
        let end = self.write_pos + bytes.len() as u64;
        assert!(end <= self.segment_end, "write past the segment's end");
        self.allocate_through(end)?;
        let fill = if batch { self.fill_after(end) } else { 0 };
        // Invariant: the fill stays inside blocks the file already has.
        assert!(end + fill <= self.allocated_end, "fill past the file's end");
        self.write_filled(bytes, fill)
            .map_err(|e| self.err("writing", e))?;
        self.write_pos = end;
        self.zeroed_end = self.zeroed_end.max(end + fill);
        debug_assert!(
            self.write_pos <= self.allocated_end,
            "write_pos never passes the file's preallocated end"
        );
        w.counters
            .bytes_written
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        w.counters
            .fill_bytes_written
            .fetch_add(fill, Ordering::Relaxed);
        if batch {
            self.zero_ahead(w)?;
        }
        Ok(())
    }

    /// Writes `bytes` at `write_pos` followed by `fill` zeros, each `write` ending on a
    /// block boundary. Only the last block is copied (with the zeros): a batch may be as
    /// large as a snapshot, and the bytes before that block go as they are.
    fn write_filled(&mut self, bytes: &[u8], fill: u64) -> std::io::Result<()> {
        let file = self.file.as_deref().ok_or_else(|| {
            std::io::Error::other("internal error: the next segment is not created")
        })?;
        if fill == 0 {
            return file.write_all_at(bytes, self.write_pos);
        }
        let end = self.write_pos + bytes.len() as u64;
        let last_block = (end / FILL_BLOCK_BYTES * FILL_BLOCK_BYTES).max(self.write_pos);
        let (head, tail) = bytes.split_at((last_block - self.write_pos) as usize);
        if !head.is_empty() {
            file.write_all_at(head, self.write_pos)?;
        }
        let buf = &mut self.fill_buf;
        buf.clear();
        buf.extend_from_slice(tail);
        buf.resize(tail.len() + fill as usize, 0);
        file.write_all_at(buf, last_block)
    }

    /// Makes sure the file is preallocated through `end` (a multiple of
    /// `PREALLOCATE_BYTES` past the current length, within the segment).
    pub(super) fn allocate_through(&mut self, end: u64) -> Result<()> {
        if end <= self.allocated_end {
            return Ok(());
        }
        let grow_to = (self.allocated_end + PREALLOCATE_BYTES)
            .max(end)
            .min(self.segment_end);
        preallocate(
            self.file()?,
            self.allocated_end,
            grow_to - self.allocated_end,
        )
        .map_err(|e| self.err("preallocating", e))?;
        self.allocated_end = grow_to;
        Ok(())
    }

    /// Syncs the data of a batch, and tells the zeroing policy how much it was.
    fn sync_batch(&mut self, w: &Writer) -> Result<()> {
        let bytes = self.write_pos - self.synced_pos;
        self.sync(w)?;
        self.zeroing.observe_sync(bytes);
        Ok(())
    }

    pub(super) fn sync(&mut self, w: &Writer) -> Result<()> {
        self.file()?
            .sync_data()
            .map_err(|e| self.err("fsyncing", e))?;
        w.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.synced_pos = self.write_pos;
        Ok(())
    }

    /// The segment being appended to. Absent only while the final segment is sealed and
    /// its successor not yet created; nothing writes then until `rotate` creates it.
    pub(super) fn file(&self) -> Result<&dyn StorageFile> {
        self.file.as_deref().ok_or_else(|| {
            self.err(
                "writing after the sealed",
                std::io::Error::other("internal error: the next segment is not created"),
            )
        })
    }

    pub(super) fn err(&self, what: &str, e: std::io::Error) -> Error {
        Error::io(
            format!(
                "{what} segment {}",
                segment_path(&self.dir, self.segment_id).display()
            ),
            e,
        )
    }
}
