//! The read commands (tasks, history, show, calls, verify, dump, stats) and compact.

use std::collections::BTreeMap;
use std::path::Path;

use agentwal::log::{Log, LogOptions};
use agentwal::{AgentState, BodyCheck, Error, Options, RecoveryMode, Store};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value as J, json};

use crate::Failure;
use crate::render::{self, print_json};

type Outcome = Result<(), Failure>;

/// Read-only opens tried when a store keeps changing under the scan (a writer compacting
/// hard): each open already rescans several times before it reports `StoreChanged`.
const OPEN_ATTEMPTS: usize = 5;

/// Runs a read-only `open` again while it reports that the store changed under it, so a
/// read command beside a live, compacting writer answers from a consistent view.
fn reopening<T>(mut open: impl FnMut() -> agentwal::Result<T>) -> agentwal::Result<T> {
    let mut attempt = 1;
    loop {
        match open() {
            Err(Error::StoreChanged { .. }) if attempt < OPEN_ATTEMPTS => attempt += 1,
            other => return other,
        }
    }
}

fn open(dir: &Path) -> Result<Store, Failure> {
    Ok(reopening(|| Store::<AgentState>::open_read_only(dir))?)
}

fn spinner(msg: &'static str) -> ProgressBar {
    // indicatif draws nothing when stderr is not a terminal (piped output stays clean).
    let bar = ProgressBar::new_spinner().with_message(msg);
    bar.enable_steady_tick(std::time::Duration::from_millis(100));
    bar
}

fn bar(len: u64, msg: &'static str) -> ProgressBar {
    let bar = ProgressBar::new(len).with_message(msg);
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len}") {
        bar.set_style(style);
    }
    bar
}

fn unknown_task(store: &Store, task: &str) -> Outcome {
    if store.tasks()?.iter().any(|t| t == task) {
        Ok(())
    } else {
        Err(Failure::Usage(format!(
            "no task {task:?} in {}",
            store.dir().display()
        )))
    }
}

pub fn tasks(dir: &Path, json: bool) -> Outcome {
    let store = open(dir)?;
    let infos = store.task_infos()?;
    if json {
        let tasks: Vec<J> = infos
            .iter()
            .map(|t| {
                json!({
                    "task": t.task, "latest_seq": t.latest_seq, "last_commit_ms": t.last_commit_ms,
                    "last_commit": render::time(t.last_commit_ms), "checkpoints": t.checkpoints,
                    "bytes": t.bytes, "calls": t.calls,
                    "forked_from": t.forked_from.as_ref().map(|(task, seq)| json!({"task": task, "seq": seq})),
                })
            })
            .collect();
        print_json(&json!({ "tasks": tasks }));
        return Ok(());
    }
    println!(
        "{:<32} {:>8} {:<25} {:>10} {:>6}",
        "TASK", "SEQ", "LAST COMMIT", "BYTES", "CALLS"
    );
    for t in &infos {
        println!(
            "{:<32} {:>8} {:<25} {:>10} {:>6}",
            t.task,
            t.latest_seq,
            render::time(t.last_commit_ms),
            render::size(t.bytes),
            t.calls
        );
    }
    println!("{} task(s)", infos.len());
    Ok(())
}

pub fn history(dir: &Path, task: &str, json: bool) -> Outcome {
    let store = open(dir)?;
    unknown_task(&store, task)?;
    let cps = store.list_checkpoints(task)?;
    if json {
        let list: Vec<J> = cps
            .iter()
            .map(|c| {
                json!({
                    "seq": c.seq, "created_at_ms": c.created_at_ms, "created_at": render::time(c.created_at_ms),
                    "bytes": c.bytes, "kind": if c.snapshot { "snapshot" } else { "delta" },
                    "forked_from": c.forked_from.as_ref().map(|(t, s)| json!({"task": t, "seq": s})),
                })
            })
            .collect();
        print_json(&json!({ "task": task, "checkpoints": list }));
        return Ok(());
    }
    println!(
        "{:>8} {:<25} {:>10} {:<9} ORIGIN",
        "SEQ", "TIME", "SIZE", "KIND"
    );
    for c in &cps {
        let origin = c
            .forked_from
            .as_ref()
            .map(|(t, s)| format!("forked from {t}@{s}"))
            .unwrap_or_default();
        let kind = if c.snapshot { "snapshot" } else { "delta" };
        println!(
            "{:>8} {:<25} {:>10} {:<9} {origin}",
            c.seq,
            render::time(c.created_at_ms),
            render::size(c.bytes),
            kind
        );
    }
    Ok(())
}

