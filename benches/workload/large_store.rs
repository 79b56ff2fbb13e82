//! Recovery of a large agentwal store (~1 GiB, quick mode ~32 MiB) against reading and
//! checksumming its files, with the page cache warm and then with the store's files
//! dropped from it (`posix_fadvise(POSIX_FADV_DONTNEED)` on each file: only this store's
//! pages leave the cache, not the machine's). `AGENTWAL_BENCH_LARGE_COMPRESSION=none`
//! builds the store with `Compression::None` instead of the default.

use std::fs::File;
use std::hint::black_box;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::os::fd::AsRawFd;

use agentwal::{Compression, Options, Store, SyncMode};

use crate::config::Config;
use crate::generator::{make_delta, task_id};
use crate::measurement::median_duration;

pub struct LargeStore {
    pub file_bytes: u64,
    pub record_bytes: u64,
    pub records: u64,
    pub segments: u64,
    pub tasks: usize,
    pub read_crc: Duration,
    pub reopen: Duration,
    /// The same two with the store's files dropped from the page cache first.
    pub read_crc_cold: Duration,
    pub reopen_cold: Duration,
    /// How the store was built: "default" or "none" (`Compression::None`).
    pub compression: &'static str,
}

/// `AGENTWAL_BENCH_LARGE_COMPRESSION`: the default (unset, "" or "default") or "none".
fn compression_from_env() -> (&'static str, Compression) {
    match std::env::var("AGENTWAL_BENCH_LARGE_COMPRESSION").as_deref() {
        Err(_) | Ok("") | Ok("default") => ("default", Options::default().compression),
        Ok("none") => ("none", Compression::None),
        Ok(other) => panic!("AGENTWAL_BENCH_LARGE_COMPRESSION={other:?}: default or none"),
    }
}

/// Writes back and then drops every file of `dir` from the page cache.
fn drop_from_page_cache(dir: &Path) {
    for e in std::fs::read_dir(dir).expect("list the store") {
        let path = e.expect("list the store").path();
        if !path.is_file() {
            continue;
        }
        let f = File::open(&path).expect("open a store file");
        f.sync_all().expect("sync a store file");
        // SAFETY: a plain syscall on an open descriptor.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0, "posix_fadvise(DONTNEED) on {}", path.display());
    }
}

/// Builds an agentwal store of about `target` bytes from the workload's steps (many tasks,
/// round-robin), then times a warm-cache reopen against reading and checksumming its files.
pub fn large_store(cfg: &Config) -> LargeStore {
    let dir = cfg.tmpdir("bench-workload-large-");
    let (compression_name, compression) = compression_from_env();
    build(cfg, dir.path(), compression);
    let files: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .expect("list the store")
        .map(|e| e.expect("list the store").path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    let (_, file_bytes) = read_crc(&files); // warms the page cache
    let (mut reads, mut reopens) = (Vec::new(), Vec::new());
    let mut report = None;
    for _ in 0..3 {
        reads.push(read_crc(&files).0);
        let t0 = Instant::now();
        let store: Store = Store::open_with(dir.path(), Options::default()).expect("reopen");
        reopens.push(t0.elapsed());
        report = Some(store.recovery_report());
    }
    let (mut cold_reads, mut cold_reopens) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        drop_from_page_cache(dir.path());
        cold_reads.push(read_crc(&files).0);
        drop_from_page_cache(dir.path());
        let t0 = Instant::now();
        let store: Store = Store::open_with(dir.path(), Options::default()).expect("reopen");
        cold_reopens.push(t0.elapsed());
        drop(store);
    }
    let report = report.expect("reopened");
    LargeStore {
        file_bytes,
        record_bytes: report.bytes,
        records: report.records,
        segments: report.segments,
        tasks: report.tasks as usize,
        read_crc: median_duration(&mut reads),
        reopen: median_duration(&mut reopens),
        read_crc_cold: median_duration(&mut cold_reads),
        reopen_cold: median_duration(&mut cold_reopens),
        compression: compression_name,
    }
}

/// Fills `dir` with the workload's steps until the log holds `cfg.large_store_bytes`.
fn build(cfg: &Config, dir: &Path, compression: Compression) {
    let tasks = if cfg.quick { 64 } else { 1024 };
    let builder = 2;
    let options = Options {
        sync: SyncMode::Never,
        compression,
        ..Options::default()
    };
    let store: Store = Store::open_with(dir, options).expect("open the large store");
    let written = AtomicU64::new(0);
    std::thread::scope(|s| {
        for b in 0..builder {
            let (store, written) = (&store, &written);
            s.spawn(move || {
                for step in 0.. {
                    for task in (b..tasks).step_by(builder) {
                        store
                            .commit(&task_id(task), &make_delta(task, step))
                            .expect("commit");
                    }
                    let bytes = store.stats().bytes_written;
                    written.fetch_max(bytes, Ordering::Relaxed);
                    if written.load(Ordering::Relaxed) >= cfg.large_store_bytes {
                        break;
                    }
                }
            });
        }
    });
    store.flush().expect("flush");
}

/// Reads and crc32s every file: (the time it took, the bytes read).
fn read_crc(files: &[PathBuf]) -> (Duration, u64) {
    let t0 = Instant::now();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    for path in files {
        let mut f = File::open(path).expect("open a segment");
        let mut hasher = crc32fast::Hasher::new();
        loop {
            let n = f.read(&mut buf).expect("read a segment");
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            total += n as u64;
        }
        black_box(hasher.finalize());
    }
    (t0.elapsed(), total)
}
