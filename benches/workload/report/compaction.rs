//! The compaction suite's report (`bench-results/workload-compaction.md`): write
//! amplification, segments recycled and zeros written ahead, and commit latency under CPU
//! contention with and without the background compactor.

use std::fmt::Write as _;

use crate::compaction::{
    Counters, JOURNAL_EVERY, Latency, PENDING_EVERY, PENDING_FOR, Shape, StoreRun, Suite, Workload,
};
use crate::config::Config;
use crate::measurement::median;
use crate::provenance::Provenance;
use crate::report::markdown::command_env;
use crate::report::{fmt_bytes, fmt_ms, fmt_rate, fmt_ratio};

/// Write amplification at most this (the target).
pub const WA_TARGET: f64 = 2.0;
/// Commit p99.9 under contention while compacting at most this many ms (the issue's).
pub const P999_TARGET_MS: f64 = 100.0;

/// Prints the report and writes it to `cfg.out_dir/workload-compaction.md`.
pub fn write(cfg: &Config, suite: &Suite, prov: &Provenance) {
    let md = markdown(cfg, suite, prov);
    println!("{md}");
    std::fs::create_dir_all(&cfg.out_dir).expect("create the output directory");
    let path = cfg.out_dir.join("workload-compaction.md");
    std::fs::write(&path, &md).expect("write the report");
    eprintln!("wrote {}", path.display());
}

fn med(runs: &[&StoreRun], f: impl Fn(&StoreRun) -> f64) -> f64 {
    let mut v: Vec<f64> = runs.iter().map(|r| f(r)).collect();
    median(&mut v)
}

fn per_round(runs: &[&StoreRun], f: impl Fn(&StoreRun) -> String) -> String {
    runs.iter().map(|r| f(r)).collect::<Vec<_>>().join(" / ")
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "**missed**" }
}

pub fn markdown(cfg: &Config, suite: &Suite, prov: &Provenance) -> String {
    let mut md = String::new();
    let w = &mut md;
    let _ = writeln!(w, "# agentwal compaction benchmark\n");
    let _ = writeln!(
        w,
        "{} · commit {} · {}\n",
        prov.date, prov.commit, prov.machine
    );
    let _ = writeln!(
        w,
        "Mode: {} — {} round(s), each figure the median over rounds (per-round values \
         after it); run took {:.0} s. Command: \
         `{}cargo bench --bench workload`. Every store: `SyncMode::Always`, default \
         compression (zstd level 1 at compaction), default cache; one fresh directory per \
         run. Source: `benches/workload/compaction.rs`.\n",
        if cfg.quick { "quick" } else { "full" },
        cfg.rounds,
        suite.elapsed.as_secs_f64(),
        command_env(),
    );
    shapes_table(w, suite);
    amplification(w, suite);
    segments(w, suite);
    contention(w, suite);
    md
}

fn shapes_table(w: &mut String, suite: &Suite) {
    let _ = writeln!(w, "## Workloads\n");
    let _ = writeln!(
        w,
        "| run | workload | segment | keep_checkpoints | background compaction | tasks | threads | steps per task | spinning threads |"
    );
    let _ = writeln!(w, "|---|---|---:|---:|---|---:|---:|---:|---:|");
    let shapes = (suite.plain.iter().filter_map(|r| r.first()))
        .chain(suite.contended.first().into_iter().flatten())
        .map(|r| r.shape);
    for s in shapes {
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            s.name,
            match s.workload {
                Workload::Journal => "journal",
                Workload::Agent => "agent",
            },
            fmt_bytes(s.segment_bytes as f64),
            s.keep.map_or_else(|| "all".into(), |k| k.to_string()),
            if s.auto_compact { "on" } else { "off" },
            s.tasks,
            s.threads,
            s.steps,
            s.spinners
        );
    }
    let _ = writeln!(
        w,
        "\n`journal`: one task in {JOURNAL_EVERY} calls a tool each step (`begin_call` with \
         ~200 B of args, `finish_call` with a 4 KiB result, then a commit of ~100 B of \
         message), and every {PENDING_EVERY} steps begins a long-running call with 8 KiB of \
         args that finishes {PENDING_FOR} steps later with a 4 KiB result (about two pending \
         per such task at any time); the other tasks commit ~160 B messages. `agent`: the \
         workload bench's step (an assistant message with a tool call, a ~1.5 KB tool \
         result, three variables; ~1.9 KB postcard). Thread `w` runs the tasks `t` with \
         `t % threads == w`, one step of each in turn. The spinning threads loop on \
         arithmetic for the whole run at the process's priority.\n"
    );
}

