//! `fsync-floor-group`: the floor's file format with leader/follower group commit, the
//! physical limit of this disk for this workload.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use parking_lot::{Condvar, Mutex};
use plotters::style::RGBColor;

use super::Backend;
use super::fsync_floor::{self, frame};
use crate::config::Config;
use crate::harness::drive;
use crate::measurement::Measurement;

pub struct FsyncFloorGroup;

pub const FSYNC_FLOOR_GROUP: FsyncFloorGroup = FsyncFloorGroup;

impl Backend for FsyncFloorGroup {
    fn name(&self) -> &'static str {
        "fsync-floor-group"
    }

    fn color(&self) -> RGBColor {
        RGBColor(0x55, 0x55, 0x55)
    }

    fn run(&self, cfg: &Config, dir: &Path, threads: usize) -> Measurement {
        fsync_floor::run(cfg, dir, threads, |file| {
            let g = GroupFile {
                file,
                state: Mutex::new(GroupState::default()),
                durable: Condvar::new(),
            };
            drive(
                threads,
                cfg.steps,
                |_| (),
                |_, _, _, delta| g.commit(&frame(delta)),
            )
        })
    }
}

/// Leader/follower group commit over a plain file.
struct GroupFile {
    file: File,
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
            drop(state);
            (&self.file).write_all(&batch).expect("write");
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
