//! `agentwal dump`: every record the log holds, salvaging past damage, for forensics;
//! corrupt ranges are listed and make the exit code 1.

use std::path::Path;

use agentwal::RecoveryMode;
use agentwal::log::{Log, LogOptions};
use serde_json::{Value as J, json};

use crate::open::reopening;
use crate::progress::bar;
use crate::render::print_json;
use crate::{Failure, Outcome};

/// Runs `agentwal dump`.
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
                let body = d.body.as_ref().map(|b| {
                    json!({"codec": b.codec, "stored_bytes": b.stored_bytes, "bytes": b.bytes,
                           "error": b.error})
                });
                json!({"lsn": lsn, "kind": d.kind, "task": d.task, "seq": d.seq, "length": len,
                       "segment": agentwal::log::segment_file_name(*seg), "offset": off, "detail": d.detail,
                       "body": body})
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
