//! Recovery: scans every segment on open, in order, checking that they form one chain,
//! and verifies every checksum. Within a segment, [`cursor`] turns records into complete
//! batches for the visitor, and [`verdict`] decides what a stop before the seal is: a torn
//! tail or corruption.

mod cursor;
mod source;
mod verdict;

use std::path::{Path, PathBuf};

use self::cursor::{Cursor, CursorEnd};
pub(crate) use self::source::SegmentPin;
use self::source::Source;
use self::verdict::Verdict;
use super::format::FORMAT_VERSION;
use super::record::Salt;
use super::segment::{SegmentHeader, list_segments, read_header};
use super::{RecordRef, RecoveryMode};
use crate::error::{CorruptionReason, Error, Result};
use crate::storage::Storage;

/// What recovery found, for reports and for the writer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogRecovery {
    /// Records delivered (complete batches only; seals excluded).
    pub records: u64,
    /// Bytes of valid records scanned.
    pub bytes: u64,
    /// Segment files scanned.
    pub segments: u64,
    /// Bytes of the torn tail ignored (and, for a writer, zeroed, or sealed off). In a
    /// recycled segment after a crash, every byte past the data counts: an earlier life's
    /// bytes cannot be told from a torn batch's.
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
    /// What its records' checksums mix in.
    pub salt: Salt,
    /// Whether it is a recycled file.
    pub recycled: bool,
    /// A recycled final segment whose writer did not close cleanly: what lies past its
    /// data may hold records of this life, and no bound on them is known, so a writer
    /// must not append there; it seals the segment at `data_end` instead (§5.3).
    pub seal_at_open: bool,
    /// The last complete batch is a close record: its writer closed cleanly there.
    pub closed: bool,
    /// What its successor's header must carry as its `prev_link` (`None` for v1).
    pub hand_on: Option<u32>,
}

/// Everything `open` learns from the scan.
pub(crate) struct Scan {
    pub segments: Vec<SegmentState>,
    /// Read-only scans only: per scanned segment id, the bytes its records were read from.
    pub pins: Vec<(u64, SegmentPin)>,
    /// Segments superseded by a compacted segment (left over by a crash); skipped.
    pub superseded: Vec<PathBuf>,
    pub next_lsn: u64,
    /// The store id of the v3 segments scanned (all carry the same), if any.
    pub store_id: Option<u128>,
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
        store_id: None,
        report: LogRecovery::default(),
    };
    let mut expected: Option<Expected> = None;
    // The store the segments scanned so far belong to (none before the first v3 segment).
    let mut store: Option<StoreSeen> = None;
    let mut read_buf = Vec::new();
    for (index, (id, path)) in files.iter().enumerate() {
        let is_last = index + 1 == files.len();
        // A segment followed by another is never written again (the writer seals it
        // before creating the next; compaction replaces files by rename): read it in
        // place through a memory map, without copying it. The last one may be written
        // meanwhile by a writer, unless the caller holds the lock: if it may, copy it.
        let source = Source::open(storage, path, !is_last || locked, &mut read_buf)?;
        let buf = source.bytes(&read_buf);
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
        check_store(path, &header, &mut store)?;
        let SegmentScan { state, next_lsn } =
            scan_segment(buf, path, &header, is_last, mode, visit, &mut out.report)?;
        // Never hand the writer an LSN an earlier segment already used: salvage does not
        // check the chain, so a later segment may start below an earlier one's end. (In
        // the other modes the chain check makes this a no-op.)
        out.next_lsn = match index {
            0 => next_lsn,
            _ => out.next_lsn.max(next_lsn),
        };
        expected = state.sealed.then_some(Expected {
            id: state.id + 1,
            first_lsn: next_lsn,
            link: state.hand_on,
        });
        if !locked {
            // Exactly the bytes just scanned: reads through this handle find the records
            // it indexed, never what a later compaction put under the same name.
            let pin = source.pin(&read_buf, state.data_end as usize, header.salt);
            out.pins.push((*id, pin));
        }
        out.report.segments += 1;
        out.segments.push(state);
    }
    out.store_id = store.map(|seen| seen.id);
    Ok(out)
}

