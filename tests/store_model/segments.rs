//! Segment walking for the record counts and for cutting the last record.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::common::newest_segment;
use agentwal::log::record::{self, DecodeError};
use agentwal::log::{KIND_CLOSE, KIND_SEAL, SEGMENT_HEADER_BYTES, SegmentHeader};

use crate::ops::Cut;

/// How many records (seals and close records left out) each segment of `dir` holds,
/// oldest first, the active segment last: when the newest file is sealed (an open sealed
/// a recycled segment its writer did not close, and nothing was appended since), the
/// active segment is the one not created yet, which holds nothing.
pub(crate) fn records_per_segment(dir: &Path) -> Vec<usize> {
    let mut segments: Vec<(u64, std::path::PathBuf)> = std::fs::read_dir(dir)
        .expect("read store dir")
        .filter_map(|e| {
            let e = e.ok()?;
            let id = agentwal::log::parse_segment_file_name(&e.file_name().to_string_lossy())?;
            Some((id, e.path()))
        })
        .collect();
    segments.sort_unstable();
    let mut counts: Vec<usize> = (segments.iter())
        .map(|(_, path)| records_in(path).len())
        .collect();
    if let Some((_, newest)) = segments.last()
        && let Some(&(_, _, KIND_SEAL)) = walk_segment(newest).records.last()
    {
        counts.push(0);
    }
    counts
}

/// A segment file as the harness sees it: whether it is a recycled file, and its
/// records ((offset, end, kind) of each, seals and close records included, in order),
/// walked with the segment's salt up to the first position that does not validate.
pub(crate) struct SegmentWalk {
    pub(crate) recycled: bool,
    pub(crate) records: Vec<(usize, usize, u8)>,
}

fn walk_segment(path: &Path) -> SegmentWalk {
    let buf = std::fs::read(path).expect("read segment");
    let header = SegmentHeader::decode(&buf, path).expect("segment header");
    let mut pos = SEGMENT_HEADER_BYTES;
    let mut records = Vec::new();
    loop {
        match record::decode(&buf[pos..], header.salt) {
            Ok((h, _)) => {
                let end = pos + h.record_bytes() as usize;
                records.push((pos, end, h.kind));
                pos = end;
                if h.kind == KIND_SEAL {
                    break;
                }
            }
            // Past the data of a fresh segment only zeros (or the file's end) may follow;
            // past a recycled one's lie an earlier life's bytes, which never validate.
            Err(DecodeError::Unwritten) => break,
            Err(_) if header.is_recycled() => break,
            Err(e) => panic!("{}: bad record at {pos}: {e:?}", path.display()),
        }
    }
    SegmentWalk {
        recycled: header.is_recycled(),
        records,
    }
}

/// The records a reader of the segment sees: (offset, end, kind), seals and close records
/// left out.
pub(crate) fn records_in(path: &Path) -> Vec<(usize, usize, u8)> {
    let internal = [KIND_SEAL, KIND_CLOSE];
    let walk = walk_segment(path);
    walk.records
        .into_iter()
        .filter(|r| !internal.contains(&r.2))
        .collect()
}

/// Cuts the newest segment inside its last record, as a crash in the middle of writing
/// it would. Returns the torn bytes recovery must report.
///
/// In a fresh segment: the file is truncated or zeroed from the cut on, and the torn bytes
/// are the non-zero prefix left. In a recycled segment a crash cannot shorten the file (its
/// length is the earlier life's), and what follows the cut is an earlier life's bytes:
/// the cut garbles (or zeroes) the rest of the record instead, and the close records
/// after it (a clean close appends one in a recycled segment, or a seal when no room is
/// left for one) go too, as a writer that crashed while writing the record never wrote
/// them. Recovery then cannot bound the tear:
/// it reports every byte from the end of the data to the file's end, unless the data ends
/// with a close record, which tells it nothing of this life follows (a torn record right
/// after it looks like the earlier life's bytes), and it reports none.
pub(crate) fn cut_last_record(dir: &Path, cut: Cut) -> u64 {
    let path = newest_segment(dir);
    let buf = std::fs::read(&path).expect("read segment");
    let mut walk = walk_segment(&path);
    // Where the cut's damage ends: the record's end, or the end of the close records
    // after it (each clean close since it was written appended one), or of the seal the
    // last clean close wrote instead when a close record no longer fitted (`Writer::close`;
    // the next append then goes to a new segment, so a seal is only ever last here).
    let mut erase_end = None;
    if let Some(&(_, seal_end, KIND_SEAL)) = walk.records.last() {
        assert!(walk.recycled, "a close seals only a recycled segment");
        erase_end = Some(seal_end);
        walk.records.pop();
    }
    while let Some(&(_, close_end, KIND_CLOSE)) = walk.records.last() {
        assert!(walk.recycled, "close records only in recycled segments");
        erase_end = erase_end.or(Some(close_end));
        walk.records.pop();
    }
    let (start, end, kind) = walk
        .records
        .last()
        .copied()
        .expect("the newest segment holds the newest record");
    assert_ne!(kind, KIND_SEAL, "the newest segment is never sealed here");
    assert_ne!(kind, KIND_CLOSE, "a record follows the close record");
    let erase_end = erase_end.unwrap_or(end);
    // Zeroing only zeros changes nothing: a zero-fill cut starts at or before the
    // record's last non-zero byte (a record can end in zeros).
    let last_nonzero = start
        + buf[start..end]
            .iter()
            .rposition(|&b| b != 0)
            .expect("record");
    let cut_end = if cut.zero_fill { last_nonzero } else { end - 1 };
    let at = start + 1 + usize::from(cut.at) % (cut_end - start);
    let file = OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open segment");
    if walk.recycled {
        let rest: Vec<u8> = match cut.zero_fill {
            true => vec![0u8; erase_end - at],
            // Every byte changed: the earlier life's bytes were anything but these.
            false => buf[at..erase_end].iter().map(|&b| b ^ 0x5a).collect(),
        };
        file.write_all_at(&rest, at as u64)
            .expect("garble the tail");
        let after_close =
            walk.records.len() >= 2 && walk.records[walk.records.len() - 2].2 == KIND_CLOSE;
        return match after_close {
            true => 0,
            false => (buf.len() - start) as u64,
        };
    }
    if cut.zero_fill {
        file.write_all_at(&vec![0u8; end - at], at as u64)
            .expect("zero the tail");
    } else {
        file.set_len(at as u64).expect("truncate");
    }
    buf[start..at]
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |i| i as u64 + 1)
}
