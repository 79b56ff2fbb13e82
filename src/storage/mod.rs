//! The storage seam: the few file operations the engine uses, behind a trait, so the
//! same engine runs on the real file system ([`RealStorage`], the default) or on a
//! simulated one that tests use to inject crashes and I/O errors.
//!
//! The trait is object-safe and called through `Arc<dyn Storage>`: one virtual call per
//! write or fsync, which costs nothing next to the system call behind it.

#[cfg(feature = "sim")]
pub mod sim;

use std::fmt::Debug;
use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::ops::Deref;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// An open file.
pub trait StorageFile: Send + Sync {
    /// Reads exactly `buf.len()` bytes at `offset` (`UnexpectedEof` past the end).
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset`, extending the file if needed.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Reserves `len` zeroed bytes at `offset` (the file grows to at least `offset + len`).
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()>;
    /// Makes the file's data (and the size needed to read it) durable: fdatasync.
    fn sync_data(&self) -> io::Result<()>;
    /// The file's length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Where the run of *written* bytes that starts at `from` ends, as far as the file
    /// system tells (holes and unwritten preallocated extents are not written); `from` when
    /// it cannot tell. File systems map whole blocks, so it may lie past the file's end.
    /// Only a hint for performance: both kinds of bytes read the same.
    fn written_end(&self, from: u64) -> u64 {
        from
    }
    /// Whether the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Reads the whole file.
    fn read_all(&self) -> io::Result<Vec<u8>> {
        let mut buf = Vec::new();
        self.read_all_into(&mut buf)?;
        Ok(buf)
    }
    /// Reads the whole file into `buf` (replacing its contents, reusing its capacity:
    /// recovery reads every segment through one buffer).
    fn read_all_into(&self, buf: &mut Vec<u8>) -> io::Result<()> {
        buf.clear();
        buf.resize(usize::try_from(self.len()?).map_err(io::Error::other)?, 0);
        self.read_exact_at(buf, 0)
    }
}

/// A read-only view of a whole file, for example a memory map.
pub type FileView = Arc<dyn Deref<Target = [u8]> + Send + Sync>;

/// A lock held on a file until dropped.
pub type LockGuard = Box<dyn Send + Sync>;

/// The file-system operations agentwal performs.
pub trait Storage: Send + Sync + Debug {
    /// Creates a directory and its parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Whether `path` is an existing directory.
    fn is_dir(&self, path: &Path) -> bool;
    /// Names of the entries of `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Creates (or truncates) a file for reading and writing.
    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Opens an existing file.
    fn open(&self, path: &Path, writable: bool) -> io::Result<Box<dyn StorageFile>>;
    /// Renames a file (atomically replacing `to`).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Deletes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Swaps the files `a` and `b` (both must exist) in one atomic step: a crash leaves
    /// both names as they were or both swapped. `Unsupported` (the default) where the
    /// file system cannot; callers then fall back to [`rename`](Self::rename).
    fn exchange(&self, a: &Path, b: &Path) -> io::Result<()> {
        let _ = (a, b);
        Err(io::ErrorKind::Unsupported.into())
    }
    /// Makes the directory's entries (created, renamed, removed files) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Takes an exclusive lock on `path` (created if missing); `Ok(None)` if another
    /// holder has it.
    fn try_lock(&self, path: &Path) -> io::Result<Option<LockGuard>>;
    /// A read-only view of a file that is never written again, if the storage offers a
    /// cheaper one than reading (the real one memory-maps it).
    fn view(&self, path: &Path) -> io::Result<Option<FileView>> {
        let _ = path;
        Ok(None)
    }
}

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealStorage;

struct RealFile(File);

impl StorageFile for RealFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        fallocate(&self.0, offset, len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn written_end(&self, from: u64) -> u64 {
        fiemap_written_end(&self.0, from).unwrap_or(from)
    }
    fn read_all_into(&self, buf: &mut Vec<u8>) -> io::Result<()> {
        use std::io::{Read, Seek};
        // read_to_end fills spare capacity without zeroing it first.
        buf.clear();
        let mut file = &self.0;
        file.seek(io::SeekFrom::Start(0))?;
        file.read_to_end(buf).map(drop)
    }
}

impl Storage for RealStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        std::fs::read_dir(dir)?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect()
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Box::new(RealFile(f)))
    }
    fn open(&self, path: &Path, writable: bool) -> io::Result<Box<dyn StorageFile>> {
        let f = OpenOptions::new().read(true).write(writable).open(path)?;
        Ok(Box::new(RealFile(f)))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn exchange(&self, a: &Path, b: &Path) -> io::Result<()> {
        rename_exchange(a, b)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn try_lock(&self, path: &Path) -> io::Result<Option<LockGuard>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(Box::new(file))),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(e),
        }
    }
    fn view(&self, path: &Path) -> io::Result<Option<FileView>> {
        let file = File::open(path)?;
        // SAFETY: agentwal views only sealed segments, which are never written or
        // truncated again; deleting or replacing the file leaves the mapping valid.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Ok(Some(Arc::new(map)))
    }
}

