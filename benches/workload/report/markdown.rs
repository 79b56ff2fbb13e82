//! The Markdown report (`bench-results/workload.md`), one function per section.

use std::fmt::Write as _;

use crate::Run;
use crate::backends::{self, Backend};
use crate::config::{Config, Process};
use crate::measurement::{Measurement, median};
use crate::metering;
use crate::provenance::Provenance;
use crate::report::{fmt_bytes, fmt_ms, fmt_rate, fmt_ratio, opt};
use crate::targets::{per_round_ratios, targets};

// Writing to a `String` cannot fail: the `fmt::Result`s below are dropped.

pub fn markdown(cfg: &Config, run: &Run, prov: &Provenance) -> String {
    let mut md = String::new();
    let w = &mut md;
    header(w, cfg, run, prov);
    results(w, cfg, run);
    machine_load(w, cfg, run);
    ratios(w, cfg, run);
    v2_figures(w, cfg, run);
    targets_table(w, cfg, run);
    if let Some(l) = &run.large {
        large_store(w, l);
    }
    if !run.index.is_empty() {
        index_memory(w, run);
    }
    details(w, cfg, run);
    md
}

fn header(w: &mut String, cfg: &Config, run: &Run, prov: &Provenance) {
    let threads_list: Vec<String> = cfg.threads.iter().map(usize::to_string).collect();
    let _ = writeln!(w, "# agentwal workload benchmark\n");
    let _ = writeln!(
        w,
        "{} · commit {} · {}\n",
        prov.date, prov.commit, prov.machine
    );
    let process = match cfg.process {
        Process::InProcess => "every run in this one process",
        Process::Fresh => {
            "one fresh process per backend per T per round (the parent re-executes the bench \
             binary; the large-store and index-memory experiments are the in-process run's)"
        }
    };
    let _ = writeln!(
        w,
        "Mode: {} — S = {} steps per task, T = {} tasks (one thread each), {} round(s) \
         (backends in a rotating order, so each round starts with another), {process}, \
         each figure the median over rounds; run took {:.0} s. Command: `{}cargo bench --bench workload`.\n",
        if cfg.quick { "quick" } else { "full" },
        cfg.steps,
        threads_list.join(", "),
        cfg.rounds,
        run.elapsed.as_secs_f64(),
        command_env()
    );
    let _ = writeln!(
        w,
        "A step appends an assistant message with a tool call (~300 B) and a tool result \
         (~1.5 KB) and sets 3 variables; it is durable before the task's next step. \
         Source and definitions: `benches/workload/`.\n"
    );
}

/// The `AGENTWAL_BENCH_*` variables this run had, which reproduce its mode: all but the
/// children's markers and where the report goes.
pub(crate) fn command_env() -> String {
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| {
            k.starts_with("AGENTWAL_BENCH_")
                && k != "AGENTWAL_BENCH_OUT"
                && k != crate::fresh::CHILD_ENV
                && k != crate::index_memory::CHILD_ENV
        })
        .collect();
    vars.sort();
    vars.iter().map(|(k, v)| format!("{k}={v} ")).collect()
}

