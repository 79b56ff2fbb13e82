//! A simulated [`Storage`](super::Storage) for crash and I/O-error tests: deterministic,
//! in memory, and keeping what a power loss would keep apart from what the page cache
//! shows.
//!
//! Each file is an inode with its *volatile* bytes (what reads see), its *durable* bytes
//! (as of its last completed `sync_data`) and the changes made since. Directory entries
//! are volatile until `sync_dir` of their directory makes them durable (directories
//! themselves are durable once created). [`SimStorage::crash_images`] lists the disk
//! images a power loss may leave (docs/log.md §2); [`SimStorage::from_image`] boots one.
//!
//! Every fallible call (all but `is_dir`) is an *operation*, numbered from 0:
//! [`fail_at`](SimStorage::fail_at) makes one fail without effect (or all from it on),
//! [`crash_after`](SimStorage::crash_after) cuts the power before one, and
//! [`record`](SimStorage::record) logs them as [`SimOp`]s that
//! [`apply`](SimStorage::apply) replays elsewhere. Renames stay in one directory.

mod faults;
mod file;
mod fs;
mod image;
mod land;
mod ops;
mod rng;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use serde::{Deserialize, Serialize};

use super::StorageFile;
use faults::Faults;
use file::SimFile;
use fs::Fs;
pub use image::CrashImages;
use image::Plan;

/// Sector size of the fault model: damage to unsynced data comes in these units.
pub const SECTOR_BYTES: u64 = 512;
/// Writes shorter than this are cut at every byte; longer ones at sector boundaries.
pub const CUT_EVERY_BYTE_BELOW: usize = 1024;

/// One storage operation as recorded: enough to replay its effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SimOp {
    /// `create_dir_all(dir)`.
    CreateDirAll(PathBuf),
    /// `create(path)`: a new file with this inode, or the existing one truncated.
    Create(PathBuf, u64),
    /// `write_all_at` on an inode: (inode, offset, data).
    Write(u64, u64, Vec<u8>),
    /// `allocate`: the inode grows to at least this many bytes.
    Allocate(u64, u64),
    /// `sync_data` of an inode.
    SyncData(u64),
    /// `rename(from, to)`.
    Rename(PathBuf, PathBuf),
    /// `remove(path)`.
    Remove(PathBuf),
    /// `exchange(a, b)`: the two names swap their files in one step.
    Exchange(PathBuf, PathBuf),
    /// `sync_dir(dir)`.
    SyncDir(PathBuf),
    /// A read, a lock, or an operation that failed: no effect on the disk.
    NoEffect(String),
}

impl SimOp {
    /// Whether replaying it changes the storage.
    pub fn mutates(&self) -> bool {
        !matches!(self, SimOp::NoEffect(_))
    }
}

/// A disk image a crash may leave.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SimImage {
    /// Files and their bytes.
    pub files: BTreeMap<PathBuf, Vec<u8>>,
    /// Directories.
    pub dirs: BTreeSet<PathBuf>,
    /// How it was made (for failure messages).
    pub label: String,
}

/// Everything clones of one [`SimStorage`] share.
#[derive(Default)]
struct State {
    fs: Fs,
    faults: Faults,
    recording: Option<Vec<SimOp>>,
    locks: HashSet<PathBuf>,
    unsafe_overwrite: bool,
    images: u64,
    sync_latency: Duration,
}

/// The simulated storage. Clones share one disk.
#[derive(Clone, Default)]
pub struct SimStorage(Arc<Mutex<State>>);

impl std::fmt::Debug for SimStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimStorage {{ ops: {} }}", self.ops())
    }
}

impl SimStorage {
    /// An empty disk where only `/` exists.
    pub fn new() -> Self {
        Self::from_image(&SimImage::default())
    }

    fn with(fs: Fs) -> Self {
        SimStorage(Arc::new(Mutex::new(State {
            fs,
            ..State::default()
        })))
    }

    /// A fresh storage whose disk is `image`, all of it durable.
    pub fn from_image(image: &SimImage) -> Self {
        Self::with(Fs::from_image(image))
    }

    /// An independent copy of this disk, volatile and durable state alike: what a
    /// process kill leaves to the next process (the page cache survives; the disk still
    /// holds only what was synced). Counters, faults and locks start afresh.
    pub fn fork(&self) -> SimStorage {
        Self::with(self.0.lock().fs.clone())
    }

