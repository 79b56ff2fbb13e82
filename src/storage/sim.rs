//! A simulated [`Storage`] for crash and I/O-error tests: deterministic, in memory, and
//! keeping what a power loss would keep apart from what the page cache shows.
//!
//! Each file is an inode with its *volatile* bytes (what reads see), its *durable* bytes
//! (as of its last completed `sync_data`) and the changes made since. Directory entries
//! are volatile until `sync_dir` of their directory makes them durable (directories
//! themselves are durable once created). [`SimStorage::crash_images`] lists the disk
//! images a power loss may leave (DESIGN.md §4); [`SimStorage::from_image`] boots one.
//!
//! Every fallible call (all but `is_dir`) is an *operation*, numbered from 0:
//! [`fail_at`](SimStorage::fail_at) makes one fail without effect (or all from it on),
//! [`crash_after`](SimStorage::crash_after) cuts the power before one, and
//! [`record`](SimStorage::record) logs them as [`SimOp`]s that
//! [`apply`](SimStorage::apply) replays elsewhere. Renames stay in one directory.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use serde::{Deserialize, Serialize};

use super::{FileView, LockGuard, Storage, StorageFile};

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

#[derive(Debug, Clone, Default)]
struct Inode {
    volatile: Vec<u8>,
    durable: Vec<u8>,
    /// `Create` (truncation), `Write` and `Allocate` since the last `sync_data`.
    pending: Vec<SimOp>,
}

/// An entry change not yet durable: `from` unlinked (if it still names `ino`), `to` linked.
#[derive(Debug, Clone)]
struct DirOp {
    from: Option<PathBuf>,
    to: Option<PathBuf>,
    ino: u64,
}

#[derive(Debug, Clone, Default)]
struct Fs {
    inodes: BTreeMap<u64, Inode>,
    entries: BTreeMap<PathBuf, u64>,
    durable_entries: BTreeMap<PathBuf, u64>,
    dir_pending: Vec<DirOp>,
    dirs: BTreeSet<PathBuf>,
    next_ino: u64,
}

fn parent(p: &Path) -> &Path {
    p.parent().unwrap_or(Path::new(""))
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, path.display().to_string())
}

impl Fs {
    fn entry(&self, path: &Path) -> io::Result<u64> {
        self.entries
            .get(path)
            .copied()
            .ok_or_else(|| not_found(path))
    }

    fn dir(&self, dir: &Path) -> io::Result<()> {
        self.dirs.get(dir).map(drop).ok_or_else(|| not_found(dir))
    }

    fn apply(&mut self, op: &SimOp) {
        let link = |from: Option<&PathBuf>, to: Option<&PathBuf>, ino| {
            let (from, to) = (from.cloned(), to.cloned());
            Some(DirOp { from, to, ino })
        };
        let dir_op = match op {
            SimOp::CreateDirAll(dir) => {
                let new = dir.ancestors().filter(|d| !d.as_os_str().is_empty());
                self.dirs.extend(new.map(Path::to_path_buf));
                None
            }
            SimOp::Create(path, ino) => {
                self.next_ino = self.next_ino.max(ino + 1);
                let inode = self.inodes.entry(*ino).or_default();
                inode.volatile.clear();
                inode.pending.push(op.clone());
                let old = self.entries.insert(path.clone(), *ino);
                if old == Some(*ino) {
                    None
                } else {
                    link(None, Some(path), *ino)
                }
            }
            SimOp::Write(ino, ..) | SimOp::Allocate(ino, _) | SimOp::SyncData(ino) => {
                let inode = self.inodes.get_mut(ino).expect("inode exists");
                if let SimOp::SyncData(_) = op {
                    inode.durable = inode.volatile.clone();
                    inode.pending.clear();
                } else {
                    land(&mut inode.volatile, op, &Land::Whole, true);
                    inode.pending.push(op.clone());
                }
                None
            }
            SimOp::Rename(from, to) => {
                let ino = self.entries.remove(from).expect("renamed file exists");
                self.entries.insert(to.clone(), ino);
                link(Some(from), Some(to), ino)
            }
            SimOp::Remove(path) => {
                let ino = self.entries.remove(path).expect("removed file exists");
                link(Some(path), None, ino)
            }
            SimOp::SyncDir(dir) => {
                self.durable_entries.retain(|p, _| parent(p) != dir);
                let synced = self.entries.iter().filter(|(p, _)| parent(p) == dir);
                self.durable_entries
                    .extend(synced.map(|(p, i)| (p.clone(), *i)));
                let of = |op: &DirOp| op.to.clone().or(op.from.clone()).unwrap_or_default();
                self.dir_pending.retain(|op| parent(&of(op)) != dir);
                None
            }
            SimOp::NoEffect(_) => None,
        };
        self.dir_pending.extend(dir_op);
    }

