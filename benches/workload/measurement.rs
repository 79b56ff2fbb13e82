//! One backend's figures at one T, and their median over rounds.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::harness::RunTimes;
use crate::metering::dir_usage;

/// One backend's figures at one T (or the median over rounds). Serialized: a fresh-process
/// child hands its run to the parent as JSON, and `workload.json` keeps every round; a
/// field missing from an older file reads as its default.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Measurement {
    pub commits: f64,
    pub commits_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub disk_bytes: f64,
    pub disk_allocated: f64,
    /// Bytes handed to write syscalls during the run (and the close).
    pub wchar: f64,
    /// Bytes sent to the block layer during the run (and the close).
    pub device_bytes: f64,
    pub delta_postcard: f64,
    pub delta_json: f64,
    pub load_warm_us: Option<f64>,
    pub load_cold_us: Option<f64>,
    pub recovery_ms: Option<f64>,
    /// agentwal only: bytes its log appended (records, snapshots, seals).
    pub log_bytes: Option<f64>,
    /// agentwal only: fdatasync calls and records per group-commit batch.
    pub fsyncs: Option<f64>,
    pub mean_batch: Option<f64>,
    /// agentwal only: bytes of zeros its log wrote ahead of the data during the run.
    pub zero_bytes: Option<f64>,
    /// agentwal only: bytes the process read from storage during the commits (a write
    /// into part of a page that is not in the page cache reads it first).
    pub read_bytes: Option<f64>,
    /// `agentwal-recycled` only: retired files waiting (`*.wal.free`) when the run starts,
    /// and how many bytes of its active (recycled) segment, from the header on, were
    /// written extents then (FIEMAP), i.e. had nothing to convert.
    pub free_files: Option<f64>,
    pub recycled_written_bytes: Option<f64>,
    /// A backend that prepares its directory (`Backend::prepare`): what that appended to
    /// its log, wrote to the device and took, none of it in the other figures.
    pub prep_log_bytes: Option<f64>,
    pub prep_device_bytes: Option<f64>,
    pub prep_ms: Option<f64>,
    /// SQLite only: SQLITE_BUSY errors that escaped the busy handler (retried).
    pub busy_retries: Option<f64>,
    /// PostgreSQL peers only: WAL bytes the server generated during the commits.
    pub wal_bytes: Option<f64>,
    /// PostgreSQL peers only: rows and bytes (stored values) `load_latest` of task 0 reads.
    pub load_rows: Option<f64>,
    pub load_read_bytes: Option<f64>,
    /// fdatasync p50 (µs) of the disk probe just before this run: other load on the disk.
    pub probe_us: f64,
    /// CPU time the committing threads spent inside a commit, per commit (µs).
    pub step_cpu_us: f64,
    /// Minor page faults of the process during the commits, per commit.
    pub faults_per_commit: f64,
    /// The whole machine over the same span as the page faults: the busy share of all
    /// cores (0 to 1) and the busy CPU time of all cores per commit (µs), every process
    /// and kernel thread included; `None` where /proc/stat could not be read. With them
    /// the jiffies all cores counted over the span, which say how coarse they are.
    pub machine_busy: Option<f64>,
    pub machine_cpu_us: Option<f64>,
    pub machine_ticks: Option<f64>,
    /// User + system CPU time of this whole process (every thread) over that span, per
    /// commit (µs); `None` in results written before it was measured.
    pub process_cpu_us: Option<f64>,
}

