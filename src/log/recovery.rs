//! Recovery: scans every segment on open, verifies every checksum, delivers complete
//! batches to a visitor, and decides what is a torn tail and what is corruption.
//!
//! The rule (DESIGN.md, "Recovery rules"): an invalid or incomplete batch is a torn tail
//! only when it sits in the final segment and no later record carries
//! `FLAG_DURABLE_BEFORE`. That flag marks a batch written after every earlier byte was
//! durable, so finding one after a bad region proves the bad region was once durable:
//! that is corruption, never a tear.

use std::path::{Path, PathBuf};

use super::format::*;
use super::record::{self, DecodeError, RecordHeader};
use super::segment::{SegmentHeader, list_segments};
use super::{RecordRef, RecoveryMode};
use crate::error::{CorruptionReason, Error, Result};
use crate::storage::{FileView, Storage, StorageFile};

/// What recovery found, for reports and for the writer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogRecovery {
    /// Records delivered (complete batches only; seals excluded).
    pub records: u64,
    /// Bytes of valid records scanned.
    pub bytes: u64,
    /// Segment files scanned.
    pub segments: u64,
    /// Bytes of the torn tail ignored (and, for a writer, zeroed).
    pub torn_bytes: u64,
    /// Byte ranges skipped under `RecoveryMode::Salvage`, with the reason.
    pub skipped: Vec<SkippedRange>,
}

/// A corrupt range skipped by salvage recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedRange {
    /// The segment file.
    pub segment: PathBuf,
    /// First byte skipped.
    pub offset: u64,
    /// Bytes skipped.
    pub bytes: u64,
    /// Why the first record there was rejected.
    pub reason: CorruptionReason,
}

/// The state of one segment after recovery.
#[derive(Debug, Clone)]
pub(crate) struct SegmentState {
    pub id: u64,
    pub path: PathBuf,
    /// Offset just past the last complete batch (where a writer appends next).
    pub data_end: u64,
    /// Offset just past the last non-zero byte of the torn tail (0 if none).
    pub dirty_end: u64,
    /// Whether the segment ends with a seal record.
    pub sealed: bool,
    /// The file's length on disk.
    pub file_bytes: u64,
}

/// What keeps the bytes a read-only scan read readable for the handle's lifetime, however
/// a writer renames or deletes the file afterwards (DESIGN.md §5.4).
#[derive(Clone)]
pub(crate) enum SegmentPin {
    /// The bytes themselves: a memory map of the file as scanned, or a copy of them.
    Bytes(FileView),
    /// The open file the scan read: the writer may still append past what was scanned,
    /// but never changes a byte below it.
    File(std::sync::Arc<dyn StorageFile>),
}

/// A sealed segment at most this large is pinned as a copy rather than a memory map, so a
/// store of many small segments does not run into the kernel's limit on maps per process
/// (`vm.max_map_count`, 65,530 by default). Memory held is then at most the store's size.
pub(crate) const PIN_COPY_BYTES_MAX: usize = 1 << 20;

/// Everything `open` learns from the scan.
pub(crate) struct Scan {
    pub segments: Vec<SegmentState>,
    /// Read-only scans only: per scanned segment id, the bytes its records were read from.
    pub pins: Vec<(u64, SegmentPin)>,
    /// Segments superseded by a compacted segment (left over by a crash); skipped.
    pub superseded: Vec<PathBuf>,
    pub next_lsn: u64,
    pub report: LogRecovery,
}

