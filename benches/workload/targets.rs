//! The project's performance targets, judged on a run's medians: the v1 targets, and the
//! format v2 targets (reported, met or missed; they fail nothing).

use crate::Run;
use crate::backends::{self, Backend};
use crate::config::Config;
use crate::measurement::{Measurement, median};
use crate::report::{fmt_bytes, fmt_ms, fmt_rate, fmt_ratio};

/// A target line: which set it belongs to, what, the measured figure, met or not.
pub struct Target {
    /// "v1", "v2", or "v1, v2" for a bar both sets hold.
    pub set: &'static str,
    pub what: String,
    pub measured: String,
    /// `None`: the run lacks what the target is judged against (a baseline).
    pub met: Option<bool>,
}

/// Every target the run has the figures for, in the report's order: v1's, then v2's.
pub fn targets(cfg: &Config, run: &Run) -> Vec<Target> {
    let mut out = Vec::new();
    for &t in &cfg.threads {
        out.extend(commits_vs(
            run,
            t,
            &backends::OKAYWAL,
            1.0,
            "okaywal",
            "v1, v2",
        ));
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
        out.extend(commits_vs(run, tmax, peer, factor, &what, "v1"));
    }
    out.extend(disk_vs_seed(run, tmax, &a));
    out.extend(bytes_written(tmax, &a));
    out.extend(load_vs_seed(cfg, run, tmax, &a));
    out.extend(large_recovery(run));
    out.extend(index_memory(run));
    out.extend(v2(run, tmax, &a));
    out
}

/// The format v2 targets beyond the okaywal ones (which v1 has too).
fn v2(run: &Run, tmax: usize, a: &Measurement) -> Vec<Target> {
    let peer = &backends::FSYNC_FLOOR_GROUP;
    let what = format!("1.1× {}", peer.name());
    let mut out: Vec<Target> = commits_vs(run, tmax, peer, 1.1, &what, "v2")
        .into_iter()
        .collect();
    let disk = a.disk_bytes / a.delta_postcard;
    out.push(Target {
        set: "v2",
        what: format!("bytes on disk ≤ 0.5× the encoded deltas (T={tmax})"),
        measured: format!(
            "{disk:.2}× ({} of files, {} allocated, vs {} of postcard-encoded deltas)",
            fmt_bytes(a.disk_bytes),
            fmt_bytes(a.disk_allocated),
            fmt_bytes(a.delta_postcard)
        ),
        met: Some(disk <= 0.5),
    });
    if let Some(log) = a.log_bytes {
        let r = a.wchar / log;
        out.push(Target {
            set: "v2",
            what: format!("bytes handed to `write` ≤ 1.2× the log records (T={tmax})"),
            measured: format!(
                "{r:.2}× ({} vs {} of records, snapshots and seals)",
                fmt_bytes(a.wchar),
                fmt_bytes(log)
            ),
            met: Some(r <= 1.2),
        });
    }
    out.extend(p99_no_regression(run, tmax));
    out
}

/// agentwal's p99 commit latency at T = `t` against the baseline run's: a regression is a
/// median over rounds above the baseline's median by more than the noise, taken as the
/// larger interquartile range of the two runs' per-round p99s (the spread that rounds of
/// one run already show on this shared disk).
fn p99_no_regression(run: &Run, t: usize) -> Option<Target> {
    let name = backends::AGENTWAL.name();
    let now = p99s(run.rounds.get(&(t, name))?);
    let (med, iqr) = median_iqr(&now);
    let what = format!("p99 commit latency at T={t}: no regression beyond noise");
    let range = |v: &[f64]| {
        format!(
            "rounds {}–{}",
            fmt_ms(v[0]),
            fmt_ms(v.last().copied().unwrap_or(v[0]))
        )
    };
    let unjudged = |why: String| Target {
        set: "v2",
        what: what.clone(),
        measured: format!("{} ({}); {why}", fmt_ms(med), range(&now)),
        met: None,
    };
    let Some(base) = &run.baseline else {
        return Some(unjudged(
            "not judged without a baseline (AGENTWAL_BENCH_BASELINE=<an earlier run's workload.json>)"
                .into(),
        ));
    };
    let Some(b) = base.rounds.get(&(t, name.to_string())) else {
        return Some(unjudged(format!(
            "{} has no agentwal run at T={t}",
            base.label
        )));
    };
    let then = p99s(b);
    let (bmed, biqr) = median_iqr(&then);
    let noise = iqr.max(biqr);
    Some(Target {
        set: "v2",
        what,
        measured: format!(
            "{} ({}) vs {} ({}) in {}: {}; noise (the larger interquartile range) {}",
            fmt_ms(med),
            range(&now),
            fmt_ms(bmed),
            range(&then),
            base.label,
            fmt_ratio(med / bmed),
            fmt_ms(noise)
        ),
        met: Some(med <= bmed + noise),
    })
}

