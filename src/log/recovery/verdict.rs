//! The verdict on a stop: what it means that a segment's records stop being a valid
//! continuation before its seal. A torn tail (the last batch cut short by a crash) is
//! discarded; anything else is corruption, which salvage skips.
//!
//! The rule (docs/log.md §3): an invalid or incomplete batch is a torn tail
//! only when it sits in the final segment and no later record carries
//! `FLAG_DURABLE_BEFORE`. That flag marks a batch written after every earlier byte was
//! durable, so finding one after a bad region proves the bad region was once durable:
//! that is corruption, never a tear.

use super::cursor::Stop;
use crate::error::CorruptionReason;
use crate::log::RecoveryMode;
use crate::log::format::*;
use crate::log::record::{self, Salt};

/// What the scan of a segment does about a stop.
#[derive(Debug)]
pub(super) enum Verdict {
    /// The segment's data ends where its last complete batch does; `torn_bytes` of a torn
    /// tail after it (0: clean unwritten space) are discarded.
    End { torn_bytes: u64 },
    /// Salvage: skip the damage and resume at `resume`, the next batch written after
    /// everything before it was durable.
    SkipTo {
        resume: usize,
        reason: CorruptionReason,
    },
    /// Salvage: nothing valid follows; the `bytes` (possibly 0) after the last complete
    /// batch are given up.
    SkipRest {
        bytes: u64,
        reason: CorruptionReason,
    },
    /// Damage that is no tear (or any tear, in `RecoveryMode::Strict`): the open fails.
    Corrupt {
        offset: u64,
        reason: CorruptionReason,
    },
}

/// Judges `stop` in the segment `buf`, whose last complete batch ends at `committed_end`
/// and whose next record would carry `next_lsn` (the partial batch already dropped).
pub(super) fn judge(
    buf: &[u8],
    salt: Salt,
    stop: Stop,
    committed_end: usize,
    next_lsn: u64,
    is_last: bool,
    mode: RecoveryMode,
) -> Verdict {
    let start = committed_end;
    let torn_bytes = (last_nonzero(buf, start) - start) as u64;
    // Inclusive: a valid record right where the scan stopped (out of sequence, say)
    // that claims durable predecessors proves the damage is not a tear.
    let later = find_durable_batch(buf, salt, stop.offset as usize, next_lsn);
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
    let Some(reason) = problem else {
        if torn_bytes > 0 && mode == RecoveryMode::Strict {
            return Verdict::Corrupt {
                offset: start as u64,
                reason: CorruptionReason::TornTail { torn_bytes },
            };
        }
        return Verdict::End { torn_bytes };
    };
    if mode != RecoveryMode::Salvage {
        return Verdict::Corrupt {
            offset: stop.offset,
            reason,
        };
    }
    // Resuming at the record the scan just rejected (where it began, so not for a
    // partial batch before it) would stop there again, forever: resume past it.
    let resume = later
        .filter(|&l| l != start)
        .or_else(|| later.and_then(|l| find_durable_batch(buf, salt, l + 1, next_lsn)));
    match resume {
        // Report why the record there was rejected; a hole of zeros has no such reason,
        // only the valid data after it.
        Some(resume) => Verdict::SkipTo {
            resume,
            reason: stop.reason.unwrap_or(reason),
        },
        None => Verdict::SkipRest {
            bytes: torn_bytes,
            reason,
        },
    }
}

/// Offset of the first record at or after `from` that validates and starts a batch
/// written after everything before it was durable, with an LSN not below `min_lsn`.
fn find_durable_batch(buf: &[u8], salt: Salt, from: usize, min_lsn: u64) -> Option<usize> {
    let last = buf.len().checked_sub(RECORD_HEADER_BYTES)?;
    if from > last {
        return None;
    }
    // The flags byte of every candidate offset, in order.
    let flags = &buf[from + REC_FLAGS_OFFSET..=last + REC_FLAGS_OFFSET];
    let mut base = from;
    for chunk in flags.chunks(SKIP_CHUNK) {
        // Cheap filter first: DURABLE_BEFORE comes only with START and at most END, so the
        // flags byte is one of two values; almost every offset fails that, zeros and an
        // earlier life's bytes in a recycled segment (docs/format.md §6) alike, a chunk at a time.
        if chunk.iter().any(|&f| durable_start(f)) {
            let found = chunk.iter().enumerate().find_map(|(i, &f)| {
                let q = base + i;
                (durable_start(f)
                    && buf[q + REC_KIND_OFFSET] != KIND_UNWRITTEN
                    && lsn_at(buf, q) >= min_lsn
                    && matches!(record::decode(&buf[q..], salt), Ok((h, _)) if h.lsn >= min_lsn))
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

/// Whether a flags byte is that of a batch's first record written after everything before
/// it was durable (START and DURABLE_BEFORE, perhaps END, nothing else).
fn durable_start(flags: u8) -> bool {
    const START_DURABLE: u8 = FLAG_BATCH_START | FLAG_DURABLE_BEFORE;
    flags == START_DURABLE || flags == START_DURABLE | FLAG_BATCH_END
}

/// The LSN field of a record header at `at` (which has a whole header in `buf`): read
/// before the checksum, since an earlier life's records in a recycled segment have lower
/// LSNs than any this one can hand out.
fn lsn_at(buf: &[u8], at: usize) -> u64 {
    let mut lsn = [0u8; 8];
    lsn.copy_from_slice(&buf[at + REC_LSN_OFFSET..at + REC_LSN_OFFSET + 8]);
    u64::from_le_bytes(lsn)
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
    use crate::log::record::RecordHeader;

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
        const SALT: Salt = Salt::Salted(77);
        let record = |lsn: u64| {
            let h = RecordHeader {
                payload_len: 5,
                lsn,
                kind: 1,
                flags: FLAG_BATCH_START | FLAG_BATCH_END | FLAG_DURABLE_BEFORE,
            };
            let mut out = Vec::new();
            record::encode_into(&mut out, SALT, &h, record::payload_crc(b"hello"), b"hello");
            out
        };
        for at in [0usize, 1, 63, 64, 100, 1000] {
            let mut buf = vec![0u8; at];
            buf.extend_from_slice(&record(7));
            buf.extend_from_slice(&[0u8; 50]);
            buf.extend_from_slice(&record(9));
            let second = at + record(7).len() + 50;
            assert_eq!(find_durable_batch(&buf, SALT, 0, 0), Some(at));
            assert_eq!(find_durable_batch(&buf, SALT, at, 7), Some(at));
            assert_eq!(find_durable_batch(&buf, SALT, 0, 8), Some(second));
            assert_eq!(find_durable_batch(&buf, SALT, at + 1, 0), Some(second));
            assert_eq!(find_durable_batch(&buf, SALT, second + 1, 0), None);
            assert_eq!(find_durable_batch(&buf, SALT, buf.len(), 0), None);
            assert_eq!(find_durable_batch(&buf, SALT, 0, 10), None);
        }
    }
}