pub fn show(dir: &Path, task: &str, seq: Option<u64>, json: bool) -> Outcome {
    let store = open(dir)?;
    unknown_task(&store, task)?;
    let loaded = match seq {
        Some(seq) => store.load(task, seq),
        None => store.load_latest(task),
    };
    // A body that does not decode as AgentState is most likely another state type's: what
    // the index knows is still worth showing, and nothing is wrong with the store.
    let (cp, undecodable) = match loaded {
        Ok(cp) => (cp, None),
        Err(e @ Error::BodyDecode { schema_version, .. }) => {
            (None, Some((schema_version, e.to_string())))
        }
        Err(e @ Error::SchemaMismatch { found, .. }) => (None, Some((found, e.to_string()))),
        Err(e) => return Err(e.into()),
    };
    let retained = store.list_checkpoints(task)?;
    let info = match seq.or(cp.as_ref().map(|c| c.seq)) {
        Some(s) => retained.iter().find(|c| c.seq == s),
        None => retained.last(),
    };
    let Some(info) = info.filter(|_| cp.is_some() || undecodable.is_some()) else {
        return Err(Failure::Usage(format!(
            "checkpoint {} of task {task:?} is not retained",
            seq.map_or("latest".into(), |s| s.to_string())
        )));
    };
    let kind = if info.snapshot { "snapshot" } else { "delta" };
    let Some(cp) = cp else {
        let (version, why) = undecodable.unwrap_or_default();
        if json {
            print_json(&json!({
                "task": task, "seq": info.seq, "created_at_ms": info.created_at_ms,
                "bytes": info.bytes, "kind": kind, "schema_version": version,
                "state": null, "state_error": format!("{NOT_AGENT_STATE}: {why}"),
            }));
            return Ok(());
        }
        println!(
            "task {task} @ seq {} ({}), {kind} record of {}",
            info.seq,
            render::time(info.created_at_ms),
            render::size(info.bytes)
        );
        println!("state not decoded (schema version {version}): {NOT_AGENT_STATE}");
        println!("  {why}");
        return Ok(());
    };
    if json {
        print_json(&json!({
            "task": cp.task, "seq": cp.seq, "created_at_ms": cp.created_at_ms,
            "bytes": info.bytes, "kind": kind, "state": render::state(&cp.state),
        }));
        return Ok(());
    }
    println!(
        "task {} @ seq {} ({})",
        cp.task,
        cp.seq,
        render::time(cp.created_at_ms)
    );
    println!("messages ({}):", cp.state.messages.len());
    for (i, m) in cp.state.messages.iter().enumerate() {
        let role = format!("{:?}", m.role).to_lowercase();
        let reply = m
            .tool_call_id
            .as_ref()
            .map(|id| format!(" ({id})"))
            .unwrap_or_default();
        println!("  [{}] {role}{reply}: {}", i + 1, m.content);
        for c in &m.tool_calls {
            println!("      -> {} {}({})", c.id, c.name, render::value(&c.args));
        }
    }
    print_map("vars", &cp.state.vars);
    print_map("metadata", &cp.state.metadata);
    Ok(())
}

/// Why a body that does not decode is not reported as damage.
const NOT_AGENT_STATE: &str = "not AgentState, the state type this CLI knows (the store was \
     most likely written with another State type)";