impl Measurement {
    pub fn from_run(times: &RunTimes, io: (u64, u64), dir: &Path, payload: (u64, u64)) -> Self {
        let commits = times.latencies.len() as f64;
        let (disk_bytes, disk_allocated) = dir_usage(dir);
        let machine = times.counters.machine;
        Measurement {
            commits,
            // At least a microsecond: a rate must stay finite however fast a run was.
            commits_per_s: commits / times.wall.as_secs_f64().max(1e-6),
            p50_ms: percentile(&times.latencies, 50.0) as f64 / 1e6,
            p99_ms: percentile(&times.latencies, 99.0) as f64 / 1e6,
            max_ms: times.latencies.last().copied().unwrap_or(0) as f64 / 1e6,
            disk_bytes: disk_bytes as f64,
            disk_allocated: disk_allocated as f64,
            wchar: io.0 as f64,
            device_bytes: io.1 as f64,
            delta_postcard: payload.0 as f64,
            delta_json: payload.1 as f64,
            step_cpu_us: times.step_cpu_ns as f64 / 1e3 / commits.max(1.0),
            faults_per_commit: times.counters.minor_faults as f64 / commits.max(1.0),
            machine_busy: machine.map(|b| b.fraction),
            machine_cpu_us: machine.map(|b| b.cpu_s * 1e6 / commits.max(1.0)),
            machine_ticks: machine.map(|b| b.ticks as f64),
            process_cpu_us: Some(times.counters.process_cpu_ns as f64 / 1e3 / commits.max(1.0)),
            ..Measurement::default()
        }
    }

    pub fn written_per_delta(&self) -> f64 {
        self.wchar / self.delta_postcard
    }

    pub fn device_per_delta(&self) -> f64 {
        self.device_bytes / self.delta_postcard
    }

    /// The median of each figure over rounds.
    pub fn median_of(rounds: &[Measurement]) -> Measurement {
        let med = |f: &dyn Fn(&Measurement) -> f64| {
            let mut v: Vec<f64> = rounds.iter().map(f).collect();
            median(&mut v)
        };
        let med_opt = |f: &dyn Fn(&Measurement) -> Option<f64>| {
            let mut v: Vec<f64> = rounds.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| median(&mut v))
        };
        Measurement {
            commits: med(&|m| m.commits),
            commits_per_s: med(&|m| m.commits_per_s),
            p50_ms: med(&|m| m.p50_ms),
            p99_ms: med(&|m| m.p99_ms),
            max_ms: med(&|m| m.max_ms),
            disk_bytes: med(&|m| m.disk_bytes),
            disk_allocated: med(&|m| m.disk_allocated),
            wchar: med(&|m| m.wchar),
            device_bytes: med(&|m| m.device_bytes),
            delta_postcard: med(&|m| m.delta_postcard),
            delta_json: med(&|m| m.delta_json),
            load_warm_us: med_opt(&|m| m.load_warm_us),
            load_cold_us: med_opt(&|m| m.load_cold_us),
            recovery_ms: med_opt(&|m| m.recovery_ms),
            log_bytes: med_opt(&|m| m.log_bytes),
            fsyncs: med_opt(&|m| m.fsyncs),
            mean_batch: med_opt(&|m| m.mean_batch),
            zero_bytes: med_opt(&|m| m.zero_bytes),
            read_bytes: med_opt(&|m| m.read_bytes),
            free_files: med_opt(&|m| m.free_files),
            recycled_written_bytes: med_opt(&|m| m.recycled_written_bytes),
            prep_log_bytes: med_opt(&|m| m.prep_log_bytes),
            prep_device_bytes: med_opt(&|m| m.prep_device_bytes),
            prep_ms: med_opt(&|m| m.prep_ms),
            busy_retries: med_opt(&|m| m.busy_retries),
            wal_bytes: med_opt(&|m| m.wal_bytes),
            load_rows: med_opt(&|m| m.load_rows),
            load_read_bytes: med_opt(&|m| m.load_read_bytes),
            probe_us: med(&|m| m.probe_us),
            step_cpu_us: med(&|m| m.step_cpu_us),
            faults_per_commit: med(&|m| m.faults_per_commit),
            machine_busy: med_opt(&|m| m.machine_busy),
            machine_cpu_us: med_opt(&|m| m.machine_cpu_us),
            machine_ticks: med_opt(&|m| m.machine_ticks),
            process_cpu_us: med_opt(&|m| m.process_cpu_us),
        }
    }
}

pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 * p / 100.0) as usize).min(sorted.len() - 1);
    sorted[i]
}

pub use crate::common::median;

pub fn median_duration(v: &mut [Duration]) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}
