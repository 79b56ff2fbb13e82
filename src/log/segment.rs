//! Segment files: naming, headers, creation and preallocation.

use std::path::{Path, PathBuf};

use super::format::*;
use super::record::Salt;
use crate::error::{CorruptionReason, Error, Result};
use crate::storage::{Storage, StorageFile};

/// What ties a format-v3 segment to its store and to its neighbours in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chain {
    /// The store's id: random, drawn when the store's first v3 segment was made, and the
    /// same in every v3 segment of the store.
    pub store_id: u128,
    /// What the previous segment handed on ([`SegmentHeader::hand_on`]) when this one
    /// was made; 0 if there was none to hand on (a new store, or a v1 predecessor).
    pub prev_link: u32,
    /// What the next segment must carry as its `prev_link`: this segment's own salt,
    /// except in a compacted segment, which hands on what the segment it replaced did,
    /// so that the successor made before the compaction still links to it.
    pub next_link: u32,
}

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
    /// What its records' checksums mix in: [`Salt::Unsalted`] for a format-v1 segment,
    /// the segment's own salt for v2 and v3.
    pub salt: Salt,
    /// Format v3: the store id and the links. `None` in a v1 or v2 header. The format
    /// version follows from it and the salt.
    pub chain: Option<Chain>,
}

impl SegmentHeader {
    /// Whether compaction wrote this segment (it supersedes all lower ids).
    pub fn is_compacted(&self) -> bool {
        self.flags & SEGMENT_FLAG_COMPACTED != 0
    }

    /// Whether the file held an earlier segment (past the data lie old, invalid bytes).
    pub fn is_recycled(&self) -> bool {
        self.flags & SEGMENT_FLAG_RECYCLED != 0
    }

    /// The format version this header is written in.
    pub fn version(&self) -> u32 {
        match (self.salt, self.chain) {
            (Salt::Unsalted, _) => FORMAT_VERSION_V1,
            (Salt::Salted(_), None) => FORMAT_VERSION_V2,
            (Salt::Salted(_), Some(_)) => FORMAT_VERSION,
        }
    }

    /// Offset of the first record: the header's length in its version.
    pub fn data_start(&self) -> u64 {
        match self.chain {
            Some(_) => SEGMENT_HEADER_BYTES as u64,
            None => SEGMENT_HEADER_BYTES_V2 as u64,
        }
    }

    /// What the next segment's header must carry as its `prev_link`: the v3 next link,
    /// or a v2 segment's salt. `None` for a v1 segment, which has nothing to hand on.
    pub fn hand_on(&self) -> Option<u32> {
        match (self.salt, self.chain) {
            (_, Some(chain)) => Some(chain.next_link),
            (Salt::Salted(salt), None) => Some(salt),
            (Salt::Unsalted, None) => None,
        }
    }
}