fn print_map(name: &str, map: &BTreeMap<String, agentwal::Value>) {
    if map.is_empty() {
        return;
    }
    println!("{name}:");
    for (k, v) in map {
        println!("  {k} = {}", render::value(v));
    }
}

pub fn calls(dir: &Path, task: &str, json: bool) -> Outcome {
    let store = open(dir)?;
    unknown_task(&store, task)?;
    let calls = store.calls(task)?;
    if json {
        let list: Vec<J> = calls
            .iter()
            .map(|c| {
                json!({
                    "call_id": c.call_id, "tool": c.tool, "args": render::bytes_text(&c.args),
                    "status": if c.result.is_some() { "finished" } else { "pending" },
                    "result": c.result.as_deref().map(render::bytes_text), "begun_at_ms": c.begun_at_ms,
                })
            })
            .collect();
        print_json(&json!({ "task": task, "calls": list }));
        return Ok(());
    }
    println!("{:<24} {:<16} {:<9} RESULT", "CALL", "TOOL", "STATUS");
    for c in &calls {
        let (status, result) = match &c.result {
            Some(r) => ("finished", render::bytes_text(r)),
            None => ("PENDING", "(side effects uncertain)".into()),
        };
        println!("{:<24} {:<16} {:<9} {result}", c.call_id, c.tool, status);
    }
    Ok(())
}

#[derive(Default)]
struct SegmentSummary {
    records: u64,
    bytes: u64,
    first_lsn: u64,
    last_lsn: u64,
}

/// Where an error points, if it names a record.
fn location(e: &Error) -> (Option<String>, Option<u64>) {
    match e {
        Error::Corruption {
            segment, offset, ..
        }
        | Error::Decode {
            segment, offset, ..
        }
        | Error::BodyDecode {
            segment, offset, ..
        } => (Some(segment.display().to_string()), Some(*offset)),
        _ => (None, None),
    }
}

