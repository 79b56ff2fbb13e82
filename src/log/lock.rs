//! The one-writer-per-directory lock (an OS file lock, so it holds across processes).

use std::path::Path;

use super::format::LOCK_FILE_NAME;
use crate::error::{Error, Result};
use crate::storage::{LockGuard, Storage};

/// Holds the directory's writer lock until dropped (the OS also drops it if the process dies).
pub(crate) struct DirLock {
    _guard: LockGuard,
}

impl DirLock {
    /// Takes the writer lock of `dir`, or fails with `Error::Locked` at once.
    pub fn acquire(storage: &dyn Storage, dir: &Path) -> Result<Self> {
        let path = dir.join(LOCK_FILE_NAME);
        match storage.try_lock(&path) {
            Ok(Some(guard)) => Ok(DirLock { _guard: guard }),
            Ok(None) => Err(Error::Locked {
                dir: dir.to_path_buf(),
            }),
            Err(e) => Err(Error::io(format!("locking {}", path.display()), e)),
        }
    }
}
