//! The simulated disk's file system state: inodes with their volatile and durable bytes,
//! directory entries with their durable copy, and how a recorded operation changes them.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use super::image::Plan;
use super::land::{Land, land};
use super::{SimImage, SimOp};

/// One file's bytes as reads see them, as a power loss keeps them, and what lies between.
#[derive(Debug, Clone, Default)]
pub(super) struct Inode {
    /// What reads see.
    pub(super) volatile: Vec<u8>,
    /// As of the last completed `sync_data`.
    pub(super) durable: Vec<u8>,
    /// `Create` (truncation), `Write` and `Allocate` since the last `sync_data`.
    pub(super) pending: Vec<SimOp>,
}

/// An entry change not yet durable: `from` unlinked (if it still names `ino`), `to` linked.
/// An exchange (`swapped`: the inode `to` named) swaps the two names' inodes, if they
/// still name `ino` and `swapped`, as one change.
#[derive(Debug, Clone)]
pub(super) struct DirOp {
    from: Option<PathBuf>,
    to: Option<PathBuf>,
    ino: u64,
    swapped: Option<u64>,
}

/// The whole file system: what reads see, and what a crash may keep of it.
#[derive(Debug, Clone, Default)]
pub(super) struct Fs {
    /// Every file ever created, by inode number (unlinked ones stay: handles outlive names).
    pub(super) inodes: BTreeMap<u64, Inode>,
    /// Directory entries as reads see them.
    pub(super) entries: BTreeMap<PathBuf, u64>,
    /// Directory entries as of each directory's last `sync_dir`.
    durable_entries: BTreeMap<PathBuf, u64>,
    /// Entry changes since their directory's last `sync_dir`, in order.
    pub(super) dir_pending: Vec<DirOp>,
    /// Directories (durable once created).
    pub(super) dirs: BTreeSet<PathBuf>,
    /// The inode number the next new file gets.
    pub(super) next_ino: u64,
}

/// Applies a kept exchange to `entries`: `a` and `b` swap inodes if they still name
/// `inos` (an earlier change the crash lost may have moved either).
fn swap(
    entries: &mut BTreeMap<PathBuf, u64>,
    a: &Path,
    b: Option<&Path>,
    inos: (u64, Option<u64>),
) {
    let Some(b) = b else { return };
    if entries.get(a) == Some(&inos.0) && entries.get(b) == inos.1.as_ref() {
        entries.insert(a.to_path_buf(), inos.1.unwrap_or(inos.0));
        entries.insert(b.to_path_buf(), inos.0);
    }
}

/// The directory holding `p` (`""` for a bare name).
pub(super) fn parent(p: &Path) -> &Path {
    p.parent().unwrap_or(Path::new(""))
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, path.display().to_string())
}

impl Fs {
    /// A file system holding `image`, all of it durable, with `/` always present.
    pub(super) fn from_image(image: &SimImage) -> Fs {
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
        fs
    }

    /// The inode `path` names, or `NotFound`.
    pub(super) fn entry(&self, path: &Path) -> io::Result<u64> {
        self.entries
            .get(path)
            .copied()
            .ok_or_else(|| not_found(path))
    }

    /// `Ok` if `dir` is a directory, else `NotFound`.
    pub(super) fn dir(&self, dir: &Path) -> io::Result<()> {
        self.dirs.get(dir).map(drop).ok_or_else(|| not_found(dir))
    }

    /// Makes `op`'s change, keeping what a crash could still lose of it as pending.
    pub(super) fn apply(&mut self, op: &SimOp) {
        let link = |from: Option<&PathBuf>, to: Option<&PathBuf>, ino| {
            let (from, to) = (from.cloned(), to.cloned());
            Some(DirOp {
                from,
                to,
                ino,
                swapped: None,
            })
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
            SimOp::Exchange(a, b) => {
                let ino_a = self.entry(a).expect("exchanged file exists");
                let ino_b = self.entry(b).expect("exchanged file exists");
                self.entries.insert(a.clone(), ino_b);
                self.entries.insert(b.clone(), ino_a);
                Some(DirOp {
                    from: Some(a.clone()),
                    to: Some(b.clone()),
                    ino: ino_a,
                    swapped: Some(ino_b),
                })
            }
            SimOp::SyncDir(dir) => {
                self.sync_dir(dir);
                None
            }
            SimOp::NoEffect(_) => None,
        };
        self.dir_pending.extend(dir_op);
    }

    /// Makes `dir`'s entries durable as they now are.
    fn sync_dir(&mut self, dir: &Path) {
        self.durable_entries.retain(|p, _| parent(p) != dir);
        let synced = self.entries.iter().filter(|(p, _)| parent(p) == dir);
        self.durable_entries
            .extend(synced.map(|(p, i)| (p.clone(), *i)));
        let of = |op: &DirOp| op.to.clone().or(op.from.clone()).unwrap_or_default();
        self.dir_pending.retain(|op| parent(&of(op)) != dir);
    }

    /// The image `plan` describes.
    pub(super) fn image(&self, plan: &Plan, powersafe: bool) -> SimImage {
        let mut entries = self.durable_entries.clone();
        for (i, op) in self.dir_pending.iter().enumerate() {
            match &op.from {
                _ if !plan.keeps_dir_change(i) => continue,
                Some(a) if op.swapped.is_some() => {
                    swap(&mut entries, a, op.to.as_deref(), (op.ino, op.swapped));
                    continue;
                }
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