pub fn verify(dir: &Path, json: bool) -> Outcome {
    let spin = spinner("scanning segments");
    let mut segments: BTreeMap<u64, SegmentSummary> = BTreeMap::new();
    let opened = reopening(|| {
        Log::open_read_only(dir, LogOptions::default(), |rec| {
            let s = segments.entry(rec.segment_id).or_default();
            if s.records == 0 {
                s.first_lsn = rec.lsn;
            }
            s.records += 1;
            s.bytes += u64::from(rec.bytes());
            s.last_lsn = rec.lsn;
            Ok(())
        })
    });
    spin.finish_and_clear();
    let log_error = match opened {
        Ok(log) => {
            for id in log.segment_ids()? {
                segments.entry(id).or_default();
            }
            None
        }
        Err(e @ (Error::Corruption { .. } | Error::Decode { .. })) => Some(e),
        Err(e) => return Err(e.into()),
    };
    // Bodies are only tried as AgentState: a store of another state type verifies all the
    // same, its bodies listed as not decoded.
    let (report, error) = match log_error {
        Some(e) => (None, Some(e)),
        None => {
            let spin = spinner("checking records");
            let checked = reopening(|| Store::<AgentState>::open_read_only(dir))
                .and_then(|s| s.verify_with(BodyCheck::Try));
            spin.finish_and_clear();
            match checked {
                Ok(r) => (Some(r), None),
                Err(e) => (None, Some(e)),
            }
        }
    };
    let (segment, offset) = error.as_ref().map_or((None, None), location);
    let message = error.as_ref().map(|e| e.to_string());
    // The one mapping of errors to exit codes: 1 for damage, 2 for I/O and the like (a
    // segment deleted by a concurrent compaction is not corruption).
    let failure = error.map(Failure::from);
    let corruption = matches!(failure, Some(Failure::Problem(_)));
    if json {
        let segs: Vec<J> = segments
            .iter()
            .map(|(id, s)| {
                json!({"segment": agentwal::log::segment_file_name(*id), "records": s.records,
                       "bytes": s.bytes, "first_lsn": s.first_lsn, "last_lsn": s.last_lsn})
            })
            .collect();
        let undecoded: Vec<J> = report
            .iter()
            .flat_map(|r| &r.bodies_not_decoded)
            .map(|u| json!({"schema_version": u.schema_version, "count": u.count, "reason": u.reason}))
            .collect();
        print_json(&json!({
            "ok": message.is_none(), "segments": segs,
            "tasks": report.as_ref().map(|r| r.tasks), "checkpoints": report.as_ref().map(|r| r.checkpoints),
            "calls": report.as_ref().map(|r| r.calls),
            "bodies_decoded": report.as_ref().map(|r| r.bodies_decoded),
            "bodies_not_decoded": report.as_ref().map(|_| undecoded),
            "error": message.as_ref().map(|e| json!({
                "message": e, "corruption": corruption, "segment": segment, "offset": offset,
            })),
        }));
    } else {
        println!(
            "{:<26} {:>9} {:>10} {:>21} STATUS",
            "SEGMENT", "RECORDS", "BYTES", "LSN"
        );
        for (id, s) in &segments {
            let lsns = if s.records == 0 {
                "-".to_string()
            } else {
                format!("{}..{}", s.first_lsn, s.last_lsn)
            };
            let status = if s.records == 0 && corruption {
                "?"
            } else {
                "ok"
            };
            println!(
                "{:<26} {:>9} {:>10} {:>21} {status}",
                agentwal::log::segment_file_name(*id),
                s.records,
                render::size(s.bytes),
                lsns
            );
        }
        if let Some(r) = &report {
            println!(
                "{} task(s), {} checkpoint record(s), {} call(s) checked; {} checkpoint {} decoded as AgentState",
                r.tasks,
                r.checkpoints,
                r.calls,
                r.bodies_decoded,
                bodies(r.bodies_decoded)
            );
            for u in &r.bodies_not_decoded {
                println!(
                    "{} checkpoint {} not decoded (schema version {}): {NOT_AGENT_STATE}; \
                     their records check out (checksum, kind, task, seq)",
                    u.count,
                    bodies(u.count),
                    u.schema_version,
                );
                println!("  first: {}", u.reason);
            }
        }
    }
    match failure {
        Some(f) => Err(f),
        None => {
            if !json {
                println!("ok");
            }
            Ok(())
        }
    }
}

fn bodies(n: u64) -> &'static str {
    if n == 1 { "body" } else { "bodies" }
}

pub fn dump(dir: &Path, only_segment: Option<u64>, json: bool) -> Outcome {
    let options = LogOptions {
        recovery: RecoveryMode::Salvage,
        ..LogOptions::default()
    };
    let mut rows = Vec::new();
    let log = reopening(|| {
        Log::open_read_only(dir, options, |rec| {
            if only_segment.is_none_or(|s| s == rec.segment_id) {
                let d = agentwal::describe_record(&rec);
                rows.push((rec.lsn, rec.segment_id, rec.offset, rec.payload.len(), d));
            }
            Ok(())
        })
    })?;
    let corrupt = &log.recovery().skipped;
    if json {
        let records: Vec<J> = rows
            .iter()
            .map(|(lsn, seg, off, len, d)| {
                json!({"lsn": lsn, "kind": d.kind, "task": d.task, "seq": d.seq, "length": len,
                       "segment": agentwal::log::segment_file_name(*seg), "offset": off, "detail": d.detail})
            })
            .collect();
        let bad: Vec<J> = corrupt
            .iter()
            .map(|r| json!({"segment": r.segment.display().to_string(), "offset": r.offset, "bytes": r.bytes, "reason": r.reason.to_string()}))
            .collect();
        print_json(
            &json!({"records": records, "corrupt": bad, "torn_bytes": log.recovery().torn_bytes}),
        );
    } else {
        let bar = bar(rows.len() as u64, "printing");
        println!(
            "{:>10} {:<11} {:<24} {:>7} {:>8} {:>6}:{:<8} DETAIL",
            "LSN", "KIND", "TASK", "SEQ", "LENGTH", "SEG", "OFFSET"
        );
        for (lsn, seg, off, len, d) in &rows {
            let seq = d.seq.map_or("-".into(), |s| s.to_string());
            let task = d.task.as_deref().unwrap_or("-");
            println!(
                "{lsn:>10} {:<11} {task:<24} {seq:>7} {len:>8} {seg:>6}:{off:<8} {}",
                d.kind, d.detail
            );
            bar.inc(1);
        }
        bar.finish_and_clear();
        for r in corrupt {
            println!(
                "CORRUPT {}:{} ({} bytes): {}",
                r.segment.display(),
                r.offset,
                r.bytes,
                r.reason
            );
        }
    }
    if corrupt.is_empty() {
        Ok(())
    } else {
        Err(Failure::Problem(format!(
            "{} corrupt range(s) skipped",
            corrupt.len()
        )))
    }
}

