//! Segment files: naming, headers, creation and preallocation.

use std::path::{Path, PathBuf};

use super::format::*;
use crate::error::{CorruptionReason, Error, Result};
use crate::storage::{Storage, StorageFile};

/// The decoded header of a segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The segment's id (also in its file name).
    pub id: u64,
    /// LSN of the first record in the segment (for a compacted segment with no live
    /// record, the LSN its seal hands on).
    pub first_lsn: u64,
    /// Segment flags (`SEGMENT_FLAG_*`).
    pub flags: u32,
}

impl SegmentHeader {
    /// Whether compaction wrote this segment (it supersedes all lower ids).
    pub fn is_compacted(&self) -> bool {
        self.flags & SEGMENT_FLAG_COMPACTED != 0
    }
}

impl SegmentHeader {
    /// Encodes the header, checksum included.
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_BYTES] {
        let mut b = [0u8; SEGMENT_HEADER_BYTES];
        b[SEG_MAGIC_OFFSET..][..8].copy_from_slice(&SEGMENT_MAGIC);
        b[SEG_VERSION_OFFSET..][..4].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[SEG_FLAGS_OFFSET..][..4].copy_from_slice(&self.flags.to_le_bytes());
        b[SEG_ID_OFFSET..][..8].copy_from_slice(&self.id.to_le_bytes());
        b[SEG_FIRST_LSN_OFFSET..][..8].copy_from_slice(&self.first_lsn.to_le_bytes());
        let crc = mask_crc(crc32fast::hash(&b[..SEG_CRC_OFFSET]));
        b[SEG_CRC_OFFSET..][..4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and verifies a header read from `path`.
    pub fn decode(buf: &[u8], path: &Path) -> Result<Self> {
        let bad = |why: &str| Error::Corruption {
            segment: path.to_path_buf(),
            offset: 0,
            reason: CorruptionReason::BadHeader(why.to_string()),
        };
        let Some(b) = buf.get(..SEGMENT_HEADER_BYTES) else {
            return Err(bad(&match buf.len() {
                0 => "file is empty".to_string(),
                n => format!("file of {n} bytes is shorter than a segment header"),
            }));
        };
        if b[SEG_MAGIC_OFFSET..][..8] != SEGMENT_MAGIC {
            return Err(bad("bad magic: not an agentwal segment"));
        }
        let le32 = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let le64 = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        let version = le32(SEG_VERSION_OFFSET);
        let stored = le32(SEG_CRC_OFFSET);
        let computed = mask_crc(crc32fast::hash(&b[..SEG_CRC_OFFSET]));
        // A newer writer may lay out the rest differently, so judge the version first.
        if version > FORMAT_VERSION || (version != FORMAT_VERSION && stored == computed) {
            return Err(Error::UnsupportedFormat {
                segment: path.to_path_buf(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        if stored != computed {
            return Err(Error::Corruption {
                segment: path.to_path_buf(),
                offset: 0,
                reason: CorruptionReason::ChecksumMismatch { stored, computed },
            });
        }
        if le32(SEG_FLAGS_OFFSET) & !SEGMENT_FLAGS_KNOWN != 0 || le32(SEG_PAD_OFFSET) != 0 {
            return Err(bad("unknown flags or non-zero reserved bytes"));
        }
        Ok(SegmentHeader {
            id: le64(SEG_ID_OFFSET),
            first_lsn: le64(SEG_FIRST_LSN_OFFSET),
            flags: le32(SEG_FLAGS_OFFSET),
        })
    }
}

/// Path of segment `id` in `dir`.
pub fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(segment_file_name(id))
}

/// Lists the segment files of `dir`, sorted by id (log order).
pub fn list_segments(storage: &dyn Storage, dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let names = storage
        .list(dir)
        .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
    let mut out: Vec<(u64, PathBuf)> = names
        .iter()
        .filter_map(|name| Some((parse_segment_file_name(name)?, dir.join(name))))
        .collect();
    out.sort_unstable_by_key(|(id, _)| *id);
    Ok(out)
}

/// Makes the directory's entries (created, renamed, removed files) durable.
pub fn sync_dir(storage: &dyn Storage, dir: &Path) -> Result<()> {
    storage
        .sync_dir(dir)
        .map_err(|e| Error::io(format!("fsyncing directory {}", dir.display()), e))
}

/// Creates segment `id` whose first record will have `first_lsn`.
///
/// Crash safety: the header is written to a temporary file, fsynced, renamed to its final
/// name and the directory fsynced, so a segment file under its final name always has a
/// complete header, and it exists durably before any record in it is acknowledged.
pub fn create_segment(
    storage: &dyn Storage,
    dir: &Path,
    id: u64,
    first_lsn: u64,
    preallocate_bytes: u64,
) -> Result<Box<dyn StorageFile>> {
    let path = segment_path(dir, id);
    let tmp = dir.join(temp_file_name(id));
    let ctx = |what: &str| format!("{what} segment {}", path.display());
    let file = storage
        .create(&tmp)
        .map_err(|e| Error::io(ctx("creating"), e))?;
    let header = SegmentHeader {
        id,
        first_lsn,
        flags: 0,
    }
    .encode();
    file.write_all_at(&header, 0)
        .map_err(|e| Error::io(ctx("writing header of"), e))?;
    preallocate(&*file, SEGMENT_HEADER_BYTES as u64, preallocate_bytes)
        .map_err(|e| Error::io(ctx("preallocating"), e))?;
    file.sync_data()
        .map_err(|e| Error::io(ctx("fsyncing"), e))?;
    storage
        .rename(&tmp, &path)
        .map_err(|e| Error::io(ctx("renaming"), e))?;
    sync_dir(storage, dir)?;
    Ok(file)
}

/// Reserves `len` zeroed bytes at `offset` so later writes do not change the file size
/// (fdatasync then need not write metadata).
pub fn preallocate(file: &dyn StorageFile, offset: u64, len: u64) -> std::io::Result<()> {
    file.allocate(offset, len)
}
