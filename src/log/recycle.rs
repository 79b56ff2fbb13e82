//! Recycling segment files (docs/format.md §6, "Recycled segments"): compaction retires
//! the files of segments it no longer needs under a `.free` name instead of deleting
//! them, and the writer's next rotation takes one and gives it a new header, so its
//! blocks are written already: no zeros to write, no unwritten extents to convert in
//! fdatasync. Only format-v2 files are kept: their old records carry a salt the new
//! life's never has, so none of them validates again (docs/format.md §3). A v1 file's records carry
//! no salt, and it is deleted as before.

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use super::format::*;
use super::record::Salt;
use super::segment::{SegmentHeader, read_header_of, sync_dir};
use crate::error::{Error, Result};
use crate::storage::Storage;

/// Retired files kept for reuse at most; the rest are deleted. Each costs up to a
/// segment of disk space while it waits, so the store's disk use may exceed its log by
/// this many segments.
pub const RECYCLE_FILES_MAX: usize = 4;

/// A retired file waiting for reuse.
#[derive(Debug, Clone)]
pub(crate) struct Free {
    pub path: PathBuf,
    pub file_bytes: u64,
    /// The salt of its last life (every earlier life's was lower).
    pub salt: Option<u32>,
}

/// The retired files in `dir`, by the id they had. A file whose header does not decode
/// as format v2 is listed with no salt (it is never reused).
pub(crate) fn list(fs: &dyn Storage, dir: &Path) -> Result<Vec<Free>> {
    let mut names: Vec<(u64, String)> = fs
        .list(dir)
        .map_err(|e| Error::io(format!("reading {}", dir.display()), e))?
        .into_iter()
        .filter_map(|name| Some((parse_free_file_name(&name)?, name)))
        .collect();
    names.sort_unstable();
    let mut out = Vec::with_capacity(names.len());
    for (_, name) in names {
        let path = dir.join(name);
        if fs.is_dir(&path) {
            continue;
        }
        // The writer may take a file (rename it away) while compaction lists them.
        let (salt, file_bytes) = match read_salt(fs, &path) {
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                continue;
            }
            other => other?,
        };
        out.push(Free {
            path,
            file_bytes,
            salt,
        });
    }
    Ok(out)
}

/// The salt in the v2 header of the file at `path` (`None` for anything else: too
/// short, another version, damage) and the file's length. I/O errors are errors.
fn read_salt(fs: &dyn Storage, path: &Path) -> Result<(Option<u32>, u64)> {
    let io = |e| Error::io(format!("reading {}", path.display()), e);
    let file = fs.open(path, false).map_err(io)?;
    let file_bytes = file.len().map_err(io)?;
    // A header that does not decode only means the file is not reused.
    let salt = match read_header_of(&*file, path)? {
        Ok(SegmentHeader {
            salt: Salt::Salted(salt),
            ..
        }) => Some(salt),
        _ => None,
    };
    Ok((salt, file_bytes))
}

/// Takes a retired file at least `min_bytes` and at most `max_bytes` long, if one waits.
/// The caller renames it away (to a temporary name) at once; only the writer takes files.
pub(crate) fn take(
    fs: &dyn Storage,
    dir: &Path,
    min_bytes: u64,
    max_bytes: u64,
) -> Result<Option<Free>> {
    Ok(list(fs, dir)?
        .into_iter()
        .find(|f| f.salt.is_some() && (min_bytes..=max_bytes).contains(&f.file_bytes)))
}

/// The lengths of a file worth keeping for reuse in a log of `segment_bytes`: at least a
/// new segment's first preallocation, at most a segment (a longer one, a compacted or
/// oversized segment, would never be taken).
pub(crate) fn reusable_bytes(segment_bytes: u64) -> RangeInclusive<u64> {
    PREALLOCATE_BYTES.min(segment_bytes)..=segment_bytes
}

/// Retires segment file `path` (segment `id`): renamed to its `.free` name while fewer
/// than [`RECYCLE_FILES_MAX`] files wait and it is a v2 file whose length is in `sizes`,
/// deleted otherwise. The caller fsyncs the directory afterwards.
pub(crate) fn retire(
    fs: &dyn Storage,
    dir: &Path,
    id: u64,
    path: &Path,
    sizes: RangeInclusive<u64>,
) -> Result<()> {
    let waiting = list(fs, dir)?.len();
    let reusable = waiting < RECYCLE_FILES_MAX && {
        let (salt, file_bytes) = read_salt(fs, path)?;
        salt.is_some() && sizes.contains(&file_bytes)
    };
    let done = match reusable {
        true => fs.rename(path, &dir.join(free_file_name(id))),
        false => fs.remove(path),
    };
    done.map_err(|e| Error::io(format!("removing {}", path.display()), e))
}

/// Deletes the retired files, then fsyncs the directory if any went; returns how many.
/// With `keep` (at open), those that could be reused, v2 files with a length in it, stay;
/// without, all go (their space is needed on a full disk).
pub(crate) fn drain(
    fs: &dyn Storage,
    dir: &Path,
    keep: Option<RangeInclusive<u64>>,
) -> Result<usize> {
    let mut removed = 0;
    for free in list(fs, dir)? {
        if let Some(keep) = &keep
            && free.salt.is_some()
            && keep.contains(&free.file_bytes)
        {
            continue;
        }
        match fs.remove(&free.path) {
            Ok(()) => removed += 1,
            // Taken by the writer meanwhile.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(format!("removing {}", free.path.display()), e)),
        }
    }
    if removed > 0 {
        sync_dir(fs, dir)?;
    }
    Ok(removed)
}
