//! The project's performance targets, judged on a run's medians.

use crate::Run;
use crate::backends::{self, Backend};
use crate::config::Config;
use crate::measurement::{Measurement, median};
use crate::report::{fmt_bytes, fmt_ms, fmt_rate, fmt_ratio};

/// A target line: what, the measured figure, met or not.
pub struct Target {
    pub what: String,
    pub measured: String,
    pub met: bool,
}

/// Every target the run has the figures for, in the report's order.
pub fn targets(cfg: &Config, run: &Run) -> Vec<Target> {
    let mut out = Vec::new();
    for &t in &cfg.threads {
        out.extend(commits_vs(run, t, &backends::OKAYWAL, 1.0, "okaywal"));
    }
    let tmax = cfg.tmax();
    let Some(a) = run.median(tmax, &backends::AGENTWAL) else {
        return out;
    };
    for (peer, factor) in [
        (&backends::FSYNC_FLOOR_GROUP as &dyn Backend, 0.9),
        (&backends::SQLITE_DELTA, 8.0),
        (&backends::SQLITE_SEED, 40.0),
    ] {
        let what = format!("{factor}× {}", peer.name());
        out.extend(commits_vs(run, tmax, peer, factor, &what));
    }
    out.extend(disk_vs_seed(run, tmax, &a));
    out.extend(bytes_written(tmax, &a));
    out.push(disk_vs_deltas(tmax, &a));
    out.extend(load_vs_seed(cfg, run, tmax, &a));
    out.push(large_recovery(run));
    out.extend(index_memory(run));
    out
}

/// The commits/s ratio of agentwal to `peer` in each round (the two ran minutes apart at
/// most), as text: shows how much of a ratio of medians is the disk's mood.
fn paired_ratios(run: &Run, t: usize, peer: &dyn Backend) -> String {
    let (Some(a), Some(p)) = (
        run.rounds.get(&(t, backends::AGENTWAL.name())),
        run.rounds.get(&(t, peer.name())),
    ) else {
        return String::new();
    };
    if a.len() < 2 {
        return String::new();
    }
    let mut ratios: Vec<f64> = a
        .iter()
        .zip(p)
        .map(|(a, p)| a.commits_per_s / p.commits_per_s)
        .collect();
    let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    let mid = median(&mut ratios);
    format!("; per round {}, their median {mid:.2}×", each.join(", "))
}

/// agentwal's commits/s at least `factor` × `peer`'s at T = `t`; `what` names the bar.
fn commits_vs(run: &Run, t: usize, peer: &dyn Backend, factor: f64, what: &str) -> Option<Target> {
    let a = run.median(t, &backends::AGENTWAL)?;
    let p = run.median(t, peer)?;
    let r = a.commits_per_s / p.commits_per_s;
    Some(Target {
        what: format!("commits/s ≥ {what} at T={t}"),
        measured: format!(
            "{} vs {} ({}{})",
            fmt_rate(a.commits_per_s),
            fmt_rate(p.commits_per_s),
            fmt_ratio(r),
            paired_ratios(run, t, peer)
        ),
        met: r >= factor,
    })
}

fn disk_vs_seed(run: &Run, tmax: usize, a: &Measurement) -> Option<Target> {
    let seed = run.median(tmax, &backends::SQLITE_SEED)?;
    let r = seed.disk_bytes / a.disk_bytes;
    Some(Target {
        what: format!("bytes on disk ≤ 1/50 of sqlite-seed (T={tmax})"),
        measured: format!(
            "{} vs {} (1/{r:.0})",
            fmt_bytes(a.disk_bytes),
            fmt_bytes(seed.disk_bytes)
        ),
        met: r >= 50.0,
    })
}

/// Judged twice: on the log's records (what the engine writes, snapshots included),
/// and on every byte handed to `write`, which adds the zeros written ahead into
/// preallocated space (DESIGN.md §2.6).
fn bytes_written(tmax: usize, a: &Measurement) -> [Target; 2] {
    let written = a.written_per_delta();
    let log = a.log_bytes.unwrap_or(f64::INFINITY) / a.delta_postcard;
    [
        Target {
            what: format!("bytes written ≤ 3× the delta payload (T={tmax}, log records)"),
            measured: format!("{log:.2}× (snapshots included)"),
            met: log <= 3.0,
        },
        Target {
            what: format!("bytes written ≤ 3× the delta payload (T={tmax}, syscall bytes)"),
            measured: format!(
                "{written:.2}× (records {log:.2}× + zero-fill of preallocated space; device: {:.2}×)",
                a.device_per_delta()
            ),
            met: written <= 3.0,
        },
    ]
}

/// Issue 14's compression target: the store's files after the run (preallocated space
/// included: segments grow in 4 MiB steps) at most half the encoded deltas.
fn disk_vs_deltas(tmax: usize, a: &Measurement) -> Target {
    let disk = a.disk_bytes / a.delta_postcard;
    let log = a.log_bytes.unwrap_or(f64::INFINITY) / a.delta_postcard;
    Target {
        what: format!("bytes on disk ≤ 0.5× the delta payload (T={tmax})"),
        measured: format!(
            "{disk:.2}× ({} of files; their records {log:.2}×)",
            fmt_bytes(a.disk_bytes)
        ),
        met: disk <= 0.5,
    }
}

fn load_vs_seed(cfg: &Config, run: &Run, tmax: usize, a: &Measurement) -> Option<Target> {
    let seed = run.median(tmax, &backends::SQLITE_SEED)?;
    let aw = a.load_warm_us?;
    let sw = seed.load_warm_us?;
    let r = sw / aw;
    Some(Target {
        what: format!(
            "load_latest p50 ≤ 1/5 of sqlite-seed ({}-step task)",
            cfg.steps
        ),
        measured: format!(
            "{} vs {} (1/{r:.1}; agentwal's warm load is a latest-state cache hit; \
             first load on a new handle: {} vs {})",
            fmt_ms(aw / 1e3),
            fmt_ms(sw / 1e3),
            fmt_ms(a.load_cold_us.unwrap_or(f64::NAN) / 1e3),
            fmt_ms(seed.load_cold_us.unwrap_or(f64::NAN) / 1e3),
        ),
        met: r >= 5.0,
    })
}

fn large_recovery(run: &Run) -> Target {
    let l = &run.large;
    let gibps = l.file_bytes as f64 / (1u64 << 30) as f64 / l.reopen.as_secs_f64();
    let vs_read = l.reopen.as_secs_f64() / l.read_crc.as_secs_f64();
    Target {
        what: format!(
            "recovery of a {} store ≥ 1 GiB/s and ≤ 2× read+crc32",
            fmt_bytes(l.file_bytes as f64)
        ),
        measured: format!(
            "{gibps:.2} GiB/s; {} vs {} read+crc32 ({vs_read:.2}×)",
            fmt_ms(l.reopen.as_secs_f64() * 1e3),
            fmt_ms(l.read_crc.as_secs_f64() * 1e3)
        ),
        met: gibps >= 1.0 && vs_read <= 2.0,
    }
}

fn index_memory(run: &Run) -> impl Iterator<Item = Target> + '_ {
    run.index.iter().map(|i| {
        let per_task = i.anon_bytes as f64 / i.tasks as f64;
        Target {
            what: format!(
                "index memory ≤ 512 B/task ({} tasks × {} checkpoints)",
                i.tasks, i.checkpoints_per_task
            ),
            measured: format!(
                "{per_task:.0} B/task (RssAnon; {:.0} B after malloc_trim)",
                i.anon_trimmed_bytes as f64 / i.tasks as f64
            ),
            met: per_task <= 512.0,
        }
    })
}
