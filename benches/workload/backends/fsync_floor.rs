//! `fsync-floor`: a plain file, `write` + `sync_data` of each step's frame behind a mutex.
//! Also the frame format and the run that `fsync-floor-group` shares.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use agentwal::AgentDelta;
use parking_lot::Mutex;
use plotters::style::RGBColor;

use super::Backend;
use crate::config::Config;
use crate::generator::delta_payload;
use crate::harness::{RunTimes, drive};
use crate::measurement::{Measurement, median_duration};
use crate::metering::{io_counters, io_since};

pub struct FsyncFloor;

pub const FSYNC_FLOOR: FsyncFloor = FsyncFloor;

impl Backend for FsyncFloor {
    fn name(&self) -> &'static str {
        "fsync-floor"
    }

    fn color(&self) -> RGBColor {
        RGBColor(0x99, 0x99, 0x99)
    }

    fn run(&self, cfg: &Config, dir: &Path, threads: usize) -> Measurement {
        run(cfg, dir, threads, |file| {
            let file = Mutex::new(file);
            drive(
                threads,
                cfg.steps,
                |_| (),
                |_, _, _, delta| {
                    let frame = frame(delta);
                    let mut f = file.lock();
                    f.write_all(&frame).expect("write");
                    f.sync_data().expect("sync_data");
                },
            )
        })
    }
}

/// Frames of the floor files: payload length (u32 LE), crc32 of the payload, payload.
pub fn frame(delta: &AgentDelta) -> Vec<u8> {
    let payload = postcard::to_allocvec(delta).expect("encode delta");
    let mut frame = Vec::with_capacity(8 + payload.len());
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    frame.extend_from_slice(&payload);
    frame
}

/// Reads a floor file and checks every frame; returns the frame count.
fn recover(path: &Path) -> u64 {
    let bytes = std::fs::read(path).expect("read the floor file");
    let (mut at, mut frames) = (0, 0);
    while at + 8 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        // A zero length is the zero-filled space past the data of a preallocated file
        // (`fsync-floor-group-prealloc`): no frame is empty.
        if len == 0 {
            break;
        }
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
        let Some(payload) = bytes.get(at + 8..at + 8 + len) else {
            break;
        };
        assert_eq!(crc32fast::hash(payload), crc, "floor file corrupt");
        frames += 1;
        at += 8 + len;
    }
    frames
}

/// Creates the floor file (opened to append), lets `commit_all` run the workload on it,
/// measures the run and times recovery (read the file, check every crc).
pub fn run(
    cfg: &Config,
    dir: &Path,
    threads: usize,
    commit_all: impl FnOnce(File) -> RunTimes,
) -> Measurement {
    run_with(
        cfg,
        dir,
        threads,
        |path, _| {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .expect("create the floor file")
        },
        commit_all,
    )
}

/// [`run`] with the floor file made by `create(path, frame_bytes)`, where `frame_bytes` is
/// what the run's frames will take; what `create` writes is not counted in the run's I/O.
pub fn run_with(
    cfg: &Config,
    dir: &Path,
    threads: usize,
    create: impl FnOnce(&Path, u64) -> File,
    commit_all: impl FnOnce(File) -> RunTimes,
) -> Measurement {
    let payload = delta_payload(threads, cfg.steps);
    let path = dir.join("floor.log");
    let frame_bytes = payload.0 + 8 * (threads * cfg.steps) as u64;
    let file = create(&path, frame_bytes);
    let io = io_counters();
    let times = commit_all(file);
    let mut m = Measurement::from_run(&times, io_since(io), dir, payload);
    let mut recovery = Vec::new();
    for _ in 0..cfg.cold_loads {
        let t0 = Instant::now();
        let frames = recover(&path);
        recovery.push(t0.elapsed());
        assert_eq!(frames as f64, m.commits, "floor file lost frames");
    }
    m.recovery_ms = Some(median_duration(&mut recovery).as_secs_f64() * 1e3);
    m
}