/// What a sealed segment demands of the next one.
#[derive(Clone, Copy)]
struct Expected {
    id: u64,
    first_lsn: u64,
    /// What its `prev_link` must be (`None`: a v1 segment, which hands on nothing).
    link: Option<u32>,
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
        // Taking an unreadable file for "not compacted" would read superseded segments
        // and report the compacted one as corruption: an I/O error fails the scan.
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

fn check_chain(
    path: &Path,
    file_id: u64,
    header: &SegmentHeader,
    expected: Option<Expected>,
    mode: RecoveryMode,
) -> Result<()> {
    if header.id != file_id {
        return Err(broken(path, format!("header names segment {}", header.id)));
    }
    if mode == RecoveryMode::Salvage {
        return Ok(());
    }
    let Some(expected) = expected else {
        return Ok(());
    };
    if expected.id != file_id {
        return Err(broken(path, format!("segment {} is missing", expected.id)));
    }
    if expected.first_lsn != header.first_lsn {
        return Err(broken(
            path,
            format!(
                "first LSN {} but the previous segment ends before {}",
                header.first_lsn, expected.first_lsn
            ),
        ));
    }
    match (header.chain, expected.link) {
        // The header was written, and fsynced, when the segment was made after its
        // predecessor, naming what the predecessor hands on: no crash changes either.
        (Some(chain), Some(link)) if chain.prev_link != link => Err(broken(
            path,
            format!(
                "segment {file_id} does not follow segment {}: it links to {:#010x}, \
                 segment {} hands on {link:#010x} (a segment of another store, or of \
                 another copy of this one)",
                file_id - 1,
                chain.prev_link,
                file_id - 1
            ),
        )),
        _ => Ok(()),
    }
}

/// The store the segments scanned so far belong to.
#[derive(Clone, Copy)]
struct StoreSeen {
    /// Its id, and the segment that carried it first.
    id: u128,
    from: u64,
    /// Whether a v3 segment other than a compacted one has been scanned.
    rotated: bool,
}

/// Every v3 segment of a log carries its store's id, and a segment older than v3 follows
/// no v3 segment but a compacted one: a v3 writer makes only v3 segments, but compaction
/// (which always writes v3) may replace the sealed segments before a v1 or v2 final
/// segment that a writer is still appending to. Checked in every mode, salvage too: a
/// file of another store is not damage to read past, and nothing in it may be served.
fn check_store(path: &Path, header: &SegmentHeader, store: &mut Option<StoreSeen>) -> Result<()> {
    let seen = match (header.chain, *store) {
        (Some(chain), None) => StoreSeen {
            id: chain.store_id,
            from: header.id,
            rotated: false,
        },
        (Some(chain), Some(seen)) if chain.store_id == seen.id => seen,
        (Some(chain), Some(seen)) => {
            return Err(broken(
                path,
                format!(
                    "segment {} belongs to another store: its store id is {:032x}, segment \
                     {}'s is {:032x}",
                    header.id, chain.store_id, seen.from, seen.id
                ),
            ));
        }
        (None, Some(seen)) if seen.rotated => {
            return Err(broken(
                path,
                format!(
                    "segment {} is format v{} but follows v{FORMAT_VERSION} segments made \
                     after segment {}: it belongs to another store",
                    header.id,
                    header.version(),
                    seen.from
                ),
            ));
        }
        (None, _) => return Ok(()),
    };
    *store = Some(StoreSeen {
        rotated: seen.rotated || (header.chain.is_some() && !header.is_compacted()),
        ..seen
    });
    Ok(())
}

fn broken(path: &Path, why: String) -> Error {
    corrupt(path, 0, CorruptionReason::BrokenChain(why))
}

/// What the scan of one segment found, and the LSN after its last record.
pub(crate) struct SegmentScan {
    pub state: SegmentState,
    /// The LSN the next record after this segment's carries (the seal's, if sealed).
    pub next_lsn: u64,
}

/// Scans one segment: the cursor delivers its complete batches, and each stop before
/// the seal gets its verdict, which ends the segment, skips ahead (salvage) or fails.
fn scan_segment(
    buf: &[u8],
    path: &Path,
    header: &SegmentHeader,
    is_last: bool,
    mode: RecoveryMode,
    visit: &mut dyn FnMut(RecordRef<'_>) -> Result<()>,
    report: &mut LogRecovery,
) -> Result<SegmentScan> {
    let mut cursor = Cursor::new(buf, path, header, mode);
    let mut state = SegmentState {
        id: header.id,
        path: path.to_path_buf(),
        data_end: 0,
        dirty_end: 0,
        sealed: false,
        file_bytes: buf.len() as u64,
        salt: header.salt,
        recycled: header.is_recycled(),
        seal_at_open: false,
        closed: false,
        hand_on: header.hand_on(),
    };
    loop {
        let stop = match cursor.run(visit, report)? {
            CursorEnd::Sealed => {
                state.sealed = true;
                break;
            }
            CursorEnd::Stopped(stop) => stop,
        };
        cursor.drop_partial_batch();
        let start = cursor.committed_end();
        // Past a recycled segment's data the earlier life's bytes are not zeros, so the
        // verdict's own test for a torn tail (non-zero bytes after the data) means
        // nothing there: the arm below judges it, in Strict mode too.
        let judged_as = match mode {
            RecoveryMode::Strict if state.recycled => RecoveryMode::TolerateTornTail,
            mode => mode,
        };
        match verdict::judge(
            buf,
            header.salt,
            stop,
            start,
            cursor.next_lsn(),
            is_last,
            judged_as,
        ) {
            Verdict::End { .. } if state.recycled => {
                // Past the data of a recycled file lie an earlier life's bytes (none of
                // which validates here). After a close record nothing of this life
                // follows; otherwise a torn batch may, of unknown extent.
                if !cursor.closed() {
                    let torn_bytes = buf.len() as u64 - start as u64;
                    if mode == RecoveryMode::Strict {
                        return Err(corrupt(
                            path,
                            start as u64,
                            CorruptionReason::TornTail { torn_bytes },
                        ));
                    }
                    report.torn_bytes += torn_bytes;
                    state.seal_at_open = true;
                }
                break;
            }
            Verdict::End { torn_bytes } => {
                report.torn_bytes += torn_bytes;
                if torn_bytes > 0 {
                    state.dirty_end = start as u64 + torn_bytes;
                }
                break;
            }
            Verdict::SkipTo { resume, reason } => cursor.skip_to(resume, reason, report),
            Verdict::SkipRest { bytes, reason } => {
                if bytes > 0 {
                    report.skipped.push(SkippedRange {
                        segment: path.to_path_buf(),
                        offset: start as u64,
                        bytes,
                        reason,
                    });
                    if is_last && state.recycled {
                        state.seal_at_open = true;
                    } else if is_last {
                        // A writer appends from `start`, over these bytes: it zeroes
                        // them first, as a torn tail, so none is left past new data.
                        state.dirty_end = start as u64 + bytes;
                    }
                }
                break;
            }
            Verdict::Corrupt { offset, reason } => return Err(corrupt(path, offset, reason)),
        }
    }
    state.data_end = cursor.committed_end() as u64;
    state.closed = cursor.closed() && !state.sealed;
    // The writer appends at `data_end` and zeroes up to `dirty_end`: both inside the file
    // (asserted again where the writer takes them on).
    assert!(
        state.data_end <= state.file_bytes
            && (state.dirty_end == 0
                || (state.data_end < state.dirty_end && state.dirty_end <= state.file_bytes)),
        "segment scan ends inside the file"
    );
    Ok(SegmentScan {
        state,
        next_lsn: cursor.next_lsn(),
    })
}

fn corrupt(path: &Path, offset: u64, reason: CorruptionReason) -> Error {
    Error::Corruption {
        segment: path.to_path_buf(),
        offset,
        reason,
    }
}
