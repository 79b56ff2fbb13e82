//! Crash images: the plans that say which pending changes a power loss keeps (durable
//! only, everything, one write cut short, a subset of directory changes, a seeded random
//! mix), and the iterator that builds the images of one crash point from them.

use std::collections::BTreeMap;

use super::fs::{Fs, Inode};
use super::land::{Land, land};
use super::rng::Rng;
use super::{CUT_EVERY_BYTE_BELOW, SECTOR_BYTES, SimImage, SimOp, SimStorage};

/// Which crash image to build.
pub(super) enum Plan {
    /// Only what completed syncs made durable.
    Durable,
    /// Everything written.
    Volatile,
    /// Everything, but this change of this inode cut after this many bytes.
    Cut(u64, usize, usize),
    /// Everything, but of the pending directory changes only those in this mask.
    Dirs(u32),
    /// A random mix drawn from a seed: directory changes kept, and file changes.
    Mixed(u64, Vec<bool>, BTreeMap<(u64, usize), Land>),
}

impl Plan {
    /// Every plan of [`SimStorage::crash_images`], in its order.
    fn all(fs: &Fs, seed: u64, limit: usize) -> Vec<Plan> {
        let mut plans = vec![Plan::Durable, Plan::Volatile];
        for (&ino, inode) in &fs.inodes {
            plans.extend(cuts(inode).map(|(op, n)| Plan::Cut(ino, op, n)));
        }
        let d = fs.dir_pending.len() as u32;
        if d <= 4 {
            plans.extend((1..(1u32 << d).saturating_sub(1)).map(Plan::Dirs));
        }
        let mix = |i: u64| Plan::mixed(fs, seed ^ i.wrapping_mul(0xA24B_AED4_963E_E407));
        plans.extend((0..limit as u64).map(mix));
        if d == 0 && fs.inodes.values().all(|i| i.pending.is_empty()) {
            plans.truncate(1);
        }
        plans
    }

    /// Whether the image keeps the `i`th pending directory change.
    pub(super) fn keeps_dir_change(&self, i: usize) -> bool {
        match self {
            Plan::Durable => false,
            Plan::Dirs(mask) => mask >> i & 1 == 1,
            Plan::Mixed(_, dirs, _) => dirs[i],
            _ => true,
        }
    }

    /// How the `i`th pending change of inode `ino` lands in the image.
    pub(super) fn land(&self, ino: u64, i: usize) -> Land {
        match self {
            Plan::Durable => Land::Dropped,
            Plan::Cut(at, op, n) if (*at, *op) == (ino, i) => Land::Cut(*n),
            Plan::Mixed(_, _, lands) => lands.get(&(ino, i)).cloned().unwrap_or(Land::Whole),
            _ => Land::Whole,
        }
    }

    /// How the image was made, for failure messages.
    pub(super) fn label(&self) -> String {
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

impl CrashImages {
    /// The images of `fs` as it stands, counted on `sim` as they are built.
    pub(super) fn new(sim: SimStorage, fs: Fs, powersafe: bool, seed: u64, limit: usize) -> Self {
        let plans = Plan::all(&fs, seed, limit).into_iter();
        CrashImages {
            sim,
            fs,
            powersafe,
            plans,
        }
    }
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