pub fn stats(dir: &Path, json: bool) -> Outcome {
    let store = open(dir)?;
    let s = store.stats();
    let mut infos = store.task_infos()?;
    infos.sort_by_key(|t| std::cmp::Reverse(t.bytes));
    let snapshots: u64 = infos.iter().map(|t| t.snapshots).sum();
    let deltas = s.checkpoints.saturating_sub(snapshots);
    let biggest: Vec<_> = infos.iter().take(5).collect();
    if json {
        print_json(&json!({
            "segments": s.segments, "disk_bytes": s.disk_bytes, "live_bytes": s.live_bytes, "dead_bytes": s.dead_bytes,
            "tasks": s.tasks, "checkpoints": s.checkpoints, "snapshots": snapshots, "deltas": deltas,
            "biggest_tasks": biggest.iter().map(|t| json!({"task": t.task, "bytes": t.bytes, "latest_seq": t.latest_seq})).collect::<Vec<_>>(),
        }));
        return Ok(());
    }
    println!("segments     {}", s.segments);
    println!("disk         {}", render::size(s.disk_bytes));
    println!("live         {}", render::size(s.live_bytes));
    println!("dead         {}", render::size(s.dead_bytes));
    println!("tasks        {}", s.tasks);
    println!(
        "checkpoints  {} ({snapshots} snapshot records, {deltas} delta records)",
        s.checkpoints
    );
    println!("biggest tasks:");
    for t in biggest {
        println!(
            "  {:<32} {:>10}  seq {}",
            t.task,
            render::size(t.bytes),
            t.latest_seq
        );
    }
    Ok(())
}

pub fn compact(
    dir: &Path,
    keep_checkpoints: Option<u32>,
    max_age_secs: Option<u64>,
    json: bool,
) -> Outcome {
    let options = Options {
        auto_compact: false,
        keep_checkpoints,
        max_age: max_age_secs.map(std::time::Duration::from_secs),
        ..Options::default()
    };
    // Refuse anything but an existing store: compact must never create one.
    drop(open(dir)?);
    let store = match Store::<AgentState>::open_with(dir, options) {
        Err(Error::Locked { dir }) => {
            return Err(Failure::Usage(format!(
                "{} is in use by a running writer (it holds the lock); its background compaction \
                 runs on its own, or stop it and run compact again",
                dir.display()
            )));
        }
        other => other?,
    };
    let spin = spinner("compacting");
    let report = store.compact()?;
    spin.finish_and_clear();
    if json {
        print_json(&json!({
            "segments_deleted": report.segments_deleted, "records_rewritten": report.records_rewritten,
            "bytes_reclaimed": report.bytes_reclaimed, "elapsed_ms": report.elapsed_ms,
        }));
    } else {
        println!(
            "compacted: {} segment(s) deleted, {} record(s) rewritten, {} reclaimed in {} ms",
            report.segments_deleted,
            report.records_rewritten,
            render::size(report.bytes_reclaimed),
            report.elapsed_ms
        );
    }
    Ok(())
}