fn results(w: &mut String, cfg: &Config, run: &Run) {
    let _ = writeln!(w, "## Results\n");
    let _ = writeln!(
        w,
        "| backend | T | commits/s | p50 commit | p99 commit | on disk | allocated | written / delta | device / delta | load_latest p50 (warm) | load_latest (cold handle) | recovery |"
    );
    let _ = writeln!(
        w,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for &t in &cfg.threads {
        for &b in &cfg.backends {
            let Some(m) = run.median(t, b) else { continue };
            let _ = writeln!(
                w,
                "| {} | {t} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {} | {} | {} |",
                b.name(),
                fmt_rate(m.commits_per_s),
                fmt_ms(m.p50_ms),
                fmt_ms(m.p99_ms),
                fmt_bytes(m.disk_bytes),
                fmt_bytes(m.disk_allocated),
                m.written_per_delta(),
                m.device_per_delta(),
                opt(m.load_warm_us, |u| fmt_ms(u / 1e3)),
                opt(m.load_cold_us, |u| fmt_ms(u / 1e3)),
                opt(m.recovery_ms, fmt_ms),
            );
        }
    }
    delta_note(w, cfg, run);
}

/// The payload per step and what the columns count.
fn delta_note(w: &mut String, cfg: &Config, run: &Run) {
    if let Some(m) = cfg
        .threads
        .iter()
        .find_map(|&t| run.median(t, cfg.backends[0]))
    {
        let per_step = m.delta_postcard / m.commits;
        let json_per_step = m.delta_json / m.commits;
        let _ = writeln!(
            w,
            "\nDelta payload: {per_step:.0} B per step postcard-encoded ({json_per_step:.0} B as JSON). \
             \"written / delta\": bytes handed to write syscalls during the run and the close \
             (/proc/self/io `wchar`) over the postcard-encoded deltas; \"device / delta\": bytes \
             written to the stores' block device during the run and the close (its sectors-written \
             counter in /sys/class/block: data, file-system metadata, a partial page again each \
             time a batch extends it, and any other I/O on that device meanwhile). \"on disk\": file sizes after the run; \"allocated\": blocks, as `du` counts. \
             Cold load: first load on a freshly opened handle (page cache warm, open not counted). \
             Recovery: agentwal `Store::open`; SQLite: open, pragmas and a first query (the last \
             connection to close checkpointed the WAL); okaywal: `WriteAheadLog::recover` reading \
             the entries still in its log; floors: read the file and check every crc. okaywal \
             is a WAL only: it recycles a segment once it is checkpointed (the manager here keeps \
             nothing), so its disk figure leaves out wherever an application would keep the state. \
             **agentwal-periodic is not durable per commit**: `SyncMode::Periodic(10 ms)`, a commit \
             returns once written to the page cache and a background fdatasync every 10 ms makes it \
             durable, so a crash can lose the last ~10 ms of acknowledged commits; it shows what the \
             per-commit fsync costs and takes no part in the targets.\n"
        );
    }
}

/// Beside the Results table (too wide for more columns): how busy the whole machine was
/// during each run, so a reader can tell a CPU-bound run from one waiting on fdatasync.
fn machine_load(w: &mut String, cfg: &Config, run: &Run) {
    let _ = writeln!(w, "## CPU during the commits\n");
    let _ = writeln!(
        w,
        "Machine busy: the share of all {} cores' time (/proc/stat's `cpu` line, from the \
         common start to the last commit's end) that was neither idle nor iowait, whoever \
         used it: this process, its background threads, kernel threads (jbd2, kworkers, \
         interrupts), other processes, and steal; near 100% the run was bound by CPU, well \
         below it by the disk's fdatasync. /proc/stat counts in ticks of 1/{} s per core; \
         \"ticks\" is how many all cores counted during the run (the median over rounds), \
         and one tick either way moves the busy share by 1/ticks, so a run of a few tens of \
         ms has a coarse figure. Machine CPU / commit: that busy time over the commits. \
         Process CPU / commit: user + system time of every thread of this process \
         (`getrusage(RUSAGE_SELF)`) over the same span, per commit. CPU in commit: the \
         committing threads' own CPU inside their commit calls (Details).\n",
        opt(metering::online_cores(), |n| format!("{n:.0}")),
        opt(metering::clock_ticks_per_s(), |hz| format!("{hz:.0}")),
    );
    let _ = writeln!(
        w,
        "| backend | T | commits/s | machine busy | ticks | machine CPU / commit | process CPU / commit | CPU in commit |"
    );
    let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|---:|");
    let us = |v: f64| format!("{v:.1} µs");
    for &t in &cfg.threads {
        for &b in &cfg.backends {
            let Some(m) = run.median(t, b) else { continue };
            let _ = writeln!(
                w,
                "| {} | {t} | {} | {} | {} | {} | {} | {} |",
                b.name(),
                fmt_rate(m.commits_per_s),
                opt(m.machine_busy, |f| format!("{:.0}%", f * 100.0)),
                opt(m.machine_ticks, |n| format!("{n:.0}")),
                opt(m.machine_cpu_us, us),
                opt(m.process_cpu_us, us),
                us(m.step_cpu_us),
            );
        }
    }
    let _ = writeln!(w);
}

fn ratios(w: &mut String, cfg: &Config, run: &Run) {
    let _ = writeln!(w, "## agentwal ÷ peer\n");
    let peers: Vec<&dyn Backend> = cfg
        .backends
        .iter()
        .copied()
        .filter(|&b| !backends::is(b, &backends::AGENTWAL))
        .collect();
    let header: Vec<&str> = peers.iter().map(|b| b.name()).collect();
    let _ = writeln!(w, "| figure | T | {} |", header.join(" | "));
    let _ = writeln!(w, "|---|---:|{}", "---:|".repeat(peers.len()));
    let ratio_row = |w: &mut String,
                     what: &str,
                     t: usize,
                     f: &dyn Fn(&Measurement, &Measurement) -> Option<f64>| {
        let Some(a) = run.median(t, &backends::AGENTWAL) else {
            return;
        };
        let cells: Vec<String> = peers
            .iter()
            .map(|&b| {
                run.median(t, b)
                    .and_then(|p| f(&a, &p))
                    .map_or_else(|| "–".into(), fmt_ratio)
            })
            .collect();
        let _ = writeln!(w, "| {what} | {t} | {} |", cells.join(" | "));
    };
    for &t in &cfg.threads {
        ratio_row(w, "commits/s (higher: agentwal faster)", t, &|a, p| {
            Some(a.commits_per_s / p.commits_per_s)
        });
    }
    for &t in &cfg.threads {
        ratio_row(
            w,
            "p99 commit latency (lower: agentwal faster)",
            t,
            &|a, p| Some(a.p99_ms / p.p99_ms),
        );
    }
    let tmax = cfg.tmax();
    ratio_row(
        w,
        "bytes on disk (lower: agentwal smaller)",
        tmax,
        &|a, p| Some(a.disk_bytes / p.disk_bytes),
    );
    ratio_row(
        w,
        "bytes written (lower: agentwal writes less)",
        tmax,
        &|a, p| Some(a.wchar / p.wchar),
    );
    ratio_row(
        w,
        "load_latest p50 warm (lower: agentwal faster)",
        tmax,
        &|a, p| Some(a.load_warm_us? / p.load_warm_us?),
    );
    ratio_row(
        w,
        "recovery time (lower: agentwal faster)",
        tmax,
        &|a, p| Some(a.recovery_ms? / p.recovery_ms?),
    );
}

/// Per T, the figures the format v2 targets are judged on (the targets themselves are at
/// the largest T; the other T show where a figure comes from).
fn v2_figures(w: &mut String, cfg: &Config, run: &Run) {
    let _ = writeln!(w, "\n## Figures of the v2 targets, per T\n");
    let _ = writeln!(
        w,
        "agentwal's commits/s over a peer's: the ratio of the medians over rounds, then the \
         median of the per-round ratios (the two ran back to back). On disk / deltas: file sizes \
         (allocated blocks) after the run over the postcard-encoded deltas; written / log: bytes \
         handed to `write` (`wchar`) over the bytes of the log's records, snapshots and seals; \
         p99: the median over rounds (the rounds' range).\n"
    );
    let _ = writeln!(
        w,
        "| T | agentwal commits/s | ÷ okaywal | ÷ fsync-floor-group | on disk / deltas | written / log records | p99 commit |"
    );
    let _ = writeln!(w, "|---:|---:|---:|---:|---:|---:|---:|");
    let vs = |t: usize, a: &Measurement, peer: &dyn Backend| {
        let Some(p) = run.median(t, peer) else {
            return "–".to_string();
        };
        let paired = per_round_ratios(run, t, peer)
            .map_or_else(String::new, |mut r| format!(" ({:.2}×)", median(&mut r)));
        format!("{}{paired}", fmt_ratio(a.commits_per_s / p.commits_per_s))
    };
    for &t in &cfg.threads {
        let Some(a) = run.median(t, &backends::AGENTWAL) else {
            continue;
        };
        let p99s: Vec<f64> = run.rounds[&(t, backends::AGENTWAL.name())]
            .iter()
            .map(|m| m.p99_ms)
            .collect();
        let (lo, hi) = p99s.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &p| {
            (lo.min(p), hi.max(p))
        });
        let _ = writeln!(
            w,
            "| {t} | {} | {} | {} | {:.2}× ({:.2}×) | {} | {} ({}–{}) |",
            fmt_rate(a.commits_per_s),
            vs(t, &a, &backends::OKAYWAL),
            vs(t, &a, &backends::FSYNC_FLOOR_GROUP),
            a.disk_bytes / a.delta_postcard,
            a.disk_allocated / a.delta_postcard,
            opt(a.log_bytes, |l| format!("{:.2}×", a.wchar / l)),
            fmt_ms(a.p99_ms),
            fmt_ms(lo),
            fmt_ms(hi)
        );
    }
}

