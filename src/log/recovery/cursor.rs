//! Records to batches: walks the records of one segment and delivers each batch once its
//! last record is read, stopping at the seal or at the first record that does not continue
//! the log. What a stop means is not its business (see [`super::verdict`]).

use std::path::Path;

use super::{LogRecovery, SkippedRange};
use crate::error::{CorruptionReason, Result};
use crate::log::format::*;
use crate::log::record::{self, DecodeError, RecordHeader, Salt};
use crate::log::segment::SegmentHeader;
use crate::log::{RecordRef, RecoveryMode};

/// Where a cursor stopped before the seal.
pub(super) struct Stop {
    /// Offset of the record that does not continue the log.
    pub offset: u64,
    /// Why it does not; `None` for clean unwritten space where a batch would start.
    pub reason: Option<CorruptionReason>,
}

/// How a cursor's run ended.
pub(super) enum CursorEnd {
    /// At the seal record: the segment is complete.
    Sealed,
    /// Before the seal, at the first position that is not a valid continuation.
    Stopped(Stop),
}

/// Walks the records of one segment, delivering complete batches.
pub(super) struct Cursor<'a> {
    buf: &'a [u8],
    /// The segment file `buf` holds.
    path: &'a Path,
    segment_id: u64,
    pos: usize,
    next_lsn: u64,
    /// End of the last complete batch (never past `pos`).
    committed_end: usize,
    /// Records of the batch being read: (offset, header).
    batch: Vec<(usize, RecordHeader)>,
    /// Salvage skips records, and compaction keeps only live ones: LSNs then increase
    /// but may skip.
    lsn_gaps_allowed: bool,
    /// LSN of the last record delivered, to check that delivered LSNs strictly increase.
    last_delivered: Option<u64>,
    /// What the segment's record checksums mix in.
    salt: Salt,
    /// Whether the last complete batch is a close record (a writer closed cleanly there).
    closed: bool,
}

impl<'a> Cursor<'a> {
    /// A cursor at the first record of the segment in `buf`, whose header is `header`.
    pub fn new(buf: &'a [u8], path: &'a Path, header: &SegmentHeader, mode: RecoveryMode) -> Self {
        Cursor {
            buf,
            path,
            segment_id: header.id,
            pos: header.data_start() as usize,
            next_lsn: header.first_lsn,
            committed_end: header.data_start() as usize,
            batch: Vec::new(),
            lsn_gaps_allowed: mode == RecoveryMode::Salvage || header.is_compacted(),
            last_delivered: None,
            salt: header.salt,
            closed: false,
        }
    }

    /// Whether the segment's last complete batch is a close record: the writer that
    /// wrote it closed cleanly, and wrote nothing after it.
    pub fn closed(&self) -> bool {
        self.closed
    }

    /// End of the last complete batch: where a writer appends next.
    pub fn committed_end(&self) -> usize {
        self.committed_end
    }

    /// The LSN the next record must carry (at least, where gaps are allowed).
    pub fn next_lsn(&self) -> u64 {
        self.next_lsn
    }

