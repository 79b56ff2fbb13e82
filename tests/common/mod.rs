//! Helpers shared by the integration tests, each written once. A test file takes them
//! with `mod common;`; every test binary compiles this whole module, so items one binary
//! leaves unused are not dead code overall.
#![allow(dead_code)]

pub mod env;
pub mod hooks;
#[cfg(feature = "postgres")]
pub mod pg;
pub mod rng;
pub mod segments;
pub mod sim_workload;
pub mod states;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// The message of a caught panic, for a failure report.
pub fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

/// The process's anonymous resident memory (0 where `/proc` does not tell): heap growth
/// shows here, file pages the store maps do not.
pub fn rss_anon_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The segment file of the highest id in store directory `dir`.
pub fn newest_segment(dir: &Path) -> PathBuf {
    segments::segment_files(dir)
        .pop()
        .expect("a segment file")
        .1
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Held by each test of a binary whose tests must not overlap (the caller says why). A
/// test that failed holding it poisons it; the next one runs anyway.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