fn targets_table(w: &mut String, cfg: &Config, run: &Run) {
    let _ = writeln!(w, "\n## Targets\n");
    let _ = writeln!(
        w,
        "A commits/s target is judged on the ratio of the two medians over rounds; the \
         ratios within each round (the backends ran back to back) are shown beside it. \
         v2: the targets for format v2; a missed one fails nothing.\n"
    );
    let _ = writeln!(w, "| set | target | measured | met |");
    let _ = writeln!(w, "|---|---|---|---|");
    for t in targets(cfg, run) {
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} |",
            t.set,
            t.what,
            t.measured,
            match t.met {
                Some(true) => "met",
                Some(false) => "**missed**",
                None => "not judged",
            }
        );
    }
    let _ = writeln!(w);
}

fn large_store(w: &mut String, l: &crate::large_store::LargeStore) {
    let _ = writeln!(w, "## Recovery of a large store\n");
    let _ = writeln!(
        w,
        "{} in {} segment files ({} of records, {} records, {} tasks built from the workload's steps). \
         Page cache warm; medians of 3. Reading and crc32-ing every file: {} ({:.2} GiB/s). \
         `Store::open` (replay, index rebuild): {} ({:.2} GiB/s of files, {:.2}× the read+crc32 time).\n",
        fmt_bytes(l.file_bytes as f64),
        l.segments,
        fmt_bytes(l.record_bytes as f64),
        l.records,
        l.tasks,
        fmt_ms(l.read_crc.as_secs_f64() * 1e3),
        l.file_bytes as f64 / (1u64 << 30) as f64 / l.read_crc.as_secs_f64(),
        fmt_ms(l.reopen.as_secs_f64() * 1e3),
        l.file_bytes as f64 / (1u64 << 30) as f64 / l.reopen.as_secs_f64(),
        l.reopen.as_secs_f64() / l.read_crc.as_secs_f64(),
    );
    let gib = |d: std::time::Duration| l.file_bytes as f64 / (1u64 << 30) as f64 / d.as_secs_f64();
    let _ = writeln!(
        w,
        "Built with compression: {}. With the store's files dropped from the page cache \
         before each (`posix_fadvise(POSIX_FADV_DONTNEED)`, medians of 3): read+crc32 {} \
         ({:.2} GiB/s), `Store::open` {} ({:.2} GiB/s, {:.2}× the read+crc32 time).\n",
        l.compression,
        fmt_ms(l.read_crc_cold.as_secs_f64() * 1e3),
        gib(l.read_crc_cold),
        fmt_ms(l.reopen_cold.as_secs_f64() * 1e3),
        gib(l.reopen_cold),
        l.reopen_cold.as_secs_f64() / l.read_crc_cold.as_secs_f64(),
    );
}

