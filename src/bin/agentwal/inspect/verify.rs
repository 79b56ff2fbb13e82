//! `agentwal verify`: checks every segment's checksums, then every task's records, and
//! maps what it finds to the exit code (1 damage, 2 anything else).

use std::collections::BTreeMap;
use std::path::Path;

use agentwal::log::{Log, LogOptions};
use agentwal::{AgentState, BodyCheck, BodyLocation, Error, Store, VerifyReport};
use serde_json::{Value as J, json};

use super::NOT_AGENT_STATE;
#[cfg(feature = "postgres")]
use crate::open::Opened;
use crate::open::{Target, reopening};
use crate::progress::spinner;
use crate::render::{self, print_json};
use crate::{Failure, Outcome};

#[derive(Default)]
struct SegmentSummary {
    records: u64,
    bytes: u64,
    first_lsn: u64,
    last_lsn: u64,
    /// The header's format version and flags, when it decodes.
    format: Option<(u32, bool, bool)>,
}

impl SegmentSummary {
    /// "v2", "v2 compacted", "v1 recycled"...: what the header says.
    fn format_label(&self) -> String {
        match self.format {
            None => "?".into(),
            Some((version, compacted, recycled)) => {
                let mut label = format!("v{version}");
                if compacted {
                    label.push_str(" compacted");
                }
                if recycled {
                    label.push_str(" recycled");
                }
                label
            }
        }
    }
}

/// The format version and flags in the header of the segment file at `path`.
fn header_format(path: &Path) -> Option<(u32, bool, bool)> {
    use std::io::Read;
    // (Up to the longest header: a v1 or v2 one is shorter, and so may its file be.)
    let mut head = Vec::with_capacity(agentwal::log::SEGMENT_HEADER_BYTES);
    std::fs::File::open(path)
        .ok()?
        .take(agentwal::log::SEGMENT_HEADER_BYTES as u64)
        .read_to_end(&mut head)
        .ok()?;
    let h = agentwal::log::SegmentHeader::decode(&head, path).ok()?;
    Some((h.version(), h.is_compacted(), h.is_recycled()))
}

/// The segments by id.
type Segments = BTreeMap<u64, SegmentSummary>;

/// An error's message, and the segment and offset it points at if it names a record.
type ErrorReport = (String, (Option<String>, Option<u64>));

/// Runs `agentwal verify`.
pub fn verify(target: &Target, json: bool) -> Outcome {
    match target {
        Target::Dir(dir) => verify_dir(dir, json),
        #[cfg(feature = "postgres")]
        Target::Pg(..) => verify_pg(target, json),
        #[cfg(not(feature = "postgres"))]
        Target::Pg(url, _) => Err(crate::open::no_postgres(url)),
    }
}

/// `verify` of a PostgreSQL store: every task's rows (consecutive seqs from a fold base,
/// counters, origins, times), every body tried as [`AgentState`], the journal. Damage
/// (exit 1) is every problem found, listed; a failure to read is exit 2.
#[cfg(feature = "postgres")]
fn verify_pg(target: &Target, json: bool) -> Outcome {
    let Opened::Pg(store, name) = Opened::open(target)? else {
        return Err(Failure::Usage("not a PostgreSQL store".into()));
    };
    let spin = spinner("checking rows");
    let checked = store.verify_with(BodyCheck::Try);
    spin.finish_and_clear();
    let (report, error) = match checked {
        Ok(r) => (Some(r), None),
        Err(e) => (None, Some(e)),
    };
    let problems = report.as_ref().map_or(&[][..], |r| &r.problems[..]);
    let failure = match (&error, problems.first()) {
        (Some(e), _) => Some(Failure::Usage(e.to_string())),
        (None, Some(first)) => Some(Failure::Problem(format!(
            "{} problem(s) in {name}; the first: {first}",
            problems.len()
        ))),
        (None, None) => None,
    };
    let corruption = matches!(failure, Some(Failure::Problem(_)));
    let message = match &failure {
        Some(Failure::Problem(m) | Failure::Usage(m)) => Some(m.clone()),
        None => None,
    };
    let checked = report.as_ref().map(|r| &r.checked);
    if json {
        let mut out = report_json(
            &Segments::new(),
            checked,
            message.map(|m| (m, (None, None))),
            corruption,
        );
        out["problems"] = json!(problems);
        print_json(&out);
    } else {
        println!("PostgreSQL store: {name}");
        print_report(&Segments::new(), checked, corruption);
        for p in problems {
            println!("PROBLEM {p}");
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

/// `verify` of a store directory.
fn verify_dir(dir: &Path, json: bool) -> Outcome {
    let (segments, log_error) = scan_segments(dir)?;
    // Bodies are only tried as AgentState: a store of another state type verifies all the
    // same, its bodies listed as not decoded.
    let (report, error) = match log_error {
        Some(e) => (None, Some(e)),
        None => check_records(dir),
    };
    let error_report = error.as_ref().map(|e| (e.to_string(), location(e)));
    // The one mapping of errors to exit codes: 1 for damage, 2 for I/O and the like (a
    // segment deleted by a concurrent compaction is not corruption).
    let failure = error.map(Failure::from);
    let corruption = matches!(failure, Some(Failure::Problem(_)));
    if json {
        print_report_json(&segments, report.as_ref(), error_report, corruption);
    } else {
        print_report(&segments, report.as_ref(), corruption);
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

/// Reads every segment, summing its records; the checksum damage that stopped the scan,
/// if any.
fn scan_segments(dir: &Path) -> Result<(Segments, Option<Error>), Failure> {
    let spin = spinner("scanning segments");
    let mut segments = Segments::new();
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
                segments.entry(id).or_default().format =
                    header_format(&agentwal::log::segment_path(dir, id));
            }
            None
        }
        Err(e @ (Error::Corruption { .. } | Error::Decode { .. })) => Some(e),
        Err(e) => return Err(e.into()),
    };
    Ok((segments, log_error))
}

/// Opens the store and checks every task's records, bodies tried as [`AgentState`].
fn check_records(dir: &Path) -> (Option<VerifyReport>, Option<Error>) {
    let spin = spinner("checking records");
    let checked = reopening(|| Store::<AgentState>::open_read_only(dir))
        .and_then(|s| s.verify_with(BodyCheck::Try));
    spin.finish_and_clear();
    match checked {
        Ok(r) => (Some(r), None),
        Err(e) => (None, Some(e)),
    }
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
            location: BodyLocation::Log { segment, offset },
            ..
        } => (Some(segment.display().to_string()), Some(*offset)),
        _ => (None, None),
    }
}

