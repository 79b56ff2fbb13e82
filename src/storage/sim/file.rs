//! [`SimFile`], an open file of the simulated disk: reads see its volatile bytes, and
//! each change goes through [`SimStorage::run`] to be counted, faulted and recorded.

use std::io;

use super::{SimOp, SimStorage};
use crate::storage::StorageFile;

/// An open file: a handle on an inode, which outlives the name it was opened by.
pub(super) struct SimFile {
    pub(super) sim: SimStorage,
    pub(super) ino: u64,
    pub(super) writable: bool,
}

impl SimFile {
    fn change(&self, what: &str, op: SimOp) -> io::Result<()> {
        self.sim.run(what, |_| match self.writable {
            true => Ok(((), Some(op))),
            false => Err(io::Error::new(io::ErrorKind::PermissionDenied, "read-only")),
        })
    }
    fn read<T>(&self, what: &str, f: impl FnOnce(&[u8]) -> io::Result<T>) -> io::Result<T> {
        self.sim
            .run(what, |st| Ok((f(&st.fs.inodes[&self.ino].volatile)?, None)))
    }
}

impl StorageFile for SimFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.read("read", |data| {
            let src = data.get(offset as usize..offset as usize + buf.len());
            buf.copy_from_slice(src.ok_or(io::ErrorKind::UnexpectedEof)?);
            Ok(())
        })
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.change("write", SimOp::Write(self.ino, offset, buf.to_vec()))
    }
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        self.change("allocate", SimOp::Allocate(self.ino, offset + len))
    }
    fn sync_data(&self) -> io::Result<()> {
        let op = SimOp::SyncData(self.ino);
        let latency = self
            .sim
            .run("sync_data", |st| Ok((st.sync_latency, Some(op))))?;
        std::thread::sleep(latency);
        Ok(())
    }
    fn len(&self) -> io::Result<u64> {
        self.read("len", |data| Ok(data.len() as u64))
    }
    fn read_all(&self) -> io::Result<Vec<u8>> {
        self.read("read_all", |data| Ok(data.to_vec()))
    }
    /// The simulated extent map: everything up to the file's last non-zero byte counts
    /// as written, as on a file system whose map the bytes of a recycled segment's
    /// earlier life are in; zeros past it may as well be unwritten preallocated space
    /// (zeroing them changes no byte). Like the real one, a hint: no operation, no fault.
    fn written_end(&self, from: u64) -> u64 {
        let st = self.sim.0.lock();
        let data = &st.fs.inodes[&self.ino].volatile;
        let last = data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        from.max(last as u64)
    }
}