/// `struct fiemap_extent` of linux/fiemap.h.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct FiemapExtent {
    logical: u64,
    physical: u64,
    length: u64,
    reserved64: [u64; 2],
    flags: u32,
    reserved: [u32; 3],
}

/// Extents asked for per FIEMAP call.
const FIEMAP_EXTENTS: usize = 32;

/// `struct fiemap` of linux/fiemap.h, with room for `FIEMAP_EXTENTS` extents.
#[repr(C)]
#[derive(Default)]
struct Fiemap {
    start: u64,
    length: u64,
    flags: u32,
    mapped_extents: u32,
    extent_count: u32,
    reserved: u32,
    extents: [FiemapExtent; FIEMAP_EXTENTS],
}

/// `_IOWR('f', 11, struct fiemap)`.
const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
const FIEMAP_EXTENT_LAST: u32 = 0x1;
/// Extents whose data is not (known to be) on disk: unknown location, delayed allocation,
/// unwritten (preallocated, reads as zeros).
const FIEMAP_EXTENT_NOT_WRITTEN: u32 = 0x2 | 0x4 | 0x800;

/// Where the run of written extents that starts at `from` ends, from the file system's
/// extent map (FIEMAP). Not from `SEEK_HOLE`: ext4 and XFS report an unwritten extent as
/// data once reads have put its zeros in the page cache, as recovery's scan does. `None`
/// if the file system cannot tell.
/// `renameat2(RENAME_EXCHANGE)`; `Unsupported` where the kernel or the file system lacks it.
fn rename_exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
    };
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: two NUL-terminated paths that outlive the call; no other memory is passed.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP) => {
            Err(io::ErrorKind::Unsupported.into())
        }
        _ => Err(e),
    }
}

fn fiemap_written_end(file: &File, from: u64) -> Option<u64> {
    use std::os::fd::AsRawFd;
    let mut end = from;
    loop {
        let mut map = Fiemap {
            start: end,
            length: u64::MAX - end,
            extent_count: FIEMAP_EXTENTS as u32,
            ..Fiemap::default()
        };
        // SAFETY: FS_IOC_FIEMAP reads the header and writes at most `extent_count` extents
        // into `map`, which has room for them; the descriptor is owned by `file`.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FIEMAP as _, &mut map) };
        if rc != 0 {
            return None;
        }
        let mapped = (map.mapped_extents as usize).min(FIEMAP_EXTENTS);
        let before = end;
        for e in &map.extents[..mapped] {
            if e.logical > end || e.flags & FIEMAP_EXTENT_NOT_WRITTEN != 0 {
                return Some(end);
            }
            end = end.max(e.logical.saturating_add(e.length));
            if e.flags & FIEMAP_EXTENT_LAST != 0 {
                return Some(end);
            }
        }
        if end == before {
            // No extents (past the end of the file), or none that got us further.
            return Some(end);
        }
    }
}

/// fallocate, or zeros written where the file system has none.
fn fallocate(file: &File, offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    if len == 0 {
        return Ok(());
    }
    let (Ok(off), Ok(l)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(io::Error::other("preallocation range overflows off_t"));
    };
    // SAFETY: fallocate only reads its integer arguments; the descriptor is owned by `file`.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, off, l) } == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EOPNOTSUPP) {
        return Err(err);
    }
    const ZERO_CHUNK_BYTES: usize = 64 << 10;
    let zeros = vec![0u8; ZERO_CHUNK_BYTES];
    let mut at = offset;
    while at < offset + len {
        let n = (offset + len - at).min(ZERO_CHUNK_BYTES as u64) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `dir` is on a file system that maps extents (not tmpfs, say).
    fn has_fiemap(dir: &Path) -> bool {
        let probe = dir.join("probe");
        let file = RealStorage.create(&probe).expect("create");
        file.write_all_at(&[1u8; 4096], 0).expect("write");
        file.sync_data().expect("sync");
        let f = File::open(&probe).expect("open");
        fiemap_written_end(&f, 0).is_some()
    }

    #[test]
    fn written_end_stops_at_unwritten_preallocation() {
        let dir = tempfile::tempdir().expect("tempdir");
        if !has_fiemap(dir.path()) {
            eprintln!("skipped: no FIEMAP on {}", dir.path().display());
            return;
        }
        let path = dir.path().join("f");
        let file = RealStorage.create(&path).expect("create");
        file.write_all_at(&[7u8; 10_000], 0).expect("write");
        file.allocate(10_000, 1 << 20).expect("allocate");
        file.sync_data().expect("sync");
        // Reads put the unwritten range's zeros in the page cache; the map still tells.
        file.read_all().expect("read");
        let written = file.written_end(0);
        assert!(
            (10_000..=12_288).contains(&written),
            "written through {written}, expected the 4 KiB block holding byte 9,999"
        );
        assert_eq!(file.written_end(5_000), written);
        assert_eq!(
            file.written_end(written),
            written,
            "nothing written past it"
        );
        file.write_all_at(&vec![0u8; 1 << 20], 10_000)
            .expect("zero");
        file.sync_data().expect("sync");
        // Extents are whole blocks: the last one may end past the file's length.
        assert!(file.written_end(0) >= file.len().expect("len"));
    }
}
