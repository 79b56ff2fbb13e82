//! Reading records back by position: from a read-only handle's pins, from a writer's cached
//! memory maps of its segments, or by copying them out of the file.

use std::path::Path;

use super::format::*;
use super::record::{self, DecodeError, Salt};
use super::recovery::{SegmentPin, SkippedRange};
use super::segment::{SegmentHeader, read_header_of, segment_path};
use super::{Log, RecordPos, RecordRef};
use crate::error::{CorruptionReason, Error, Result};
use crate::storage::{FileView, StorageFile};

impl Log {
    /// Reads the payload of the record at `pos`, verifying its checksum.
    pub fn read(&self, pos: RecordPos) -> Result<Vec<u8>> {
        self.read_with(pos, |rec| Ok(rec.payload.to_vec()))
    }

    /// Reads the record at `pos` and hands it to `f` without copying the payload when the
    /// segment is memory-mapped.
    pub fn read_with<T>(
        &self,
        pos: RecordPos,
        f: impl FnOnce(RecordRef<'_>) -> Result<T>,
    ) -> Result<T> {
        let path = segment_path(&self.inner.dir, pos.segment_id);
        if let Some(pins) = &self.inner.pins {
            let changed = || Error::StoreChanged {
                dir: self.inner.dir.clone(),
            };
            // Not a segment this handle scanned: the position came from elsewhere.
            let pin = pins.get(&pos.segment_id).ok_or_else(changed)?;
            let read = decode_pinned(pin, pos, &path);
            // A mapped file recycled since the scan holds another life's bytes, which
            // never validate under the scan's salt: the view is gone, not damaged.
            if pin.mapped
                && SegmentHeader::decode(&pin.bytes, &path)
                    .ok()
                    .map(|h| h.salt)
                    != Some(pin.salt)
            {
                return Err(changed());
            }
            return f(read?);
        }
        if let Some(view) = self.view(pos, &path)? {
            return f(decode_in(&view, pos, &path)?);
        }
        let file = self
            .inner
            .storage
            .open(&path, false)
            .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        read_from_file(&*file, pos, &path, f)
    }

    /// Salvage: what is left of the record at the start of a range recovery skipped, if
    /// its header still parses: its kind and the bytes after the header (cut off at the
    /// range's end, the checksum unchecked). A damaged record's leading fields often
    /// survive, which lets a report name what was lost. Best effort: `None` otherwise.
    pub fn skipped_record(&self, range: &SkippedRange) -> Option<(u8, Vec<u8>)> {
        let file = self.inner.storage.open(&range.segment, false).ok()?;
        let len = usize::try_from(range.bytes).ok()?;
        let mut region = vec![0u8; len];
        file.read_exact_at(&mut region, range.offset).ok()?;
        let header = record::parse_header(&region).ok()?;
        region.drain(..RECORD_HEADER_BYTES.min(region.len()));
        Some((header.kind, region))
    }

    /// Drops cached maps of segments `<= through_id` (replaced or about to be deleted).
    pub(super) fn forget_maps(&self, through_id: u64) {
        self.inner.maps.write().retain(|id, _| *id > through_id);
    }

    /// A memory map of the segment of `pos` that holds the whole record there (as its
    /// header says), or `None` when the storage cannot map or even a fresh map does not
    /// hold it (the copying path then reports what is wrong). Writers only: a read-only
    /// handle reads its pins. The active segment is mapped too: no byte below its write
    /// position ever changes, and a cached map that ends before the record (made before
    /// the file grew) is replaced by a fresh one.
    fn view(&self, pos: RecordPos, path: &Path) -> Result<Option<FileView>> {
        let cached = self.inner.maps.read().get(&pos.segment_id).cloned();
        if let Some(view) = cached
            && holds_record(&view, pos.offset)
        {
            return Ok(Some(view));
        }
        let Some(view) = self
            .inner
            .storage
            .view(path)
            .map_err(|e| Error::io(format!("mapping {}", path.display()), e))?
        else {
            return Ok(None);
        };
        self.inner.maps.write().insert(pos.segment_id, view.clone());
        // Not whole even in a fresh map: let the copying path report what is wrong.
        Ok(holds_record(&view, pos.offset).then_some(view))
    }
}

/// Whether `view` holds a whole record (as its header says) at `offset`.
fn holds_record(view: &FileView, offset: u64) -> bool {
    let Some(head) = usize::try_from(offset)
        .ok()
        .and_then(|at| view.get(at..at.checked_add(RECORD_HEADER_BYTES)?))
    else {
        return false;
    };
    let Ok(header) = record::parse_header(head) else {
        return false;
    };
    offset.saturating_add(header.record_bytes()) <= view.len() as u64
}

/// Decodes the record at `pos` in a read-only handle's pinned bytes, under the salt the
/// segment had when scanned.
fn decode_pinned<'a>(pin: &'a SegmentPin, pos: RecordPos, path: &'a Path) -> Result<RecordRef<'a>> {
    let bytes = usize::try_from(pos.offset)
        .ok()
        .and_then(|at| pin.bytes.get(at..))
        .unwrap_or(&[]);
    decode_at(bytes, pin.salt, pos, path)
}

/// Decodes the record at `pos` inside the whole segment `segment`.
fn decode_in<'a>(segment: &'a [u8], pos: RecordPos, path: &'a Path) -> Result<RecordRef<'a>> {
    let salt = SegmentHeader::decode(segment, path)?.salt;
    let bytes = usize::try_from(pos.offset)
        .ok()
        .and_then(|at| segment.get(at..))
        .unwrap_or(&[]);
    decode_at(bytes, salt, pos, path)
}

/// Reads the record at `pos` from an open segment file: its header, then all of it.
fn read_from_file<T>(
    file: &dyn StorageFile,
    pos: RecordPos,
    path: &Path,
    f: impl FnOnce(RecordRef<'_>) -> Result<T>,
) -> Result<T> {
    // A header that does not decode (a file cut short, say) is that decode's error.
    let salt = read_header_of(file, path)??.salt;
    let mut head = [0u8; RECORD_HEADER_BYTES];
    read_exact_at(file, &mut head, pos.offset, path)?;
    let header = record::parse_header(&head).map_err(|e| decode_error(e, pos, path))?;
    if header.record_bytes() > RECORD_BYTES_MAX {
        return Err(decode_error(
            DecodeError::Invalid(CorruptionReason::BadLength {
                length: u64::from(header.payload_len),
            }),
            pos,
            path,
        ));
    }
    let mut buf = vec![0u8; header.record_bytes() as usize];
    read_exact_at(file, &mut buf, pos.offset, path)?;
    f(decode_at(&buf, salt, pos, path)?)
}

fn decode_at<'a>(
    bytes: &'a [u8],
    salt: Salt,
    pos: RecordPos,
    path: &'a Path,
) -> Result<RecordRef<'a>> {
    let (h, payload) = record::decode(bytes, salt).map_err(|e| decode_error(e, pos, path))?;
    if h.kind == KIND_SEAL || h.kind == KIND_CLOSE {
        return Err(Error::Corruption {
            segment: path.to_path_buf(),
            offset: pos.offset,
            reason: CorruptionReason::UnknownKind(h.kind),
        });
    }
    Ok(RecordRef {
        segment_id: pos.segment_id,
        offset: pos.offset,
        lsn: h.lsn,
        kind: h.kind,
        payload,
        segment: path,
    })
}

fn decode_error(e: DecodeError, pos: RecordPos, path: &Path) -> Error {
    let reason = match e {
        DecodeError::Invalid(r) => r,
        DecodeError::Unwritten => CorruptionReason::UnknownKind(KIND_UNWRITTEN),
        DecodeError::Truncated => CorruptionReason::BadLength { length: 0 },
    };
    Error::Corruption {
        segment: path.to_path_buf(),
        offset: pos.offset,
        reason,
    }
}

fn read_exact_at(file: &dyn StorageFile, buf: &mut [u8], offset: u64, path: &Path) -> Result<()> {
    file.read_exact_at(buf, offset).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Error::Corruption {
                segment: path.to_path_buf(),
                offset,
                reason: CorruptionReason::BadLength {
                    length: buf.len() as u64,
                },
            }
        } else {
            Error::io(format!("reading {}", path.display()), e)
        }
    })
}
