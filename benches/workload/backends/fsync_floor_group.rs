//! `fsync-floor-group`: the floor's file format with leader/follower group commit, the
//! physical limit of this disk for this workload. `fsync-floor-group-prealloc`: the same,
//! written with `pwrite` into a file zero-filled (and synced) before the run, so that no
//! fdatasync of the run has a file size or an extent to persist.
//! `fsync-floor-group-fallocated`: the same into a file reserved with `fallocate`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use parking_lot::{Condvar, Mutex};
use plotters::style::RGBColor;

use super::Backend;
use super::fsync_floor::{self, frame};
use crate::config::Config;
use crate::harness::drive;
use crate::measurement::Measurement;

/// One group-committed floor: its name and colour, and the file it writes into.
pub struct FsyncFloorGroup {
    name: &'static str,
    color: RGBColor,
    file: FloorFile,
}

/// How a group floor's file is made before the run.
#[derive(Clone, Copy)]
enum FloorFile {
    /// Opened for appending: every batch grows the file.
    Growing,
    /// Written with zeros and synced, then written with `pwrite` from offset 0.
    ZeroFilled,
    /// Reserved with `fallocate` (unwritten extents, as agentwal's segments are when it
    /// does not zero ahead) and synced, then written with `pwrite`: the size never
    /// changes, but each first write into an extent is a metadata change that the next
    /// fdatasync persists.
    Fallocated,
}

pub const FSYNC_FLOOR_GROUP: FsyncFloorGroup = FsyncFloorGroup {
    name: "fsync-floor-group",
    color: RGBColor(0x55, 0x55, 0x55),
    file: FloorFile::Growing,
};

pub const FSYNC_FLOOR_GROUP_PREALLOC: FsyncFloorGroup = FsyncFloorGroup {
    name: "fsync-floor-group-prealloc",
    color: RGBColor(0x33, 0x33, 0x33),
    file: FloorFile::ZeroFilled,
};

pub const FSYNC_FLOOR_GROUP_FALLOCATED: FsyncFloorGroup = FsyncFloorGroup {
    name: "fsync-floor-group-fallocated",
    color: RGBColor(0x77, 0x77, 0x77),
    file: FloorFile::Fallocated,
};

/// The preallocated floors' files are made in chunks of this size, as agentwal preallocates
/// its segments (`PREALLOCATE_BYTES`), all of them before the run.
const ZERO_FILL_CHUNK_BYTES: u64 = 4 << 20;

impl Backend for FsyncFloorGroup {
    fn name(&self) -> &'static str {
        self.name
    }

    fn color(&self) -> RGBColor {
        self.color
    }

    fn run(&self, cfg: &Config, dir: &Path, threads: usize) -> Measurement {
        let commit_all = |file| group_commit_all(cfg, threads, file, true);
        match self.file {
            FloorFile::Growing => fsync_floor::run(cfg, dir, threads, |file| {
                group_commit_all(cfg, threads, file, false)
            }),
            FloorFile::ZeroFilled => fsync_floor::run_with(
                cfg,
                dir,
                threads,
                |path, bytes| preallocated(path, bytes, true),
                commit_all,
            ),
            FloorFile::Fallocated => fsync_floor::run_with(
                cfg,
                dir,
                threads,
                |path, bytes| preallocated(path, bytes, false),
                commit_all,
            ),
        }
    }
}

/// A file of `frame_bytes` rounded up to whole chunks, written with zeros (`zeros`) or
/// reserved with `fallocate`, and synced with its size and metadata (`sync_all`).
fn preallocated(path: &Path, frame_bytes: u64, zeros: bool) -> File {
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(path)
        .expect("create the floor file");
    let chunk = vec![0u8; ZERO_FILL_CHUNK_BYTES as usize];
    for i in 0..frame_bytes.div_ceil(ZERO_FILL_CHUNK_BYTES).max(1) {
        if zeros {
            file.write_all(&chunk).expect("zero-fill the floor file");
        } else {
            let at = (i * ZERO_FILL_CHUNK_BYTES) as libc::off_t;
            // SAFETY: a plain syscall on an open descriptor.
            let rc = unsafe {
                libc::fallocate(
                    file.as_raw_fd(),
                    0,
                    at,
                    ZERO_FILL_CHUNK_BYTES as libc::off_t,
                )
            };
            assert_eq!(rc, 0, "fallocate the floor file");
        }
    }
    file.sync_all().expect("sync the preallocated floor file");
    file
}

/// Runs the workload through one [`GroupFile`]: appending, or `pwrite` from offset 0.
fn group_commit_all(
    cfg: &Config,
    threads: usize,
    file: File,
    positioned: bool,
) -> crate::harness::RunTimes {
    let g = GroupFile {
        file,
        positioned,
        state: Mutex::new(GroupState::default()),
        durable: Condvar::new(),
    };
    drive(
        threads,
        cfg.steps,
        |_| (),
        |_, _, _, delta| g.commit(&frame(delta)),
    )
}

/// Leader/follower group commit over a plain file.
struct GroupFile {
    file: File,
    /// `pwrite` at `GroupState::write_pos` (a preallocated file) instead of appending.
    positioned: bool,
    state: Mutex<GroupState>,
    durable: Condvar,
}

#[derive(Default)]
struct GroupState {
    buf: Vec<u8>,
    /// Number of the next frame queued.
    next: u64,
    /// Frames below this number are durable.
    durable: u64,
    leader: bool,
    /// Where the next batch goes when `positioned`.
    write_pos: u64,
}

impl GroupFile {
    fn commit(&self, frame: &[u8]) {
        let mut state = self.state.lock();
        state.buf.extend_from_slice(frame);
        let mine = state.next;
        state.next += 1;
        while state.durable <= mine {
            if state.leader {
                self.durable.wait(&mut state);
                continue;
            }
            state.leader = true;
            let batch = std::mem::take(&mut state.buf);
            let end = state.next;
            let at = state.write_pos;
            state.write_pos += batch.len() as u64;
            drop(state);
            if self.positioned {
                self.file.write_all_at(&batch, at).expect("pwrite");
            } else {
                (&self.file).write_all(&batch).expect("write");
            }
            self.file.sync_data().expect("sync_data");
            state = self.state.lock();
            state.durable = end;
            state.leader = false;
            if state.buf.capacity() == 0 {
                state.buf = batch;
                state.buf.clear();
            }
            self.durable.notify_all();
        }
    }
}