/// Scans all segments of `dir`, calling `visit` for each record of each complete batch.
/// `locked`: the caller holds the directory's writer lock (and writes nothing during the
/// scan), so no segment changes while it is read.
pub(crate) fn scan(
    storage: &dyn Storage,
    dir: &Path,
    mode: RecoveryMode,
    locked: bool,
    visit: &mut dyn FnMut(RecordRef<'_>) -> Result<()>,
) -> Result<Scan> {
    let mut files = list_segments(storage, dir)?;
    let (first, headers) = live_headers(storage, &files)?;
    let superseded = files.drain(..first).map(|(_, p)| p).collect();
    if mode != RecoveryMode::Salvage {
        // Judged before any segment's records, so that a file that does not belong (a
        // stray or empty `.wal`, one past a gap) is the one named, not the healthy final
        // segment the scan would otherwise find "followed" by it.
        check_sequence(&files)?;
        if let Some(Err(e)) = headers.into_iter().find(|h| h.is_err()) {
            return Err(e);
        }
    }
    let mut out = Scan {
        superseded,
        segments: Vec::with_capacity(files.len()),
        pins: Vec::new(),
        next_lsn: 1,
        report: LogRecovery::default(),
    };
    let mut expected: Option<(u64, u64)> = None; // (segment id, first lsn) the chain demands
    let mut read_buf = Vec::new();
    for (index, (id, path)) in files.iter().enumerate() {
        let is_last = index + 1 == files.len();
        // A segment followed by another is never written again (the writer seals it
        // before creating the next; compaction replaces files by rename): read it in
        // place through a memory map, without copying it. The last one may be written
        // meanwhile by a writer, unless the caller holds the lock: then copy it.
        let view = match is_last && !locked {
            true => None,
            false => view_whole(storage, path)?,
        };
        let source = match view {
            Some(view) => Source::Mapped(view),
            None => Source::Read(read_whole(storage, path, &mut read_buf)?),
        };
        let buf: &[u8] = match &source {
            Source::Mapped(view) => view,
            Source::Read(_) => &read_buf,
        };
        let header = SegmentHeader::decode(buf, path)?;
        if header.is_compacted() && index > 0 {
            // Only possible when a compaction finished between listing and reading (a
            // read-only scan retries) or when files were tampered with.
            return Err(Error::Corruption {
                segment: path.clone(),
                offset: 0,
                reason: CorruptionReason::BrokenChain(
                    "compacted segment after older segments".into(),
                ),
            });
        }
        check_chain(path, *id, &header, expected, mode)?;
        let state = scan_segment(buf, path, &header, is_last, mode, visit, &mut out.report)?;
        // Never hand the writer an LSN an earlier segment already used: salvage does not
        // check the chain, so a later segment may start below an earlier one's end. (In
        // the other modes the chain check makes this a no-op.)
        out.next_lsn = match index {
            0 => state.1,
            _ => out.next_lsn.max(state.1),
        };
        expected = state.0.sealed.then_some((state.0.id + 1, state.1));
        if !locked {
            // Exactly the bytes just scanned: reads through this handle find the records
            // it indexed, never what a later compaction put under the same name.
            out.pins.push((*id, source.pin()));
        }
        out.report.segments += 1;
        out.segments.push(state.0);
    }
    Ok(out)
}

/// The index of the newest segment written by compaction (it supersedes all before it;
/// 0 if none), and the headers of it and every later segment, in order. Read from the
/// last segment back, so superseded files (which a compaction may be deleting) are never
/// opened. An I/O error fails the scan (it is no verdict on the file); a header that does
/// not decode is kept as its error.
fn live_headers(
    storage: &dyn Storage,
    files: &[(u64, PathBuf)],
) -> Result<(usize, Vec<Result<SegmentHeader>>)> {
    let mut headers = Vec::with_capacity(files.len());
    for (index, (_, path)) in files.iter().enumerate().rev() {
        let header = read_header(storage, path)?;
        let compacted = header.as_ref().is_ok_and(|h| h.is_compacted());
        headers.push(header);
        if compacted {
            headers.reverse();
            return Ok((index, headers));
        }
    }
    headers.reverse();
    Ok((0, headers))
}

fn read_header(storage: &dyn Storage, path: &Path) -> Result<Result<SegmentHeader>> {
    let io_error = |e| Error::io(format!("reading {}", path.display()), e);
    let mut buf = [0u8; SEGMENT_HEADER_BYTES];
    let file = storage.open(path, false).map_err(io_error)?;
    let bytes = match file.read_exact_at(&mut buf, 0) {
        Ok(()) => buf.len(),
        // Too short for a header: the decode says so (and whether it is empty).
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            // (Capped: a reader racing a writer must not index past the buffer.)
            let len = file.len().map_err(io_error)?.min(buf.len() as u64) as usize;
            file.read_exact_at(&mut buf[..len], 0).map_err(io_error)?;
            len
        }
        // Taking an unreadable file for "not compacted" would read superseded segments
        // and report the compacted one as corruption.
        Err(e) => return Err(io_error(e)),
    };
    Ok(SegmentHeader::decode(&buf[..bytes], path))
}

