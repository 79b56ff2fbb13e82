//! Where the figures come from: the date (UTC), the commit and the machine, for the
//! report and the chart.
//!
//! The calendar arithmetic is written out here because nothing in the dependency tree
//! formats dates (`toml_datetime` parses only).

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::config::Config;
use crate::metering::mount_of;

pub struct Provenance {
    pub date: String,
    pub commit: String,
    pub machine: String,
}

pub fn provenance(cfg: &Config) -> Provenance {
    Provenance {
        date: date_utc(),
        commit: commit(),
        machine: machine(cfg),
    }
}

/// Now, as `YYYY-MM-DD HH:MM UTC`.
fn date_utc() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        secs % 86_400 / 3600,
        secs % 3600 / 60
    )
}

/// The short hash of HEAD, and the files under `src` that differ from it: figures from a
/// dirty tree must say so.
fn commit() -> String {
    let manifest = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(manifest)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let mut commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    if let Some(dirty) = git(&["status", "--porcelain", "--untracked-files=no", "--", "src"])
        && !dirty.is_empty()
    {
        let files: Vec<&str> = dirty
            .lines()
            .filter_map(|l| l.split_whitespace().last())
            .collect();
        commit.push_str(&format!(" + uncommitted changes to {}", files.join(", ")));
    }
    commit
}

/// CPUs, RAM, kernel and the file system the stores are on.
fn machine(cfg: &Config) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find_map(|l| {
                Some(
                    l.strip_prefix("model name")?
                        .split(':')
                        .nth(1)?
                        .trim()
                        .to_string(),
                )
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| "unknown".into(), |k| k.trim().to_string());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines().find_map(|l| {
                let kb = l.strip_prefix("MemTotal:")?.trim().strip_suffix("kB")?;
                kb.trim().parse::<f64>().ok()
            })
        })
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    let (fs, dev) = mount_of(&cfg.base);
    format!("nproc {nproc} ({cpu}), {mem_gib:.0} GiB RAM, Linux {kernel}, stores on {fs} ({dev})")
}

/// Days since 1970-01-01 to (year, month, day) (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}