fn amplification(w: &mut String, suite: &Suite) {
    let _ = writeln!(w, "## Write amplification\n");
    let _ = writeln!(
        w,
        "`(bytes_written + compaction_bytes_written) / bytes_written` (`Stats`) over the whole \
         run: bytes compaction passes wrote per byte the log appended. Target ≤ \
         {WA_TARGET:.0}×. The contended run is the one compacting.\n"
    );
    let _ = writeln!(
        w,
        "| run | durable ops (commits) | appended | compaction wrote | passes | write amplification | per round | on disk after | target |"
    );
    let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---|---:|---|");
    let contended: Vec<&StoreRun> = suite.contended.iter().map(|p| &p[0]).collect();
    let groups = suite.plain.iter().map(|r| r.iter().collect::<Vec<_>>());
    for runs in groups.chain(std::iter::once(contended)) {
        let Some(first) = runs.first() else { continue };
        let wa = med(&runs, |r| r.total.write_amplification());
        let _ = writeln!(
            w,
            "| {} | {:.0} ({:.0}) | {} | {} | {:.0} | {} | {} | {} | {} |",
            first.shape.name,
            med(&runs, |r| r.ops as f64),
            med(&runs, |r| r.commits as f64),
            fmt_bytes(med(&runs, |r| r.total.bytes_written as f64)),
            fmt_bytes(med(&runs, |r| r.total.compaction_bytes_written as f64)),
            med(&runs, |r| r.total.compactions as f64),
            fmt_ratio(wa),
            per_round(&runs, |r| fmt_ratio(r.total.write_amplification())),
            fmt_bytes(med(&runs, |r| r.total.disk_bytes as f64)),
            verdict(wa <= WA_TARGET),
        );
    }
    let _ = writeln!(w);
}

fn segments(w: &mut String, suite: &Suite) {
    let _ = writeln!(w, "## Segments: recycled and new, zeros written ahead\n");
    let _ = writeln!(
        w,
        "Rotations over the whole run (new = `segments_created - segments_recycled`), and \
         over its second half (steady state: the workers pause at half-way while the \
         counters are read). Zeros: `zero_bytes_written / bytes_written`; fill: \
         `fill_bytes_written / bytes_written` (zeros that end a batch on a block a recycled \
         file wrote before). Medians over rounds; per round: recycled of rotations in the \
         second half.\n"
    );
    let _ = writeln!(
        w,
        "| run | segment | rotations | recycled | new | 2nd half: rotations | 2nd half: recycled | zeros / appended | 2nd half: zeros / appended | fill / appended | segment files / waiting at end | per round (2nd half recycled / rotations) |"
    );
    let _ = writeln!(
        w,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    );
    for runs in &suite.plain {
        let runs: Vec<&StoreRun> = runs.iter().collect();
        let Some(first) = runs.first() else { continue };
        let c = |f: fn(&Counters) -> u64, steady: bool| {
            med(&runs, |r| {
                f(if steady { &r.steady } else { &r.total }) as f64
            })
        };
        let created = c(|c| c.segments_created, false);
        let recycled = c(|c| c.segments_recycled, false);
        let _ = writeln!(
            w,
            "| {} | {} | {created:.0} | {recycled:.0} | {:.0} | {:.0} | {:.0} | {:.4} | {:.4} | {:.4} | {:.0} / {:.0} | {} |",
            first.shape.name,
            fmt_bytes(first.shape.segment_bytes as f64),
            med(
                &runs,
                |r| (r.total.segments_created - r.total.segments_recycled) as f64
            ),
            c(|c| c.segments_created, true),
            c(|c| c.segments_recycled, true),
            med(&runs, |r| r.total.zeros_ratio()),
            med(&runs, |r| r.steady.zeros_ratio()),
            med(&runs, |r| r.total.fill_bytes_written as f64
                / r.total.bytes_written.max(1) as f64),
            c(|c| c.segments, false),
            c(|c| c.free_segments, false),
            per_round(&runs, |r| format!(
                "{}/{}",
                r.steady.segments_recycled, r.steady.segments_created
            )),
        );
    }
    let _ = writeln!(w);
}