/// Segment ids go up by one from the first (compaction deletes only ids below the one it
/// replaces): a gap names the file after it, the one out of sequence.
fn check_sequence(files: &[(u64, PathBuf)]) -> Result<()> {
    for pair in files.windows(2) {
        let ((before, _), (id, path)) = (&pair[0], &pair[1]);
        if *id != before + 1 {
            let missing = match id - before {
                2 => format!("segment {} is", before + 1),
                _ => format!("segments {}..={} are", before + 1, id - 1),
            };
            return Err(Error::Corruption {
                segment: path.clone(),
                offset: 0,
                reason: CorruptionReason::BrokenChain(format!(
                    "segment {id} is out of sequence: it follows segment {before}, and \
                     {missing} missing (deleted, or this file does not belong here)"
                )),
            });
        }
    }
    Ok(())
}

/// Reads the whole segment into `buf`; returns the open file.
fn read_whole(
    storage: &dyn Storage,
    path: &Path,
    buf: &mut Vec<u8>,
) -> Result<Box<dyn StorageFile>> {
    storage
        .open(path, false)
        .and_then(|f| f.read_all_into(buf).map(|()| f))
        .map_err(|e| Error::io(format!("reading segment {}", path.display()), e))
}

/// Where the scan read a segment's bytes from.
enum Source {
    /// A memory map of the whole file.
    Mapped(FileView),
    /// Copied into the scan's buffer from this open file.
    Read(Box<dyn StorageFile>),
}

impl Source {
    /// What keeps the scanned bytes readable: the map (copied when small, see
    /// [`PIN_COPY_BYTES_MAX`]), or the file they were read from.
    fn pin(self) -> SegmentPin {
        match self {
            Source::Mapped(view) if view.len() <= PIN_COPY_BYTES_MAX => {
                SegmentPin::Bytes(std::sync::Arc::new(view.to_vec()))
            }
            Source::Mapped(view) => SegmentPin::Bytes(view),
            Source::Read(file) => SegmentPin::File(std::sync::Arc::from(file)),
        }
    }
}

/// A memory map of a segment no one writes any more, where the storage offers one.
fn view_whole(storage: &dyn Storage, path: &Path) -> Result<Option<FileView>> {
    storage
        .view(path)
        .map_err(|e| Error::io(format!("reading segment {}", path.display()), e))
}

fn check_chain(
    path: &Path,
    file_id: u64,
    header: &SegmentHeader,
    expected: Option<(u64, u64)>,
    mode: RecoveryMode,
) -> Result<()> {
    let broken = |why: String| Error::Corruption {
        segment: path.to_path_buf(),
        offset: 0,
        reason: CorruptionReason::BrokenChain(why),
    };
    if header.id != file_id {
        return Err(broken(format!("header names segment {}", header.id)));
    }
    if mode == RecoveryMode::Salvage {
        return Ok(());
    }
    match expected {
        Some((id, _)) if id != file_id => Err(broken(format!("segment {id} is missing"))),
        Some((_, lsn)) if lsn != header.first_lsn => Err(broken(format!(
            "first LSN {} but the previous segment ends before {lsn}",
            header.first_lsn
        ))),
        _ => Ok(()),
    }
}

/// Where a segment scan stopped early.
struct Stop {
    offset: u64,
    reason: Option<CorruptionReason>, // None: clean unwritten space
}