impl SegmentHeader {
    /// Encodes the header, checksum included: format v3 for a header with a chain, v2
    /// for a salted one without (for tests of old stores), v1 for an unsalted one.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.data_start() as usize];
        b[SEG_MAGIC_OFFSET..][..8].copy_from_slice(&SEGMENT_MAGIC);
        b[SEG_VERSION_OFFSET..][..4].copy_from_slice(&self.version().to_le_bytes());
        b[SEG_FLAGS_OFFSET..][..4].copy_from_slice(&self.flags.to_le_bytes());
        b[SEG_ID_OFFSET..][..8].copy_from_slice(&self.id.to_le_bytes());
        b[SEG_FIRST_LSN_OFFSET..][..8].copy_from_slice(&self.first_lsn.to_le_bytes());
        let crc_at = match (self.salt, self.chain) {
            (Salt::Unsalted, chain) => {
                assert!(chain.is_none(), "a v3 header has a salt");
                SEG_V1_CRC_OFFSET
            }
            (Salt::Salted(salt), None) => {
                b[SEG_SALT_OFFSET..][..4].copy_from_slice(&salt.to_le_bytes());
                SEG_V2_CRC_OFFSET
            }
            (Salt::Salted(salt), Some(chain)) => {
                b[SEG_SALT_OFFSET..][..4].copy_from_slice(&salt.to_le_bytes());
                b[SEG_PREV_LINK_OFFSET..][..4].copy_from_slice(&chain.prev_link.to_le_bytes());
                b[SEG_NEXT_LINK_OFFSET..][..4].copy_from_slice(&chain.next_link.to_le_bytes());
                b[SEG_STORE_ID_OFFSET..][..16].copy_from_slice(&chain.store_id.to_le_bytes());
                SEG_CRC_OFFSET
            }
        };
        let crc = mask_crc(crc32fast::hash(&b[..crc_at]));
        b[crc_at..][..4].copy_from_slice(&crc.to_le_bytes());
        // The read-back: a header the writer cannot decode again would make its segment
        // unreadable at the next open. Cheap (once per segment).
        assert_eq!(
            SegmentHeader::decode(&b, Path::new("(encoded)"))
                .ok()
                .as_ref(),
            Some(self),
            "a segment header decodes to what was encoded"
        );
        b
    }

    /// Decodes and verifies a header read from `path`.
    pub fn decode(buf: &[u8], path: &Path) -> Result<Self> {
        let bad = |why: &str| Error::Corruption {
            segment: path.to_path_buf(),
            offset: 0,
            reason: CorruptionReason::BadHeader(why.to_string()),
        };
        let short = |n: usize| match n {
            0 => bad("file is empty"),
            n => bad(&format!(
                "file of {n} bytes is shorter than a segment header"
            )),
        };
        // The shortest header of any version (v1, v2) first; a v3 one is checked for its
        // own length once the version is known.
        if buf.len() < SEGMENT_HEADER_BYTES_V2 {
            return Err(short(buf.len()));
        }
        if buf[SEG_MAGIC_OFFSET..][..8] != SEGMENT_MAGIC {
            return Err(bad("bad magic: not an agentwal segment"));
        }
        let le32 = |o: usize| u32::from_le_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]);
        let le64 = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&buf[o..o + 8]);
            u64::from_le_bytes(a)
        };
        let version = le32(SEG_VERSION_OFFSET);
        // A newer writer may lay out the rest differently, so judge the version first.
        let crc_at = match version {
            FORMAT_VERSION_V1 => SEG_V1_CRC_OFFSET,
            FORMAT_VERSION_V2 => SEG_V2_CRC_OFFSET,
            FORMAT_VERSION => SEG_CRC_OFFSET,
            _ => {
                return Err(Error::UnsupportedFormat {
                    segment: path.to_path_buf(),
                    found: version,
                    supported: FORMAT_VERSION,
                });
            }
        };
        if buf.len() < crc_at + 4 {
            return Err(short(buf.len()));
        }
        let stored = le32(crc_at);
        let computed = mask_crc(crc32fast::hash(&buf[..crc_at]));
        if stored != computed {
            return Err(Error::Corruption {
                segment: path.to_path_buf(),
                offset: 0,
                reason: CorruptionReason::ChecksumMismatch { stored, computed },
            });
        }
        let flags = le32(SEG_FLAGS_OFFSET);
        let (salt, chain, known) = match version {
            // v1 knew only the compacted flag, and kept its last 4 bytes zero.
            FORMAT_VERSION_V1 if le32(SEG_V1_PAD_OFFSET) != 0 => {
                return Err(bad("non-zero reserved bytes"));
            }
            FORMAT_VERSION_V1 => (Salt::Unsalted, None, SEGMENT_FLAG_COMPACTED),
            FORMAT_VERSION_V2 => (
                Salt::Salted(le32(SEG_SALT_OFFSET)),
                None,
                SEGMENT_FLAGS_KNOWN,
            ),
            _ => {
                let mut id = [0u8; 16];
                id.copy_from_slice(&buf[SEG_STORE_ID_OFFSET..][..16]);
                let chain = Chain {
                    store_id: u128::from_le_bytes(id),
                    prev_link: le32(SEG_PREV_LINK_OFFSET),
                    next_link: le32(SEG_NEXT_LINK_OFFSET),
                };
                (
                    Salt::Salted(le32(SEG_SALT_OFFSET)),
                    Some(chain),
                    SEGMENT_FLAGS_KNOWN,
                )
            }
        };
        if flags & !known != 0 {
            return Err(bad("unknown flags"));
        }
        Ok(SegmentHeader {
            id: le64(SEG_ID_OFFSET),
            first_lsn: le64(SEG_FIRST_LSN_OFFSET),
            flags,
            salt,
            chain,
        })
    }
}

