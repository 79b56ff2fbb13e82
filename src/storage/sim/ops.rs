//! The [`Storage`] operations of [`SimStorage`] on paths: each checks its arguments
//! against the file system as reads see it and names the change it makes, which
//! [`SimStorage::run`] counts, faults, applies and records.

use std::io;
use std::path::{Path, PathBuf};

use super::SimOp;
use super::SimStorage;
use super::fs::parent;
use crate::storage::{FileView, LockGuard, Storage, StorageFile};

/// A held lock; dropping it frees the path for the next `try_lock`.
struct SimLock(SimStorage, PathBuf);

impl Drop for SimLock {
    fn drop(&mut self) {
        self.0.0.lock().locks.remove(&self.1);
    }
}

impl Storage for SimStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.run("create_dir_all", |_| {
            Ok(((), Some(SimOp::CreateDirAll(dir.into()))))
        })
    }
    fn is_dir(&self, path: &Path) -> bool {
        self.0.lock().fs.dirs.contains(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.run("list", |st| {
            st.fs.dir(dir)?;
            let all = st.fs.entries.keys().chain(&st.fs.dirs);
            let names = all
                .filter(|p| parent(p) == dir)
                .filter_map(|p| p.file_name());
            Ok((
                names.map(|n| n.to_string_lossy().into_owned()).collect(),
                None,
            ))
        })
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let ino = self.run("create", |st| {
            st.fs.dir(parent(path))?;
            let ino = st.fs.entries.get(path).copied().unwrap_or(st.fs.next_ino);
            Ok((ino, Some(SimOp::Create(path.into(), ino))))
        })?;
        Ok(self.file(ino, true))
    }
    fn open(&self, path: &Path, writable: bool) -> io::Result<Box<dyn StorageFile>> {
        let ino = self.run("open", |st| Ok((st.fs.entry(path)?, None)))?;
        Ok(self.file(ino, writable))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let op = SimOp::Rename(from.into(), to.into());
        self.run("rename", |st| Ok((st.fs.entry(from).map(drop)?, Some(op))))
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        let op = SimOp::Remove(path.into());
        self.run("remove", |st| Ok((st.fs.entry(path).map(drop)?, Some(op))))
    }
    fn exchange(&self, a: &Path, b: &Path) -> io::Result<()> {
        let op = SimOp::Exchange(a.into(), b.into());
        self.run("exchange", |st| {
            Ok((st.fs.entry(a).and(st.fs.entry(b)).map(drop)?, Some(op)))
        })
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.run("sync_dir", |st| {
            Ok((st.fs.dir(dir)?, Some(SimOp::SyncDir(dir.into()))))
        })
    }
    fn try_lock(&self, path: &Path) -> io::Result<Option<LockGuard>> {
        if !self.0.lock().fs.entries.contains_key(path) {
            drop(self.create(path)?); // created if missing, like a real lock file
        }
        let taken = self.run("try_lock", |st| Ok((st.locks.insert(path.into()), None)))?;
        Ok(taken.then(|| Box::new(SimLock(self.clone(), path.into())) as LockGuard))
    }
    fn view(&self, _path: &Path) -> io::Result<Option<FileView>> {
        self.run("view", |_| Ok((None, None)))
    }
}