    /// Runs to the seal or to the first position that is not a valid continuation,
    /// delivering each complete batch to `visit` on the way.
    pub fn run(
        &mut self,
        visit: &mut dyn FnMut(RecordRef<'_>) -> Result<()>,
        report: &mut LogRecovery,
    ) -> Result<CursorEnd> {
        loop {
            let at = self.pos;
            let stop = |reason| {
                CursorEnd::Stopped(Stop {
                    offset: at as u64,
                    reason,
                })
            };
            let (h, _) = match record::decode(&self.buf[at..], self.salt) {
                Ok(ok) => ok,
                Err(DecodeError::Unwritten) if self.batch.is_empty() => return Ok(stop(None)),
                Err(DecodeError::Unwritten | DecodeError::Truncated) => {
                    return Ok(stop(Some(CorruptionReason::BadLength { length: 0 })));
                }
                Err(DecodeError::Invalid(reason)) => return Ok(stop(Some(reason))),
            };
            if let Err(reason) = self.check_sequence(&h) {
                return Ok(stop(Some(reason)));
            }
            if h.kind == KIND_SEAL {
                return Ok(self
                    .seal(at, &h)
                    .unwrap_or_else(|reason| stop(Some(reason))));
            }
            if h.kind == KIND_CLOSE {
                if let Err(reason) = self.close(&h) {
                    return Ok(stop(Some(reason)));
                }
                continue;
            }
            // A batch after a close record: a later writer appended past it, so it no
            // longer ends this life's bytes, even if that batch turns out torn.
            self.closed = false;
            self.batch.push((at, h));
            self.pos += h.record_bytes() as usize;
            self.next_lsn = h.lsn + 1;
            if h.flags & FLAG_BATCH_END != 0 {
                self.deliver(visit, report)?;
            }
        }
    }

    /// Takes the seal record at `at`. The seal is a batch of its own and does not consume
    /// an LSN; it names the next segment and hands on the next LSN.
    fn seal(&mut self, at: usize, h: &RecordHeader) -> Result<CursorEnd, CorruptionReason> {
        let start = at + RECORD_HEADER_BYTES;
        let next = self.buf.get(start..start + SEAL_PAYLOAD_BYTES);
        let next_id = next.and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
        if next_id != Some(self.segment_id + 1) {
            return Err(CorruptionReason::BrokenChain(format!(
                "seal names segment {next_id:?}, not {}",
                self.segment_id + 1
            )));
        }
        self.next_lsn = h.lsn;
        self.pos += h.record_bytes() as usize;
        self.committed_end = self.pos;
        Ok(CursorEnd::Sealed)
    }

    /// Takes the close record `h`: a batch of its own, with no payload and no LSN of its
    /// own (it carries the next one). Only format v2 has it.
    fn close(&mut self, h: &RecordHeader) -> Result<(), CorruptionReason> {
        if self.salt == Salt::Unsalted {
            return Err(CorruptionReason::UnknownKind(h.kind));
        }
        if h.payload_len != 0 || h.lsn != self.next_lsn {
            return Err(CorruptionReason::BadLength {
                length: u64::from(h.payload_len),
            });
        }
        self.pos += h.record_bytes() as usize;
        self.committed_end = self.pos;
        self.closed = true;
        Ok(())
    }

    fn check_sequence(&self, h: &RecordHeader) -> Result<(), CorruptionReason> {
        let starts = h.flags & FLAG_BATCH_START != 0;
        if starts != self.batch.is_empty() {
            return Err(CorruptionReason::BadFlags(h.flags));
        }
        let internal = h.kind == KIND_SEAL || h.kind == KIND_CLOSE;
        if internal && h.flags & FLAG_BATCH_END == 0 {
            return Err(CorruptionReason::BadFlags(h.flags));
        }
        let lsn_ok = h.lsn == self.next_lsn || (self.lsn_gaps_allowed && h.lsn > self.next_lsn);
        if !lsn_ok {
            return Err(CorruptionReason::LsnGap {
                expected: self.next_lsn,
                found: h.lsn,
            });
        }
        Ok(())
    }

    fn deliver(
        &mut self,
        visit: &mut dyn FnMut(RecordRef<'_>) -> Result<()>,
        report: &mut LogRecovery,
    ) -> Result<()> {
        for (offset, h) in self.batch.drain(..) {
            // `check_sequence` let through only LSNs above the last one; delivering one
            // that is not would hand the index two versions of a record in the wrong order.
            debug_assert!(
                self.last_delivered.is_none_or(|last| h.lsn > last),
                "delivered LSNs strictly increase within a segment"
            );
            self.last_delivered = Some(h.lsn);
            let start = offset + RECORD_HEADER_BYTES;
            visit(RecordRef {
                segment_id: self.segment_id,
                offset: offset as u64,
                lsn: h.lsn,
                kind: h.kind,
                payload: &self.buf[start..start + h.payload_len as usize],
                segment: self.path,
            })?;
            report.records += 1;
            report.bytes += h.record_bytes();
        }
        self.committed_end = self.pos;
        self.closed = false;
        Ok(())
    }

    /// Forgets the records of an unfinished batch: they are never delivered, so their
    /// LSNs are free again (the writer reuses them after zeroing the torn bytes).
    pub fn drop_partial_batch(&mut self) {
        if let Some((_, first)) = self.batch.first() {
            self.next_lsn = first.lsn;
        }
        self.batch.clear();
        assert!(self.committed_end <= self.pos, "committed_end passed pos");
    }

    /// Salvage: drops the partial batch and resumes at the valid batch at `later`,
    /// reporting the bytes in between as skipped for `reason`.
    pub fn skip_to(&mut self, later: usize, reason: CorruptionReason, report: &mut LogRecovery) {
        // Strictly forward: resuming where the scan stopped would stop there again, forever.
        assert!(
            later > self.committed_end,
            "salvage resumes past the damage"
        );
        report.skipped.push(SkippedRange {
            segment: self.path.to_path_buf(),
            offset: self.committed_end as u64,
            bytes: (later - self.committed_end) as u64,
            reason,
        });
        self.batch.clear();
        self.pos = later;
        self.committed_end = later;
    }
}
