//! Where a scan reads a segment's bytes from (a memory map, or a copy), and what keeps
//! them readable for a read-only handle afterwards (its pins).

use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::log::record::Salt;
use crate::storage::{FileView, Storage};

/// What keeps the bytes a read-only scan read readable for the handle's lifetime, however
/// a writer renames or deletes the file afterwards (docs/log.md §3.4).
#[derive(Clone)]
pub(crate) struct SegmentPin {
    /// A memory map of the file as scanned, or a copy of the bytes scanned.
    pub bytes: FileView,
    /// The salt the segment had when scanned.
    pub salt: Salt,
    /// Whether `bytes` is a map: a recycled file changes under it (docs/format.md §6), and its
    /// header then shows another salt.
    pub mapped: bool,
}
/// A sealed segment at most this large is pinned as a copy rather than a memory map, so a
/// store of many small segments does not run into the kernel's limit on maps per process
/// (`vm.max_map_count`, 65,530 by default). Memory held is then at most the store's size.
pub(crate) const PIN_COPY_BYTES_MAX: usize = 1 << 20;

/// Reads the whole segment into `buf`.
fn read_whole(storage: &dyn Storage, path: &Path, buf: &mut Vec<u8>) -> Result<()> {
    storage
        .open(path, false)
        .and_then(|f| f.read_all_into(buf))
        .map_err(|e| Error::io(format!("reading segment {}", path.display()), e))
}

/// Where the scan read a segment's bytes from.
pub(super) enum Source {
    /// A memory map of the whole file.
    Mapped(FileView),
    /// Copied into the scan's buffer.
    Read,
}

impl Source {
    /// The whole segment at `path`: mapped if `may_map` and the storage maps, else read
    /// into `read_buf`.
    pub fn open(
        storage: &dyn Storage,
        path: &Path,
        may_map: bool,
        read_buf: &mut Vec<u8>,
    ) -> Result<Source> {
        let view = match may_map {
            true => view_whole(storage, path)?,
            false => None,
        };
        Ok(match view {
            Some(view) => Source::Mapped(view),
            None => {
                read_whole(storage, path, read_buf)?;
                Source::Read
            }
        })
    }

    /// The segment's bytes; `read_buf` is the buffer [`open`](Self::open) was given.
    pub fn bytes<'a>(&'a self, read_buf: &'a [u8]) -> &'a [u8] {
        match self {
            Source::Mapped(view) => view,
            Source::Read => read_buf,
        }
    }

    /// What keeps the scanned bytes readable: the map (copied when small, see
    /// [`PIN_COPY_BYTES_MAX`]), or a copy of the `data_end` bytes read from the file
    /// (the last segment: the writer appends past them, and may later recycle the file).
    pub fn pin(self, read_buf: &[u8], data_end: usize, salt: Salt) -> SegmentPin {
        let (bytes, mapped) = match self {
            Source::Mapped(view) if view.len() <= PIN_COPY_BYTES_MAX => {
                (Arc::new(view.to_vec()) as FileView, false)
            }
            Source::Mapped(view) => (view, true),
            Source::Read => (Arc::new(read_buf[..data_end].to_vec()) as FileView, false),
        };
        SegmentPin {
            bytes,
            salt,
            mapped,
        }
    }
}

/// A memory map of a segment no one writes any more, where the storage offers one.
fn view_whole(storage: &dyn Storage, path: &Path) -> Result<Option<FileView>> {
    storage
        .view(path)
        .map_err(|e| Error::io(format!("reading segment {}", path.display()), e))
}
