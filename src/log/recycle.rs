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

/// Retired files a compaction pass keeps for reuse however few rotations came before it
/// ([`recycle_files_max`]).
pub const RECYCLE_FILES_MIN: usize = 4;

/// Bytes of retired files a pass keeps at most, counting each as a whole segment, unless
/// [`RECYCLE_FILES_MIN`] segments take more ([`recycle_files_max`]).
pub const RECYCLE_BYTES_MAX: u64 = 256 << 20;

/// How many retired files a background compaction pass keeps for reuse (a forced one keeps
/// [`RECYCLE_FILES_MIN`]), when `rotations` segments were started since the previous pass:
/// as many, because the writers will want about as many before the next one (a pass rarely
/// follows every rotation, so a fixed few would be gone after the first few rotations of
/// each interval and new files made for the rest); at least [`RECYCLE_FILES_MIN`]; at most
/// [`RECYCLE_BYTES_MAX`] worth of `segment_bytes` segments, if that is more than the
/// minimum. The files a pass keeps were the log's segments before it, so keeping them holds
/// the disk at its size before the pass rather than adding to it.
pub fn recycle_files_max(segment_bytes: u64, rotations: u64) -> usize {
    let by_bytes = RECYCLE_BYTES_MAX / segment_bytes.max(1);
    let ceiling = usize::try_from(by_bytes).unwrap_or(usize::MAX);
    let wanted = usize::try_from(rotations).unwrap_or(usize::MAX);
    wanted.min(ceiling).max(RECYCLE_FILES_MIN)
}

/// What a pass keeps for reuse: which lengths, and how many files.
#[derive(Debug, Clone)]
pub(crate) struct Pool {
    /// Lengths worth keeping ([`reusable_bytes`]).
    pub sizes: RangeInclusive<u64>,
    /// Files kept at most ([`recycle_files_max`]).
    pub files_max: usize,
}

impl Pool {
    /// The pool of a log of `segment_bytes` after `rotations` since the previous pass.
    pub fn new(segment_bytes: u64, rotations: u64) -> Pool {
        Pool {
            sizes: reusable_bytes(segment_bytes),
            files_max: recycle_files_max(segment_bytes, rotations),
        }
    }
}

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
    let mut out = Vec::new();
    for path in paths(fs, dir)? {
        out.extend(describe(fs, path)?);
    }
    Ok(out)
}

/// The paths of the retired files in `dir`, by the id they had; nothing is opened.
fn paths(fs: &dyn Storage, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut names: Vec<(u64, String)> = fs
        .list(dir)
        .map_err(|e| Error::io(format!("reading {}", dir.display()), e))?
        .into_iter()
        .filter_map(|name| Some((parse_free_file_name(&name)?, name)))
        .collect();
    names.sort_unstable();
    Ok(names
        .into_iter()
        .map(|(_, name)| dir.join(name))
        .filter(|path| !fs.is_dir(path))
        .collect())
}

/// The retired file at `path`, or `None` if it is gone: the writer may take a file
/// (rename it away) while compaction lists them.
fn describe(fs: &dyn Storage, path: PathBuf) -> Result<Option<Free>> {
    match read_salt(fs, &path) {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(None),
        other => {
            let (salt, file_bytes) = other?;
            Ok(Some(Free {
                path,
                file_bytes,
                salt,
            }))
        }
    }
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
/// Headers are read one file at a time until one fits: a rotation runs on the commit
/// path, and a pool may hold many files.
pub(crate) fn take(
    fs: &dyn Storage,
    dir: &Path,
    min_bytes: u64,
    max_bytes: u64,
) -> Result<Option<Free>> {
    let fits = |f: &Free| f.salt.is_some() && (min_bytes..=max_bytes).contains(&f.file_bytes);
    for path in paths(fs, dir)? {
        if let Some(free) = describe(fs, path)?.filter(fits) {
            return Ok(Some(free));
        }
    }
    Ok(None)
}

/// The lengths of a file worth keeping for reuse in a log of `segment_bytes`: at least a
/// new segment's first preallocation, at most a segment (a longer one, a compacted or
/// oversized segment, would never be taken).
pub(crate) fn reusable_bytes(segment_bytes: u64) -> RangeInclusive<u64> {
    PREALLOCATE_BYTES.min(segment_bytes)..=segment_bytes
}

/// How many retired files wait in `dir` now: the count a batch of [`retire`] calls starts
/// from (listed once per batch, not once per file).
pub(crate) fn waiting(fs: &dyn Storage, dir: &Path) -> Result<usize> {
    Ok(paths(fs, dir)?.len())
}

/// Retires segment file `path` (segment `id`): renamed to its `.free` name while fewer
/// than `pool.files_max` files wait (`waiting`, from [`waiting`] and kept up to date here)
/// and it is a v2 file whose length is in `pool.sizes`, deleted otherwise. A rotation
/// taking a file meanwhile only makes `waiting` high, so a file may go that could have
/// stayed, never the reverse. The caller fsyncs the directory afterwards.
pub(crate) fn retire(
    fs: &dyn Storage,
    dir: &Path,
    (id, path): (u64, &Path),
    pool: &Pool,
    waiting: &mut usize,
) -> Result<()> {
    let reusable = *waiting < pool.files_max && {
        let (salt, file_bytes) = read_salt(fs, path)?;
        salt.is_some() && pool.sizes.contains(&file_bytes)
    };
    let done = match reusable {
        true => fs.rename(path, &dir.join(free_file_name(id))),
        false => fs.remove(path),
    };
    done.map_err(|e| Error::io(format!("removing {}", path.display()), e))?;
    *waiting += usize::from(reusable);
    Ok(())
}

/// Deletes the retired files past the first `files_max` (by the id they had), keeping
/// those a rotation takes first; returns how many went. The caller fsyncs the directory.
pub(crate) fn trim(fs: &dyn Storage, dir: &Path, files_max: usize) -> Result<usize> {
    let mut removed = 0;
    for path in paths(fs, dir)?.into_iter().skip(files_max) {
        removed += usize::from(remove(fs, &path)?);
    }
    Ok(removed)
}

/// Deletes the retired file at `path`; `false` if it was gone already (taken by the
/// writer meanwhile).
fn remove(fs: &dyn Storage, path: &Path) -> Result<bool> {
    match fs.remove(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(format!("removing {}", path.display()), e)),
    }
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
        removed += usize::from(remove(fs, &free.path)?);
    }
    if removed > 0 {
        sync_dir(fs, dir)?;
    }
    Ok(removed)
}
