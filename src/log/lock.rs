//! The one-writer-per-directory lock (an OS file lock, so it holds across processes).

use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;

use super::format::LOCK_FILE_NAME;
use crate::error::{Error, Result};

/// Holds the directory's writer lock until dropped (the OS also drops it if the process dies).
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: File,
}

impl DirLock {
    /// Takes the writer lock of `dir`, or fails with `Error::Locked` at once.
    pub fn acquire(dir: &Path) -> Result<Self> {
        let path = dir.join(LOCK_FILE_NAME);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(format!("opening lock file {}", path.display()), e))?;
        match file.try_lock() {
            Ok(()) => Ok(DirLock { _file: file }),
            Err(TryLockError::WouldBlock) => Err(Error::Locked {
                dir: dir.to_path_buf(),
            }),
            Err(TryLockError::Error(e)) => Err(Error::io(format!("locking {}", path.display()), e)),
        }
    }
}