fn scan_segment(
    buf: &[u8],
    path: &Path,
    header: &SegmentHeader,
    is_last: bool,
    mode: RecoveryMode,
    visit: &mut dyn FnMut(RecordRef<'_>) -> Result<()>,
    report: &mut LogRecovery,
) -> Result<(SegmentState, u64)> {
    let mut cursor = Cursor {
        buf,
        path,
        pos: SEGMENT_HEADER_BYTES,
        next_lsn: header.first_lsn,
        committed_end: SEGMENT_HEADER_BYTES,
        batch: Vec::new(),
        lsn_gaps_allowed: mode == RecoveryMode::Salvage || header.is_compacted(),
    };
    let mut state = SegmentState {
        id: header.id,
        path: path.to_path_buf(),
        data_end: 0,
        dirty_end: 0,
        sealed: false,
        file_bytes: buf.len() as u64,
    };
    loop {
        let stop = match cursor.run(header.id, visit, report)? {
            Ok(()) => {
                state.sealed = true;
                break;
            }
            Err(stop) => {
                cursor.drop_partial_batch();
                stop
            }
        };
        let start = cursor.committed_end;
        let torn_bytes = (last_nonzero(buf, start) - start) as u64;
        // Inclusive: a valid record right where the scan stopped (out of sequence, say)
        // that claims durable predecessors proves the damage is not a tear.
        let later = find_durable_batch(buf, stop.offset as usize, cursor.next_lsn);
        let problem = match (later, is_last) {
            // Bytes written after everything before them was durable: the bad region was
            // durable too, so it is corruption, wherever it is.
            (Some(later), _) => Some(CorruptionReason::ValidDataAfter {
                later_offset: later as u64,
            }),
            // A segment followed by another was sealed and fsynced: nothing in it is torn.
            (None, false) => Some(stop.reason.clone().unwrap_or_else(|| {
                CorruptionReason::BrokenChain("segment ends without its seal record".into())
            })),
            (None, true) => None,
        };
        match problem {
            None => {
                if torn_bytes > 0 && mode == RecoveryMode::Strict {
                    return Err(corrupt(
                        path,
                        start as u64,
                        CorruptionReason::TornTail { torn_bytes },
                    ));
                }
                report.torn_bytes += torn_bytes;
                if torn_bytes > 0 {
                    state.dirty_end = start as u64 + torn_bytes;
                }
                break;
            }
            // Resuming at the record the scan just rejected (where it began, so not for a
            // partial batch before it) would stop there again, forever: resume past it.
            Some(reason) if mode == RecoveryMode::Salvage => match later
                .filter(|&l| l != start)
                .or_else(|| later.and_then(|l| find_durable_batch(buf, l + 1, cursor.next_lsn)))
            {
                // Report why the record there was rejected; a hole of zeros has no
                // such reason, only the valid data after it.
                Some(later) => cursor.skip_to(later, path, stop.reason.unwrap_or(reason), report),
                None => {
                    if torn_bytes > 0 {
                        report.skipped.push(SkippedRange {
                            segment: path.to_path_buf(),
                            offset: start as u64,
                            bytes: torn_bytes,
                            reason,
                        });
                        if is_last {
                            // A writer appends from `start`, over these bytes: it zeroes
                            // them first, as a torn tail, so none is left past new data.
                            state.dirty_end = start as u64 + torn_bytes;
                        }
                    }
                    break;
                }
            },
            Some(reason) => return Err(corrupt(path, stop.offset, reason)),
        }
    }
    state.data_end = cursor.committed_end as u64;
    Ok((state, cursor.next_lsn))
}

fn corrupt(path: &Path, offset: u64, reason: CorruptionReason) -> Error {
    Error::Corruption {
        segment: path.to_path_buf(),
        offset,
        reason,
    }
}

/// Walks the records of one segment, delivering complete batches.
struct Cursor<'a> {
    buf: &'a [u8],
    /// The segment file `buf` holds.
    path: &'a Path,
    pos: usize,
    next_lsn: u64,
    /// End of the last complete batch.
    committed_end: usize,
    /// Records of the batch being read: (offset, header).
    batch: Vec<(usize, RecordHeader)>,
    /// Salvage skips records, and compaction keeps only live ones: LSNs then increase
    /// but may skip.
    lsn_gaps_allowed: bool,
}

