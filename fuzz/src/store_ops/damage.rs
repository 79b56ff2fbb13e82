//! Crash damage: garbage or a cut past the last record of the newest segment.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use agentwal::log::SegmentHeader;
use agentwal::log::record::{self, Salt};
use agentwal::log::{KIND_CLOSE, KIND_SEAL, SEGMENT_HEADER_BYTES, parse_segment_file_name};

use super::GARBAGE_BYTES_MAX;
use super::ops::TailDamage;

/// Damages what lies past the last record of the newest segment. Returns whether
/// garbage (non-zero bytes) was left there.
pub(crate) fn damage_tail(dir: &Path, damage: &TailDamage) -> bool {
    let Some(path) = newest_segment(dir) else {
        return false;
    };
    let bytes = std::fs::read(&path).expect("reading the newest segment");
    let Some((end, closed)) = data_end(&bytes) else {
        return false; // sealed: nothing in it is unacknowledged
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("opening the newest segment");
    match damage {
        TailDamage::Nothing => false,
        TailDamage::CutZeros { keep } => {
            let zeros = bytes.len() - end;
            let len = end + usize::from(*keep) % (zeros + 1);
            file.set_len(len as u64).expect("cutting the segment");
            false
        }
        TailDamage::Garbage {
            gap,
            bytes: garbage,
        } => {
            let garbage = &garbage[..garbage.len().min(GARBAGE_BYTES_MAX)];
            let at = end + usize::from(*gap % 32);
            let mut damaged = bytes.clone();
            damaged.resize(damaged.len().max(at + garbage.len()), 0);
            damaged[at..at + garbage.len()].copy_from_slice(garbage);
            // Bytes that hold a valid record are not garbage but a forged write; a crash
            // cannot make them, so leave the file alone.
            let salt = salt_of(&bytes);
            if (end..at + garbage.len()).any(|q| record::decode(&damaged[q..], salt).is_ok()) {
                return false;
            }
            file.write_all_at(garbage, at as u64)
                .expect("writing garbage");
            // After a close record, no torn write of this life can lie: recovery takes
            // the bytes for an earlier life's.
            !closed && garbage.iter().any(|&b| b != 0)
        }
    }
}

fn newest_segment(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .expect("listing the store")
        .filter_map(|e| {
            let e = e.ok()?;
            let id = parse_segment_file_name(e.file_name().to_str()?)?;
            Some((id, e.path()))
        })
        .max()
        .map(|(_, p)| p)
}

/// The salt of the segment whose bytes are `bytes` (as its header says).
fn salt_of(bytes: &[u8]) -> Salt {
    SegmentHeader::decode(bytes, Path::new("segment")).map_or(Salt::Unsalted, |h| h.salt)
}

/// Offset just past the last record of a segment, and whether that record is a close
/// record; `None` if it ends with a seal.
fn data_end(bytes: &[u8]) -> Option<(usize, bool)> {
    let header = SegmentHeader::decode(bytes, Path::new("segment")).ok();
    let salt = header.map_or(Salt::Unsalted, |h| h.salt);
    let mut pos = header.map_or(SEGMENT_HEADER_BYTES, |h| h.data_start() as usize);
    let mut closed = false;
    while let Ok((h, _)) = record::decode(bytes.get(pos..)?, salt) {
        if h.kind == KIND_SEAL {
            return None;
        }
        closed = h.kind == KIND_CLOSE;
        pos += h.record_bytes() as usize;
    }
    Some((pos, closed))
}