/// Reads and decodes the header of the segment file at `path`. The outer `Result` is the
/// I/O: an error opening or reading the file is no verdict on it (the caller decides what
/// an unreadable file means). The inner one is the header's: a file too short for a
/// header, damaged, or of another version is that decode's error, naming the file.
pub(crate) fn read_header(storage: &dyn Storage, path: &Path) -> Result<Result<SegmentHeader>> {
    let file = storage
        .open(path, false)
        .map_err(|e| header_io_error(path, e))?;
    read_header_of(&*file, path)
}

/// [`read_header`] of a file already open (`path` names it in errors).
pub(crate) fn read_header_of(file: &dyn StorageFile, path: &Path) -> Result<Result<SegmentHeader>> {
    let mut buf = [0u8; SEGMENT_HEADER_BYTES];
    let bytes = match file.read_exact_at(&mut buf, 0) {
        Ok(()) => buf.len(),
        // Too short for a header: the decode says so (and whether it is empty). The
        // length is asked only then, so a whole header costs one read.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            // (Capped: a reader racing a writer must not index past the buffer.)
            let len = file.len().map_err(|e| header_io_error(path, e))?;
            let len = len.min(buf.len() as u64) as usize;
            file.read_exact_at(&mut buf[..len], 0)
                .map_err(|e| header_io_error(path, e))?;
            len
        }
        Err(e) => return Err(header_io_error(path, e)),
    };
    Ok(SegmentHeader::decode(&buf[..bytes], path))
}