fn print_report_json(
    segments: &Segments,
    report: Option<&VerifyReport>,
    error: Option<ErrorReport>,
    corruption: bool,
) {
    print_json(&report_json(segments, report, error, corruption));
}

/// The JSON of a verify, on either backend.
fn report_json(
    segments: &Segments,
    report: Option<&VerifyReport>,
    error: Option<ErrorReport>,
    corruption: bool,
) -> J {
    let segs: Vec<J> = segments
        .iter()
        .map(|(id, s)| {
            json!({"segment": agentwal::log::segment_file_name(*id), "records": s.records,
                   "bytes": s.bytes, "first_lsn": s.first_lsn, "last_lsn": s.last_lsn,
                   "format": s.format.map(|f| f.0), "compacted": s.format.map(|f| f.1),
                   "recycled": s.format.map(|f| f.2)})
        })
        .collect();
    let undecoded: Vec<J> = report
        .iter()
        .flat_map(|r| &r.bodies_not_decoded)
        .map(|u| json!({"schema_version": u.schema_version, "count": u.count, "reason": u.reason}))
        .collect();
    json!({
        "ok": error.is_none(), "segments": segs,
        "tasks": report.map(|r| r.tasks), "checkpoints": report.map(|r| r.checkpoints),
        "calls": report.map(|r| r.calls),
        "bodies_decoded": report.map(|r| r.bodies_decoded),
        "bodies_compressed": report.map(|r| r.bodies_compressed),
        "body_bytes_stored": report.map(|r| r.body_bytes_stored),
        "body_bytes": report.map(|r| r.body_bytes),
        "bodies_not_decoded": report.map(|_| undecoded),
        "error": error.map(|(e, (segment, offset))| json!({
            "message": e, "corruption": corruption, "segment": segment, "offset": offset,
        })),
    })
}

fn print_report(segments: &Segments, report: Option<&VerifyReport>, corruption: bool) {
    // A PostgreSQL store has no segments (a local one always has one at least).
    if !segments.is_empty() {
        print_segments(segments, corruption);
    }
    print_checked(report);
}

fn print_segments(segments: &Segments, corruption: bool) {
    println!(
        "{:<26} {:<14} {:>9} {:>10} {:>21} STATUS",
        "SEGMENT", "FORMAT", "RECORDS", "BYTES", "LSN"
    );
    for (id, s) in segments {
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
            "{:<26} {:<14} {:>9} {:>10} {:>21} {status}",
            agentwal::log::segment_file_name(*id),
            s.format_label(),
            s.records,
            render::size(s.bytes),
            lsns
        );
    }
}

fn print_checked(report: Option<&VerifyReport>) {
    if let Some(r) = report {
        println!(
            "{} task(s), {} checkpoint record(s), {} call(s) checked; {} checkpoint {} decoded as AgentState",
            r.tasks,
            r.checkpoints,
            r.calls,
            r.bodies_decoded,
            bodies(r.bodies_decoded)
        );
        if r.bodies_compressed > 0 {
            println!(
                "{} of {} checkpoint {} stored compressed (zstd); all bodies: {} stored, {} uncompressed",
                r.bodies_compressed,
                r.checkpoints,
                bodies(r.checkpoints),
                render::size(r.body_bytes_stored),
                render::size(r.body_bytes)
            );
        }
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

fn bodies(n: u64) -> &'static str {
    if n == 1 { "body" } else { "bodies" }
}