fn index_memory(w: &mut String, run: &Run) {
    let _ = writeln!(w, "## Index memory\n");
    let _ = writeln!(
        w,
        "A child process opens a store and reads its own RSS (/proc/self/status) before and after \
         `Store::open`, and again after `malloc_trim(0)` (free memory the allocator kept from \
         recovery's temporary buffers is handed back; what remains is the index). The target is \
         judged on the plain figure.\n"
    );
    let _ = writeln!(
        w,
        "| tasks | checkpoints per task | RssAnon growth | per task | per task after malloc_trim | RssFile growth | open time |"
    );
    let _ = writeln!(w, "|---:|---:|---:|---:|---:|---:|---:|");
    for i in &run.index {
        let _ = writeln!(
            w,
            "| {} | {} | {} | {:.0} B | {:.0} B | {} | {} |",
            i.tasks,
            i.checkpoints_per_task,
            fmt_bytes(i.anon_bytes as f64),
            i.anon_bytes as f64 / i.tasks as f64,
            i.anon_trimmed_bytes as f64 / i.tasks as f64,
            fmt_bytes(i.file_bytes as f64),
            fmt_ms(i.open.as_secs_f64() * 1e3)
        );
    }
    let _ = writeln!(w);
}

fn details(w: &mut String, cfg: &Config, run: &Run) {
    let _ = writeln!(w, "## Details\n");
    let _ = writeln!(
        w,
        "Disk probe: p50 of 16 × (4 KiB `pwrite` + `fdatasync`) into a written file just before \
         each run; other processes' I/O on the shared disk shows up here as a higher figure{}. \
         CPU in commit: CPU time (user + system, `CLOCK_THREAD_CPUTIME_ID`) the committing \
         threads spent inside their commit calls, per commit: the store's own work plus the \
         write and fdatasync system calls of the commits that led a batch; background threads \
         (okaywal's, agentwal-periodic's flusher) are not counted here (process CPU / commit, \
         above, counts them). Page faults: minor faults of the whole process from the \
         common start to the last commit's end, per commit (first touches of memory: a fresh process has more of them than one whose heap \
         earlier runs grew).\n",
        if cfg.calm_us > 0.0 {
            format!(
                " (runs waited up to 30 s for it to fall to {} or less: AGENTWAL_BENCH_CALM_US={})",
                fmt_ms(cfg.calm_us / 1e3),
                cfg.calm_us
            )
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        w,
        "| backend | T | commits/s per round | disk probe per round | max commit | CPU in commit | page faults / commit | other |"
    );
    let _ = writeln!(w, "|---|---:|---|---|---:|---:|---:|---|");
    for &t in &cfg.threads {
        for &b in &cfg.backends {
            let Some(rounds) = run.rounds.get(&(t, b.name())) else {
                continue;
            };
            let m = Measurement::median_of(rounds);
            let per_round: Vec<String> = rounds.iter().map(|r| fmt_rate(r.commits_per_s)).collect();
            let probes: Vec<String> = rounds.iter().map(|r| fmt_ms(r.probe_us / 1e3)).collect();
            let mut other = Vec::new();
            if let (Some(log), Some(fsyncs), Some(batch)) = (m.log_bytes, m.fsyncs, m.mean_batch) {
                other.push(format!(
                    "log bytes {:.2}× delta, {fsyncs:.0} fdatasyncs, {batch:.1} records/batch",
                    log / m.delta_postcard
                ));
            }
            if let Some(zeros) = m.zero_bytes {
                other.push(format!("{} of zeros written ahead", fmt_bytes(zeros)));
            }
            if let Some(read) = m.read_bytes {
                other.push(format!(
                    "{} read from storage in the commits",
                    fmt_bytes(read)
                ));
            }
            if let (Some(free), Some(written)) = (m.free_files, m.recycled_written_bytes) {
                other.push(format!(
                    "active segment recycled, {} of it written extents at the start, \
                     {free:.0} retired files waiting (in \"on disk\")",
                    fmt_bytes(written)
                ));
            }
            if let (Some(log), Some(dev), Some(ms)) =
                (m.prep_log_bytes, m.prep_device_bytes, m.prep_ms)
            {
                other.push(format!(
                    "prepared (not counted): {} appended, {} to the device, {}",
                    fmt_bytes(log),
                    fmt_bytes(dev),
                    fmt_ms(ms)
                ));
            }
            if let Some(busy) = m.busy_retries {
                other.push(format!("{busy:.0} SQLITE_BUSY retried"));
            }
            let _ = writeln!(
                w,
                "| {} | {t} | {} | {} | {} | {:.1} µs | {:.1} | {} |",
                b.name(),
                per_round.join(" / "),
                probes.join(" / "),
                fmt_ms(m.max_ms),
                m.step_cpu_us,
                m.faults_per_commit,
                other.join("; ")
            );
        }
    }
}