    /// The image `plan` describes.
    fn image(&self, plan: &Plan, powersafe: bool) -> SimImage {
        let mut entries = self.durable_entries.clone();
        for (i, op) in self.dir_pending.iter().enumerate() {
            match &op.from {
                _ if !plan.keeps_dir_change(i) => continue,
                Some(from) if entries.get(from) != Some(&op.ino) => continue,
                Some(from) => drop(entries.remove(from)),
                None => {}
            }
            entries.extend(op.to.clone().map(|to| (to, op.ino)));
        }
        let mut files = BTreeMap::new();
        for (path, ino) in entries {
            let inode = &self.inodes[&ino];
            let mut buf = inode.durable.clone();
            for (i, op) in inode.pending.iter().enumerate() {
                land(&mut buf, op, &plan.land(ino, i), powersafe);
            }
            files.insert(path, buf);
        }
        let (dirs, label) = (self.dirs.clone(), plan.label());
        SimImage { files, dirs, label }
    }
}

fn write_at(buf: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let end = offset as usize + data.len();
    if buf.len() < end {
        buf.resize(end, 0);
    }
    buf[offset as usize..end].copy_from_slice(data);
}

/// How one pending file change lands in an image.
#[derive(Debug, Clone)]
enum Land {
    Whole,
    Dropped,
    /// Only the first `n` bytes of the write.
    Cut(usize),
    /// Per sector of the write: 0 kept, 1 lost (old bytes), 2 zeros, 3 garbage (seeded).
    Sectors(Vec<u8>, u64),
}

fn land(buf: &mut Vec<u8>, op: &SimOp, how: &Land, powersafe: bool) {
    let (offset, data) = match (op, how) {
        (_, Land::Dropped) => return,
        (SimOp::Create(..), _) => return buf.clear(),
        (SimOp::Allocate(_, len), _) => return buf.resize((*len as usize).max(buf.len()), 0),
        (SimOp::Write(_, offset, data), _) => (*offset, data),
        _ => unreachable!("not a file change"),
    };
    let (fates, seed) = match how {
        Land::Cut(n) => return write_at(buf, offset, &data[..*n]),
        Land::Sectors(fates, seed) => (fates, seed),
        _ => return write_at(buf, offset, data),
    };
    let mut rng = Rng(*seed);
    let end = offset + data.len() as u64;
    for (k, fate) in fates.iter().enumerate() {
        let s = (offset / SECTOR_BYTES + k as u64) * SECTOR_BYTES;
        let (lo, hi) = (s.max(offset), (s + SECTOR_BYTES).min(end));
        let new = &data[(lo - offset) as usize..(hi - offset) as usize];
        // Without powersafe overwrite, a damaged sector loses its old bytes too.
        let (lo, hi) = match powersafe || *fate < 2 {
            true => (lo, hi),
            false => (s, (s + SECTOR_BYTES).min(end.max(buf.len() as u64))),
        };
        let mut garbage = || (lo..hi).map(|_| rng.next() as u8).collect::<Vec<_>>();
        match fate {
            0 => write_at(buf, lo, new),
            2 => write_at(buf, lo, &vec![0; (hi - lo) as usize]),
            3 => write_at(buf, lo, &garbage()),
            _ => {}
        }
    }
}

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Which crash image to build.
enum Plan {
    Durable,
    Volatile,
    /// Everything, but this change of this inode cut after this many bytes.
    Cut(u64, usize, usize),
    /// Everything, but of the pending directory changes only those in this mask.
    Dirs(u32),
    /// A random mix drawn from a seed: directory changes kept, and file changes.
    Mixed(u64, Vec<bool>, BTreeMap<(u64, usize), Land>),
}

