//! Where a scan reads a segment's bytes from (a memory map, or a copy), and what keeps
//! them readable for a read-only handle afterwards (its pins).

use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::storage::{FileView, Storage, StorageFile};

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
pub(super) enum Source {
    /// A memory map of the whole file.
    Mapped(FileView),
    /// Copied into the scan's buffer from this open file.
    Read(Box<dyn StorageFile>),
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
            None => Source::Read(read_whole(storage, path, read_buf)?),
        })
    }

    /// The segment's bytes; `read_buf` is the buffer [`open`](Self::open) was given.
    pub fn bytes<'a>(&'a self, read_buf: &'a [u8]) -> &'a [u8] {
        match self {
            Source::Mapped(view) => view,
            Source::Read(_) => read_buf,
        }
    }

    /// What keeps the scanned bytes readable: the map (copied when small, see
    /// [`PIN_COPY_BYTES_MAX`]), or the file they were read from.
    pub fn pin(self) -> SegmentPin {
        match self {
            Source::Mapped(view) if view.len() <= PIN_COPY_BYTES_MAX => {
                SegmentPin::Bytes(Arc::new(view.to_vec()))
            }
            Source::Mapped(view) => SegmentPin::Bytes(view),
            Source::Read(file) => SegmentPin::File(Arc::from(file)),
        }
    }
}

/// A memory map of a segment no one writes any more, where the storage offers one.
fn view_whole(storage: &dyn Storage, path: &Path) -> Result<Option<FileView>> {
    storage
        .view(path)
        .map_err(|e| Error::io(format!("reading segment {}", path.display()), e))
}