/// The per-round p99s, sorted.
fn p99s(rounds: &[Measurement]) -> Vec<f64> {
    let mut v: Vec<f64> = rounds.iter().map(|m| m.p99_ms).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// The median and the interquartile range (quartiles by linear interpolation) of sorted,
/// non-empty `v`.
fn median_iqr(v: &[f64]) -> (f64, f64) {
    let q = |p: f64| {
        let pos = p * (v.len() - 1) as f64;
        let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
        v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
    };
    (q(0.5), q(0.75) - q(0.25))
}

/// The commits/s ratios of agentwal to `peer` in each round (the two ran minutes apart at
/// most, in the order the rounds ran): `None` without both, or with a single round.
pub fn per_round_ratios(run: &Run, t: usize, peer: &dyn Backend) -> Option<Vec<f64>> {
    let a = run.rounds.get(&(t, backends::AGENTWAL.name()))?;
    let p = run.rounds.get(&(t, peer.name()))?;
    (a.len() >= 2).then(|| {
        a.iter()
            .zip(p)
            .map(|(a, p)| a.commits_per_s / p.commits_per_s)
            .collect()
    })
}

/// The per-round ratios as text: shows how much of a ratio of medians is the disk's mood.
fn paired_ratios(run: &Run, t: usize, peer: &dyn Backend) -> String {
    let Some(mut ratios) = per_round_ratios(run, t, peer) else {
        return String::new();
    };
    let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    let mid = median(&mut ratios);
    format!("; per round {}, their median {mid:.2}×", each.join(", "))
}

/// agentwal's commits/s at least `factor` × `peer`'s at T = `t`; `what` names the bar.
fn commits_vs(
    run: &Run,
    t: usize,
    peer: &dyn Backend,
    factor: f64,
    what: &str,
    set: &'static str,
) -> Option<Target> {
    let a = run.median(t, &backends::AGENTWAL)?;
    let p = run.median(t, peer)?;
    let r = a.commits_per_s / p.commits_per_s;
    Some(Target {
        set,
        what: format!("commits/s ≥ {what} at T={t}"),
        measured: format!(
            "{} vs {} ({}{})",
            fmt_rate(a.commits_per_s),
            fmt_rate(p.commits_per_s),
            fmt_ratio(r),
            paired_ratios(run, t, peer)
        ),
        met: Some(r >= factor),
    })
}

fn disk_vs_seed(run: &Run, tmax: usize, a: &Measurement) -> Option<Target> {
    let seed = run.median(tmax, &backends::SQLITE_SEED)?;
    let r = seed.disk_bytes / a.disk_bytes;
    Some(Target {
        set: "v1",
        what: format!("bytes on disk ≤ 1/50 of sqlite-seed (T={tmax})"),
        measured: format!(
            "{} vs {} (1/{r:.0})",
            fmt_bytes(a.disk_bytes),
            fmt_bytes(seed.disk_bytes)
        ),
        met: Some(r >= 50.0),
    })
}

/// Judged twice: on the log's records (what the engine writes, snapshots included),
/// and on every byte handed to `write`, which adds the zeros written ahead into
/// preallocated space (docs/format.md §6).
fn bytes_written(tmax: usize, a: &Measurement) -> [Target; 2] {
    let written = a.written_per_delta();
    let log = a.log_bytes.unwrap_or(f64::INFINITY) / a.delta_postcard;
    [
        Target {
            set: "v1",
            what: format!("bytes written ≤ 3× the delta payload (T={tmax}, log records)"),
            measured: format!("{log:.2}× (snapshots included)"),
            met: Some(log <= 3.0),
        },
        Target {
            set: "v1",
            what: format!("bytes written ≤ 3× the delta payload (T={tmax}, syscall bytes)"),
            measured: format!(
                "{written:.2}× (records {log:.2}× + zero-fill of preallocated space; device: {:.2}×)",
                a.device_per_delta()
            ),
            met: Some(written <= 3.0),
        },
    ]
}

fn load_vs_seed(cfg: &Config, run: &Run, tmax: usize, a: &Measurement) -> Option<Target> {
    let seed = run.median(tmax, &backends::SQLITE_SEED)?;
    let aw = a.load_warm_us?;
    let sw = seed.load_warm_us?;
    let r = sw / aw;
    Some(Target {
        set: "v1",
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
        met: Some(r >= 5.0),
    })
}

fn large_recovery(run: &Run) -> Option<Target> {
    let l = run.large.as_ref()?;
    let gibps = l.file_bytes as f64 / (1u64 << 30) as f64 / l.reopen.as_secs_f64();
    let vs_read = l.reopen.as_secs_f64() / l.read_crc.as_secs_f64();
    Some(Target {
        set: "v1",
        what: format!(
            "recovery of a {} store ≥ 1 GiB/s and ≤ 2× read+crc32",
            fmt_bytes(l.file_bytes as f64)
        ),
        measured: format!(
            "{gibps:.2} GiB/s; {} vs {} read+crc32 ({vs_read:.2}×)",
            fmt_ms(l.reopen.as_secs_f64() * 1e3),
            fmt_ms(l.read_crc.as_secs_f64() * 1e3)
        ),
        met: Some(gibps >= 1.0 && vs_read <= 2.0),
    })
}

fn index_memory(run: &Run) -> impl Iterator<Item = Target> + '_ {
    run.index.iter().map(|i| {
        let per_task = i.anon_bytes as f64 / i.tasks as f64;
        Target {
            set: "v1",
            what: format!(
                "index memory ≤ 512 B/task ({} tasks × {} checkpoints)",
                i.tasks, i.checkpoints_per_task
            ),
            measured: format!(
                "{per_task:.0} B/task (RssAnon; {:.0} B after malloc_trim)",
                i.anon_trimmed_bytes as f64 / i.tasks as f64
            ),
            met: Some(per_task <= 512.0),
        }
    })
}