impl Plan {
    fn keeps_dir_change(&self, i: usize) -> bool {
        match self {
            Plan::Durable => false,
            Plan::Dirs(mask) => mask >> i & 1 == 1,
            Plan::Mixed(_, dirs, _) => dirs[i],
            _ => true,
        }
    }

    fn land(&self, ino: u64, i: usize) -> Land {
        match self {
            Plan::Durable => Land::Dropped,
            Plan::Cut(at, op, n) if (*at, *op) == (ino, i) => Land::Cut(*n),
            Plan::Mixed(_, _, lands) => lands.get(&(ino, i)).cloned().unwrap_or(Land::Whole),
            _ => Land::Whole,
        }
    }

    fn label(&self) -> String {
        match self {
            Plan::Durable => "durable".into(),
            Plan::Volatile => "volatile".into(),
            Plan::Cut(ino, op, n) => format!("inode {ino} change {op} cut at {n}"),
            Plan::Dirs(mask) => format!("directory changes {mask:#b}"),
            Plan::Mixed(seed, ..) => format!("sample {seed:#x}"),
        }
    }

    /// A random mix: whole changes dropped, writes cut, sectors kept, lost, zeroed or
    /// garbled, directory changes kept or lost.
    fn mixed(fs: &Fs, seed: u64) -> Plan {
        let mut rng = Rng(seed);
        let mut lands = BTreeMap::new();
        for (&ino, inode) in &fs.inodes {
            let style = rng.below(10);
            for (i, op) in inode.pending.iter().enumerate() {
                let last = i + 1 == inode.pending.len();
                let how = match (style, op) {
                    (0..=2, _) => Land::Whole,
                    (3, _) => Land::Dropped,
                    (_, SimOp::Write(_, offset, data)) if rng.below(3) != 0 => {
                        let first = offset / SECTOR_BYTES;
                        let sectors = (offset + data.len() as u64).div_ceil(SECTOR_BYTES) - first;
                        let fate = |_| [0, 0, 0, 1, 1, 2, 3][rng.below(7) as usize];
                        let fates = (0..sectors).map(fate).collect();
                        Land::Sectors(fates, rng.next())
                    }
                    (_, SimOp::Write(.., data)) if last => {
                        Land::Cut(rng.below(data.len() as u64 + 1) as usize)
                    }
                    _ if rng.below(4) == 0 => Land::Dropped,
                    _ => Land::Whole,
                };
                lands.insert((ino, i), how);
            }
        }
        let dirs = fs.dir_pending.iter().map(|_| rng.below(2) == 0).collect();
        Plan::Mixed(seed, dirs, lands)
    }
}

/// Cut points of the inode's last pending write that changes bytes: (change, bytes kept).
/// A cut that leaves the same bytes as the one before it is skipped.
fn cuts(inode: &Inode) -> impl Iterator<Item = (usize, usize)> + use<> {
    let mut buf = inode.durable.clone();
    let mut last = None;
    for (i, op) in inode.pending.iter().enumerate() {
        let before = buf.clone();
        land(&mut buf, op, &Land::Whole, true);
        if let SimOp::Write(_, offset, data) = op
            && buf != before
        {
            last = Some((i, *offset as usize, data.clone(), before));
        }
    }
    let (i, offset, data, before) = last.unwrap_or_default();
    let len = data.len();
    let keep = move |&n: &usize| {
        let differs = n == 0 || before.get(offset + n - 1) != Some(&data[n - 1]);
        let boundary = (offset + n) % SECTOR_BYTES as usize == 0;
        differs && (len < CUT_EVERY_BYTE_BELOW || boundary || n == 0)
    };
    (0..len).filter(keep).map(move |n| (i, n))
}