impl Cursor<'_> {
    /// Runs to the seal (`Ok(Ok(()))`) or to the first position that is not a valid
    /// continuation (`Ok(Err(stop))`).
    fn run(
        &mut self,
        segment_id: u64,
        visit: &mut dyn FnMut(RecordRef<'_>) -> Result<()>,
        report: &mut LogRecovery,
    ) -> Result<Result<(), Stop>> {
        loop {
            let at = self.pos;
            let stop = |reason| {
                Ok(Err(Stop {
                    offset: at as u64,
                    reason,
                }))
            };
            let (h, _) = match record::decode(&self.buf[at..]) {
                Ok(ok) => ok,
                Err(DecodeError::Unwritten) if self.batch.is_empty() => return stop(None),
                Err(DecodeError::Unwritten | DecodeError::Truncated) => {
                    return stop(Some(CorruptionReason::BadLength { length: 0 }));
                }
                Err(DecodeError::Invalid(reason)) => return stop(Some(reason)),
            };
            if let Err(reason) = self.check_sequence(&h) {
                return stop(Some(reason));
            }
            if h.kind == KIND_SEAL {
                // The seal is a batch of its own and does not consume an LSN; it names the
                // next segment and hands on the next LSN.
                let start = at + RECORD_HEADER_BYTES;
                let next = self.buf.get(start..start + SEAL_PAYLOAD_BYTES);
                let next_id = next.and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
                if next_id != Some(segment_id + 1) {
                    return stop(Some(CorruptionReason::BrokenChain(format!(
                        "seal names segment {next_id:?}, not {}",
                        segment_id + 1
                    ))));
                }
                self.next_lsn = h.lsn;
                self.pos += h.record_bytes() as usize;
                self.committed_end = self.pos;
                return Ok(Ok(()));
            }
            self.batch.push((at, h));
            self.pos += h.record_bytes() as usize;
            self.next_lsn = h.lsn + 1;
            if h.flags & FLAG_BATCH_END != 0 {
                self.deliver(segment_id, visit, report)?;
            }
        }
    }

    fn check_sequence(&self, h: &RecordHeader) -> Result<(), CorruptionReason> {
        let starts = h.flags & FLAG_BATCH_START != 0;
        if starts != self.batch.is_empty() {
            return Err(CorruptionReason::BadFlags(h.flags));
        }
        if h.kind == KIND_SEAL && h.flags & FLAG_BATCH_END == 0 {
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
        segment_id: u64,
        visit: &mut dyn FnMut(RecordRef<'_>) -> Result<()>,
        report: &mut LogRecovery,
    ) -> Result<()> {
        for (offset, h) in self.batch.drain(..) {
            let start = offset + RECORD_HEADER_BYTES;
            visit(RecordRef {
                segment_id,
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
        Ok(())
    }

    /// Forgets the records of an unfinished batch: they are never delivered, so their
    /// LSNs are free again (the writer reuses them after zeroing the torn bytes).
    fn drop_partial_batch(&mut self) {
        if let Some((_, first)) = self.batch.first() {
            self.next_lsn = first.lsn;
        }
        self.batch.clear();
    }

    /// Salvage: drops the partial batch and resumes at the valid batch at `later`.
    fn skip_to(
        &mut self,
        later: usize,
        path: &Path,
        reason: CorruptionReason,
        report: &mut LogRecovery,
    ) {
        report.skipped.push(SkippedRange {
            segment: path.to_path_buf(),
            offset: self.committed_end as u64,
            bytes: (later - self.committed_end) as u64,
            reason,
        });
        self.batch.clear();
        self.pos = later;
        self.committed_end = later;
    }
}

/// Offset of the first record at or after `from` that validates and starts a batch
/// written after everything before it was durable, with an LSN not below `min_lsn`.
fn find_durable_batch(buf: &[u8], from: usize, min_lsn: u64) -> Option<usize> {
    let last = buf.len().checked_sub(RECORD_HEADER_BYTES)?;
    if from > last {
        return None;
    }
    // The flags byte of every candidate offset, in order.
    let flags = &buf[from + REC_FLAGS_OFFSET..=last + REC_FLAGS_OFFSET];
    let mut base = from;
    for chunk in flags.chunks(SKIP_CHUNK) {
        // Cheap filter first: almost every offset fails it, and a run of unwritten
        // (zero) space fails it a chunk at a time.
        if chunk.iter().fold(0, |acc, &f| acc | f) & FLAG_DURABLE_BEFORE != 0 {
            let found = chunk.iter().enumerate().find_map(|(i, &f)| {
                let q = base + i;
                (f & FLAG_DURABLE_BEFORE != 0
                    && buf[q + REC_KIND_OFFSET] != KIND_UNWRITTEN
                    && matches!(record::decode(&buf[q..]), Ok((h, _)) if h.lsn >= min_lsn))
                .then_some(q)
            });
            if found.is_some() {
                return found;
            }
        }
        base += chunk.len();
    }
    None
}

/// Bytes the zero-skipping scans test at a time.
const SKIP_CHUNK: usize = 64;

/// Offset just past the last non-zero byte at or after `from` (`from` if none).
fn last_nonzero(buf: &[u8], from: usize) -> usize {
    let tail = &buf[from..];
    let mut end = tail.len();
    for chunk in tail.rchunks(SKIP_CHUNK) {
        let start = end - chunk.len();
        if chunk.iter().fold(0, |acc, &b| acc | b) != 0 {
            let i = chunk.iter().rposition(|&b| b != 0).unwrap_or_default();
            return from + start + i + 1;
        }
        end = start;
    }
    from
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_nonzero_matches_a_plain_scan() {
        let plain = |buf: &[u8], from: usize| {
            buf[from..]
                .iter()
                .rposition(|&b| b != 0)
                .map_or(from, |i| from + i + 1)
        };
        for len in [0usize, 1, 63, 64, 65, 200, 1000] {
            for at in [None, Some(0), Some(len / 2), Some(len.saturating_sub(1))] {
                let mut buf = vec![0u8; len];
                if let Some(at) = at.filter(|&a| a < len) {
                    buf[at] = 9;
                }
                for from in [0, len / 3, len] {
                    assert_eq!(
                        last_nonzero(&buf, from),
                        plain(&buf, from),
                        "{len} {at:?} {from}"
                    );
                }
            }
        }
    }

    #[test]
    fn find_durable_batch_finds_the_first_valid_one() {
        let record = |lsn: u64| {
            let h = RecordHeader {
                payload_len: 5,
                lsn,
                kind: 1,
                flags: FLAG_BATCH_START | FLAG_BATCH_END | FLAG_DURABLE_BEFORE,
            };
            let mut out = Vec::new();
            record::encode_into(&mut out, &h, record::payload_crc(b"hello"), b"hello");
            out
        };
        for at in [0usize, 1, 63, 64, 100, 1000] {
            let mut buf = vec![0u8; at];
            buf.extend_from_slice(&record(7));
            buf.extend_from_slice(&[0u8; 50]);
            buf.extend_from_slice(&record(9));
            let second = at + record(7).len() + 50;
            assert_eq!(find_durable_batch(&buf, 0, 0), Some(at));
            assert_eq!(find_durable_batch(&buf, at, 7), Some(at));
            assert_eq!(find_durable_batch(&buf, 0, 8), Some(second));
            assert_eq!(find_durable_batch(&buf, at + 1, 0), Some(second));
            assert_eq!(find_durable_batch(&buf, second + 1, 0), None);
            assert_eq!(find_durable_batch(&buf, buf.len(), 0), None);
            assert_eq!(find_durable_batch(&buf, 0, 10), None);
        }
    }
}