fn header_io_error(path: &Path, e: std::io::Error) -> Error {
    Error::io(format!("reading the header of {}", path.display()), e)
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

/// Creates segment `id` whose first record will have `first_lsn`, its records salted with
/// `salt`.
///
/// Crash safety: the header is written to a temporary file, fsynced, renamed to its final
/// name and the directory fsynced, so a segment file under its final name always has a
/// complete header, and it exists durably before any record in it is acknowledged.
pub fn create_segment(
    storage: &dyn Storage,
    dir: &Path,
    header: SegmentHeader,
    preallocate_bytes: u64,
) -> Result<Box<dyn StorageFile>> {
    let tmp = dir.join(temp_file_name(header.id));
    let file = storage
        .create(&tmp)
        .map_err(|e| Error::io(ctx(dir, header.id, "creating"), e))?;
    preallocate(&*file, SEGMENT_HEADER_BYTES as u64, preallocate_bytes)
        .map_err(|e| Error::io(ctx(dir, header.id, "preallocating"), e))?;
    install_segment(storage, dir, file, &tmp, header)
}

/// Makes the retired segment file `free` (a `.free` name) segment `header.id`: renamed
/// to the temporary name, its header rewritten (with the recycled flag and a new salt),
/// fsynced, then installed like a new segment. Its old records stay where they were, but
/// they carry another salt, so none of them validates in the new life (docs/format.md §3).
pub fn recycle_segment(
    storage: &dyn Storage,
    dir: &Path,
    free: &Path,
    header: SegmentHeader,
) -> Result<Box<dyn StorageFile>> {
    debug_assert!(
        header.is_recycled(),
        "a recycled file says so in its header"
    );
    let tmp = dir.join(temp_file_name(header.id));
    storage
        .rename(free, &tmp)
        .map_err(|e| Error::io(format!("renaming {} for reuse", free.display()), e))?;
    let file = storage
        .open(&tmp, true)
        .map_err(|e| Error::io(ctx(dir, header.id, "opening recycled file for"), e))?;
    install_segment(storage, dir, file, &tmp, header)
}

/// Writes `header` into `file` (at `tmp`), fsyncs it, renames it to its segment name and
/// fsyncs the directory.
fn install_segment(
    storage: &dyn Storage,
    dir: &Path,
    file: Box<dyn StorageFile>,
    tmp: &Path,
    header: SegmentHeader,
) -> Result<Box<dyn StorageFile>> {
    let id = header.id;
    file.write_all_at(&header.encode(), 0)
        .map_err(|e| Error::io(ctx(dir, id, "writing header of"), e))?;
    file.sync_data()
        .map_err(|e| Error::io(ctx(dir, id, "fsyncing"), e))?;
    storage
        .rename(tmp, &segment_path(dir, id))
        .map_err(|e| Error::io(ctx(dir, id, "renaming"), e))?;
    sync_dir(storage, dir)?;
    Ok(file)
}

fn ctx(dir: &Path, id: u64, what: &str) -> String {
    format!("{what} segment {}", segment_path(dir, id).display())
}

/// Reserves `len` zeroed bytes at `offset` so later writes do not change the file size
/// (fdatasync then need not write metadata).
pub fn preallocate(file: &dyn StorageFile, offset: u64, len: u64) -> std::io::Result<()> {
    file.allocate(offset, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(salt: Salt, chain: Option<Chain>) -> SegmentHeader {
        SegmentHeader {
            id: 7,
            first_lsn: 99,
            flags: SEGMENT_FLAG_RECYCLED * u32::from(salt != Salt::Unsalted),
            salt,
            chain,
        }
    }

    const CHAIN: Chain = Chain {
        store_id: 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
        prev_link: 41,
        next_link: 42,
    };

    #[test]
    fn each_version_round_trips_at_its_own_length() {
        let path = Path::new("x.wal");
        for (h, version, bytes) in [
            (header(Salt::Unsalted, None), FORMAT_VERSION_V1, 40),
            (header(Salt::Salted(5), None), FORMAT_VERSION_V2, 40),
            (header(Salt::Salted(42), Some(CHAIN)), FORMAT_VERSION, 64),
        ] {
            let encoded = h.encode();
            assert_eq!((h.version(), encoded.len()), (version, bytes));
            assert_eq!(h.data_start(), bytes as u64);
            assert_eq!(SegmentHeader::decode(&encoded, path).unwrap(), h);
        }
        assert_eq!(header(Salt::Unsalted, None).hand_on(), None);
        assert_eq!(header(Salt::Salted(5), None).hand_on(), Some(5));
        assert_eq!(header(Salt::Salted(9), Some(CHAIN)).hand_on(), Some(42));
    }

    #[test]
    fn a_v3_header_cut_short_or_with_a_changed_field_is_refused() {
        let path = Path::new("x.wal");
        let encoded = header(Salt::Salted(42), Some(CHAIN)).encode();
        for len in SEGMENT_HEADER_BYTES_V2..SEGMENT_HEADER_BYTES {
            let e = SegmentHeader::decode(&encoded[..len], path).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::Corruption {
                        reason: CorruptionReason::BadHeader(_),
                        ..
                    }
                ),
                "{len}: {e}"
            );
        }
        // Every byte of the links and the store id is covered by the checksum.
        for at in SEG_PREV_LINK_OFFSET..SEG_CRC_OFFSET {
            let mut b = encoded.clone();
            b[at] ^= 1;
            let e = SegmentHeader::decode(&b, path).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::Corruption {
                        reason: CorruptionReason::ChecksumMismatch { .. },
                        ..
                    }
                ),
                "{at}: {e}"
            );
        }
    }
}