    /// Operations started so far (failed ones included).
    pub fn ops(&self) -> u64 {
        self.0.lock().faults.ops
    }

    /// Makes operation `n` fail without effect, and every later one too if `persistent`.
    pub fn fail_at(&self, n: u64, persistent: bool) {
        self.0.lock().faults.fail = Some((n, persistent));
    }

    /// Cuts the power before operation `n`: it and every later one fail without effect,
    /// so the disk stays as it was after operation `n - 1`.
    pub fn crash_after(&self, n: u64) {
        self.0.lock().faults.crash_at = Some(n);
    }

    /// Whether a damaged sector keeps the old bytes the write did not cover ("powersafe
    /// overwrite", docs/log.md §2; the default) or may lose them too.
    pub fn set_powersafe_overwrite(&self, on: bool) {
        self.0.lock().unsafe_overwrite = !on;
    }

    /// Makes every `sync_data` take this long (after its effect, outside any lock), so
    /// that concurrent appenders queue up behind it as they would behind a disk.
    pub fn set_sync_latency(&self, latency: Duration) {
        self.0.lock().sync_latency = latency;
    }

    /// Starts logging every operation, numbered from here.
    pub fn record(&self) {
        self.0.lock().recording = Some(Vec::new());
    }

    /// The operations logged since [`record`](Self::record), in order.
    pub fn take_recording(&self) -> Vec<SimOp> {
        self.0.lock().recording.take().unwrap_or_default()
    }

    /// Replays a recorded operation's effect (not counted; no faults).
    pub fn apply(&self, op: &SimOp) {
        self.0.lock().fs.apply(op);
    }

    /// Images [`crash_images`](Self::crash_images) generated so far on this storage.
    pub fn images_generated(&self) -> u64 {
        self.0.lock().images
    }

    /// What a process kill leaves: everything written.
    pub fn volatile_image(&self) -> SimImage {
        self.0.lock().fs.image(&Plan::Volatile, true)
    }

    /// What a power loss keeps for sure: what completed fsyncs made durable.
    pub fn durable_image(&self) -> SimImage {
        self.0.lock().fs.image(&Plan::Durable, true)
    }

    /// The disk images a power loss now may leave (docs/log.md §2): the durable state; all
    /// that was written; each file's last write that changes bytes, cut at every byte
    /// (below [`CUT_EVERY_BYTE_BELOW`] bytes) or sector boundary; every subset of up to 4
    /// pending directory changes; then `limit` random combinations drawn from `seed`
    /// (changes dropped, writes cut, sectors kept, lost, zeroed or garbled, directory
    /// changes kept or lost). Only the first when nothing is pending. Deterministic.
    pub fn crash_images(&self, seed: u64, limit: usize) -> CrashImages {
        let (fs, powersafe) = {
            let st = self.0.lock();
            (st.fs.clone(), !st.unsafe_overwrite)
        };
        CrashImages::new(self.clone(), fs, powersafe, seed, limit)
    }

    /// Runs one operation: `effect` checks it and returns its result and the change it
    /// makes, if any.
    fn run<T>(
        &self,
        what: &str,
        effect: impl FnOnce(&mut State) -> io::Result<(T, Option<SimOp>)>,
    ) -> io::Result<T> {
        let mut st: MutexGuard<'_, State> = self.0.lock();
        let fault = st.faults.start();
        let injected = fault.is_some();
        let result = match fault {
            None => effect(&mut st),
            Some(e) => Err(e),
        };
        let op = match &result {
            Ok((_, Some(op))) => op.clone(),
            Ok((_, None)) => SimOp::NoEffect(what.to_string()),
            Err(_) if injected => SimOp::NoEffect(format!("{what} (failed)")),
            Err(_) => SimOp::NoEffect(format!("{what} (error)")),
        };
        st.fs.apply(&op);
        if let Some(r) = &mut st.recording {
            r.push(op);
        }
        result.map(|(t, _)| t)
    }

    fn file(&self, ino: u64, writable: bool) -> Box<dyn StorageFile> {
        Box::new(SimFile {
            sim: self.clone(),
            ino,
            writable,
        })
    }
}