/// The disk images of one crash point, built as they are taken (see
/// [`SimStorage::crash_images`]); `nth` skips without building.
pub struct CrashImages {
    sim: SimStorage,
    fs: Fs,
    powersafe: bool,
    plans: std::vec::IntoIter<Plan>,
}

impl Iterator for CrashImages {
    type Item = SimImage;
    fn next(&mut self) -> Option<SimImage> {
        self.nth(0)
    }
    fn nth(&mut self, n: usize) -> Option<SimImage> {
        let plan = self.plans.nth(n)?;
        self.sim.0.lock().images += 1;
        Some(self.fs.image(&plan, self.powersafe))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.plans.size_hint()
    }
}

impl ExactSizeIterator for CrashImages {}

#[derive(Default)]
struct State {
    fs: Fs,
    ops: u64,
    fail: Option<(u64, bool)>,
    crash_at: Option<u64>,
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
        let mut fs = Fs::default();
        fs.dirs.insert(PathBuf::from("/"));
        fs.dirs.extend(image.dirs.iter().cloned());
        for (ino, (path, bytes)) in (0..).zip(&image.files) {
            let (volatile, durable) = (bytes.clone(), bytes.clone());
            fs.inodes.insert(
                ino,
                Inode {
                    volatile,
                    durable,
                    pending: Vec::new(),
                },
            );
            fs.entries.insert(path.clone(), ino);
            fs.next_ino = ino + 1;
        }
        fs.durable_entries = fs.entries.clone();
        Self::with(fs)
    }

    /// An independent copy of this disk, volatile and durable state alike: what a
    /// process kill leaves to the next process (the page cache survives; the disk still
    /// holds only what was synced). Counters, faults and locks start afresh.
    pub fn fork(&self) -> SimStorage {
        Self::with(self.0.lock().fs.clone())
    }

    /// Operations started so far (failed ones included).
    pub fn ops(&self) -> u64 {
        self.0.lock().ops
    }

    /// Makes operation `n` fail without effect, and every later one too if `persistent`.
    pub fn fail_at(&self, n: u64, persistent: bool) {
        self.0.lock().fail = Some((n, persistent));
    }

    /// Cuts the power before operation `n`: it and every later one fail without effect,
    /// so the disk stays as it was after operation `n - 1`.
    pub fn crash_after(&self, n: u64) {
        self.0.lock().crash_at = Some(n);
    }

    /// Whether a damaged sector keeps the old bytes the write did not cover ("powersafe
    /// overwrite", DESIGN.md §4; the default) or may lose them too.
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

    /// The disk images a power loss now may leave (DESIGN.md §4): the durable state; all
    /// that was written; each file's last write that changes bytes, cut at every byte
    /// (below [`CUT_EVERY_BYTE_BELOW`] bytes) or sector boundary; every subset of up to 4
    /// pending directory changes; then `limit` random combinations drawn from `seed`
    /// (changes dropped, writes cut, sectors kept, lost, zeroed or garbled, directory
    /// changes kept or lost). Only the first when nothing is pending. Deterministic.
    pub fn crash_images(&self, seed: u64, limit: usize) -> CrashImages {
        let st = self.0.lock();
        let fs = st.fs.clone();
        let mut plans = vec![Plan::Durable, Plan::Volatile];
        for (&ino, inode) in &fs.inodes {
            plans.extend(cuts(inode).map(|(op, n)| Plan::Cut(ino, op, n)));
        }
        let d = fs.dir_pending.len() as u32;
        if d <= 4 {
            plans.extend((1..(1u32 << d).saturating_sub(1)).map(Plan::Dirs));
        }
        let mix = |i: u64| Plan::mixed(&fs, seed ^ i.wrapping_mul(0xA24B_AED4_963E_E407));
        plans.extend((0..limit as u64).map(mix));
        if d == 0 && fs.inodes.values().all(|i| i.pending.is_empty()) {
            plans.truncate(1);
        }
        let (sim, powersafe, plans) = (self.clone(), !st.unsafe_overwrite, plans.into_iter());
        CrashImages {
            sim,
            fs,
            powersafe,
            plans,
        }
    }

    /// Runs one operation: `effect` checks it and returns its result and the change it
    /// makes, if any.
    fn run<T>(
        &self,
        what: &str,
        effect: impl FnOnce(&mut State) -> io::Result<(T, Option<SimOp>)>,
    ) -> io::Result<T> {
        let mut st: MutexGuard<'_, State> = self.0.lock();
        let n = st.ops;
        st.ops += 1;
        let crashed = st.crash_at.is_some_and(|c| n >= c);
        let failed = st.fail.is_some_and(|(f, always)| n == f || always && n > f);
        let result = match crashed || failed {
            false => effect(&mut st),
            true if crashed => Err(io::Error::other(format!("simulated power loss at {n}"))),
            true => Err(io::Error::other(format!(
                "simulated I/O error at operation {n}"
            ))),
        };
        let op = match &result {
            Ok((_, Some(op))) => op.clone(),
            Ok((_, None)) => SimOp::NoEffect(what.to_string()),
            Err(_) if crashed || failed => SimOp::NoEffect(format!("{what} (failed)")),
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

struct SimFile {
    sim: SimStorage,
    ino: u64,
    writable: bool,
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
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    /// A disk with a durable, empty `/d/a`, open as the returned handle.
    fn disk() -> (SimStorage, Box<dyn StorageFile>) {
        let sim = SimStorage::new();
        sim.create_dir_all(&p("/d")).unwrap();
        let f = sim.create(&p("/d/a")).unwrap();
        sim.sync_dir(&p("/d")).unwrap();
        (sim, f)
    }

    fn a_of(images: impl Iterator<Item = SimImage>) -> Vec<Vec<u8>> {
        images.map(|i| i.files[&p("/d/a")].clone()).collect()
    }

    #[test]
    fn unsynced_writes_are_volatile_and_the_last_is_cut_at_every_byte() {
        let (sim, f) = disk();
        f.write_all_at(b"hello", 0).unwrap();
        f.sync_data().unwrap();
        f.write_all_at(b" world", 5).unwrap();
        assert_eq!(f.read_all().unwrap(), b"hello world");
        let cut = |n: usize| b"hello world"[..5 + n].to_vec();
        let expected: Vec<_> = [0, 6].into_iter().chain(0..6).map(cut).collect();
        assert_eq!(a_of(sim.crash_images(1, 0)), expected);
        assert_eq!(sim.images_generated(), 8);
        f.sync_data().unwrap();
        assert_eq!(a_of(sim.crash_images(1, 50)), [b"hello world"]);
    }

    #[test]
    fn large_writes_are_cut_at_sectors_and_sampled_deterministically() {
        let (sim, f) = disk();
        f.sync_data().unwrap();
        f.write_all_at(&[7u8; 3000], 100).unwrap();
        let lens: Vec<_> = a_of(sim.crash_images(1, 0)).iter().map(Vec::len).collect();
        assert_eq!(lens, [0, 3100, 100, 512, 1024, 1536, 2048, 2560, 3072]);
        let a = a_of(sim.crash_images(9, 60));
        assert_eq!(a, a_of(sim.crash_images(9, 60)));
        assert!(a.iter().collect::<BTreeSet<_>>().len() > 20);
        assert!(a.iter().any(|b| b.len() == 3100 && b[100..].contains(&0)));
        // Powersafe overwrite: damage stays within the bytes written.
        assert!(a.iter().all(|b| b.iter().take(100).all(|&b| b == 0)));
        sim.set_powersafe_overwrite(false);
        let b = a_of(sim.crash_images(9, 60));
        assert!(b.iter().any(|b| b.iter().take(100).any(|&b| b != 0)));
    }

    #[test]
    fn directory_changes_need_sync_dir() {
        let (sim, _) = disk();
        sim.create(&p("/d/x.tmp")).unwrap().sync_data().unwrap();
        sim.rename(&p("/d/x.tmp"), &p("/d/x")).unwrap();
        sim.remove(&p("/d/a")).unwrap();
        let names = |sim: &SimStorage| -> BTreeSet<Vec<PathBuf>> {
            let images = sim.crash_images(3, 20);
            images.map(|i| i.files.into_keys().collect()).collect()
        };
        let got = names(&sim);
        for want in [
            &["/d/a"][..],
            &["/d/x"],
            &["/d/a", "/d/x.tmp"],
            &["/d/a", "/d/x"],
        ] {
            let want: Vec<_> = want.iter().map(|s| p(s)).collect();
            assert!(got.contains(&want), "{want:?} in {got:?}");
        }
        assert!(
            !got.iter()
                .any(|n| n.contains(&p("/d/x.tmp")) && n.contains(&p("/d/x")))
        );
        sim.sync_dir(&p("/d")).unwrap();
        assert_eq!(names(&sim), BTreeSet::from([vec![p("/d/x")]]));
        assert_eq!(sim.list(&p("/d")).unwrap(), ["x"]);
    }

    #[test]
    fn injected_failures_and_crashes_have_no_effect() {
        let (sim, f) = disk();
        f.write_all_at(b"ab", 0).unwrap();
        let n = sim.ops();
        sim.fail_at(n, false);
        assert!(f.sync_data().is_err());
        assert_eq!(sim.durable_image().files[&p("/d/a")], b"", "failed fsync");
        f.sync_data().unwrap();
        sim.fail_at(n + 3, true);
        f.write_all_at(b"c", 2).unwrap();
        assert!(f.write_all_at(b"d", 3).is_err() && f.read_all().is_err());
        sim.fail_at(u64::MAX, false);
        assert_eq!(f.read_all().unwrap(), b"abc");
        sim.crash_after(sim.ops() + 1);
        f.write_all_at(b"e", 3).unwrap();
        assert!(f.sync_data().is_err() && sim.list(&p("/d")).is_err());
        assert_eq!(sim.volatile_image().files[&p("/d/a")], b"abce");
        assert_eq!(sim.durable_image().files[&p("/d/a")], b"ab");
    }

    #[test]
    fn recording_replay_images_and_locks() {
        let (sim, _) = disk();
        let start = sim.volatile_image();
        sim.record();
        let f = sim.create(&p("/d/b")).unwrap();
        f.allocate(0, 8).unwrap();
        f.write_all_at(b"xy", 2).unwrap();
        assert_eq!(f.read_all().unwrap(), b"\0\0xy\0\0\0\0");
        let ops = sim.take_recording();
        assert_eq!((ops.len(), ops[3].mutates()), (4, false));
        let copy = SimStorage::from_image(&start);
        ops.iter().for_each(|op| copy.apply(op));
        assert_eq!(copy.volatile_image(), sim.volatile_image());
        let booted = SimStorage::from_image(&sim.volatile_image());
        assert_eq!(booted.durable_image().files, sim.volatile_image().files);
        assert!(booted.is_dir(&p("/d")) && booted.open(&p("/d/none"), false).is_err());
        let lock = booted.try_lock(&p("/d/LOCK")).unwrap();
        assert!(lock.is_some() && booted.try_lock(&p("/d/LOCK")).unwrap().is_none());
        drop(lock);
        assert!(booted.try_lock(&p("/d/LOCK")).unwrap().is_some());
    }
}