fn latency_cells(runs: &[&StoreRun]) -> String {
    let l = |f: fn(&Latency) -> f64| fmt_ms(med(runs, |r| f(&r.latency)));
    format!(
        "{} | {} | {} | {} | {}",
        l(|l| l.p50_ms),
        l(|l| l.p99_ms),
        l(|l| l.p999_ms),
        l(|l| l.max_ms),
        fmt_rate(med(runs, |r| r.commits as f64 / r.wall_s)),
    )
}

fn contention(w: &mut String, suite: &Suite) {
    let Some(first) = suite.contended.first() else {
        return;
    };
    let s: Shape = first[0].shape;
    let _ = writeln!(w, "## Commit latency under CPU contention\n");
    let nice = first[0]
        .spinner_nice
        .map_or_else(|| "?".into(), |n| n.to_string());
    let _ = writeln!(
        w,
        "{} tasks, {} committing threads, {} steps per task, {} segments, keep_checkpoints \
         = {}, {} threads spinning at nice {nice} throughout; the same run with the \
         background compactor on (`auto_compact: true`, its bulk at nice 19) and off, in \
         one process, alternating which goes first each round. Latency: each `commit` call, \
         every thread's. Target: p99.9 ≤ {P999_TARGET_MS:.0} ms while compacting.\n",
        s.tasks,
        s.threads,
        s.steps,
        fmt_bytes(s.segment_bytes as f64),
        s.keep.map_or_else(|| "all".into(), |k| k.to_string()),
        s.spinners,
    );
    let on: Vec<&StoreRun> = suite.contended.iter().map(|p| &p[0]).collect();
    let off: Vec<&StoreRun> = suite.contended.iter().map(|p| &p[1]).collect();
    let _ = writeln!(
        w,
        "| compactor | p50 | p99 | p99.9 | max | commits/s | passes | machine busy | target |"
    );
    let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for (name, runs) in [("on", &on), ("off", &off)] {
        let target = if name == "on" {
            verdict(med(runs, |r| r.latency.p999_ms) <= P999_TARGET_MS)
        } else {
            "–"
        };
        let _ = writeln!(
            w,
            "| {name} | {} | {:.0} | {:.0}% | {target} |",
            latency_cells(runs),
            med(runs, |r| r.total.compactions as f64),
            med(runs, |r| r.machine_busy.unwrap_or(f64::NAN)) * 100.0,
        );
    }
    let _ = writeln!(w, "\nPer round (first in the round marked *):\n");
    let _ = writeln!(
        w,
        "| round | compactor | p50 | p99 | p99.9 | max | commits/s | passes | machine busy |"
    );
    let _ = writeln!(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for (i, pair) in suite.contended.iter().enumerate() {
        for (k, r) in pair.iter().enumerate() {
            let first = (k == 0) == (i % 2 == 0);
            let _ = writeln!(
                w,
                "| {} | {}{} | {} | {:.0} | {} |",
                i + 1,
                if k == 0 { "on" } else { "off" },
                if first { "*" } else { "" },
                latency_cells(&[r]),
                r.total.compactions,
                r.machine_busy
                    .map_or_else(|| "–".into(), |b| format!("{:.0}%", b * 100.0)),
            );
        }
    }
    let _ = writeln!(w);
}
