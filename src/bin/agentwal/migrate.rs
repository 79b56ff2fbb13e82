//! `agentwal migrate DIR URL`: copies a local store into PostgreSQL, one transaction per
//! task, then checks the copy task by task against the local store (docs/postgres.md §7).
//! Safe to run again after an interruption: a task is wholly copied or not at all, and one
//! already there that reads the same as the local one is skipped.

use std::path::Path;

use crate::open::{PgArgs, is_url};
use crate::{Failure, Outcome};

/// Runs `agentwal migrate`.
pub fn migrate(
    dir: &Path,
    url: Option<String>,
    keep_checkpoints: Option<u32>,
    pg: PgArgs,
    json: bool,
) -> Outcome {
    if dir.to_str().is_some_and(is_url) {
        return Err(Failure::Usage(
            "migrate copies a local store into PostgreSQL: give the store directory first, \
             then the database (agentwal migrate DIR URL)"
                .into(),
        ));
    }
    let url = match (url, pg.pg.clone()) {
        (Some(u), None) | (None, Some(u)) => u,
        (Some(_), Some(_)) => {
            return Err(Failure::Usage(
                "give the database once: as URL or as --pg URL".into(),
            ));
        }
        (None, None) => {
            return Err(Failure::Usage(
                "no database given: agentwal migrate DIR URL (a postgres:// URL or key=value words)"
                    .into(),
            ));
        }
    };
    run(dir, &url, keep_checkpoints, &pg, json)
}

#[cfg(not(feature = "postgres"))]
fn run(_: &Path, url: &str, _: Option<u32>, _: &PgArgs, _: bool) -> Outcome {
    Err(crate::open::no_postgres(url))
}

#[cfg(feature = "postgres")]
fn run(dir: &Path, url: &str, keep: Option<u32>, args: &PgArgs, json: bool) -> Outcome {
    use std::collections::BTreeSet;
    use std::time::Instant;

    use agentwal::postgres::{Imported, PgStore};
    use agentwal::{AgentState, Error, Options, Store};
    use serde_json::json;

    use crate::open::{pg_options, redact, reopening};
    use crate::progress::bar;
    use crate::render::print_json;

    let started = Instant::now();
    let options = Options {
        keep_checkpoints: keep,
        ..Options::default()
    };
    let local = reopening(|| Store::<AgentState>::open_read_only_with(dir, options))?;
    let pg_opts = pg_options(args);
    let target = format!("schema {:?} of {}", pg_opts.schema, redact(url));
    let pg = PgStore::<AgentState>::open(url, pg_opts)?;
    let tasks = local.tasks()?;
    let there: BTreeSet<String> = pg.tasks()?.into_iter().collect();

    // Tasks already in the database: the same as here (a run cut short, or run twice) are
    // skipped; any other is a conflict, and then nothing is written at all.
    let mut already = Vec::new();
    let mut conflicts = Vec::new();
    for task in tasks.iter().filter(|t| there.contains(*t)) {
        let diffs = pg.compare_task(&local, task)?;
        match diffs.is_empty() {
            true => already.push(task.clone()),
            false => conflicts.push((task.clone(), diffs)),
        }
    }
    if !conflicts.is_empty() {
        let list: Vec<String> = conflicts
            .iter()
            .map(|(t, d)| format!("{t:?} ({})", d.join("; ")))
            .collect();
        return Err(Failure::Usage(format!(
            "{} task(s) already exist in {target} and differ from the local ones, so nothing was \
             copied: {}. Delete them there (PgStore::delete_task) or migrate into another schema \
             (--schema NAME)",
            conflicts.len(),
            list.join(", ")
        )));
    }

    let to_copy: Vec<&String> = tasks.iter().filter(|t| !there.contains(*t)).collect();
    let progress = bar(to_copy.len() as u64, "copying");
    let (mut copied, mut empty, mut checkpoints, mut calls) = (0u64, 0u64, 0u64, 0u64);
    let mut snapshots_written = Vec::new();
    for task in &to_copy {
        match pg.import_task(&local, task) {
            Ok(Imported::Copied {
                checkpoints: n,
                calls: c,
                snapshot_at,
            }) => {
                copied += 1;
                checkpoints += n;
                calls += c;
                if let Some(seq) = snapshot_at {
                    snapshots_written.push((task.to_string(), seq));
                }
            }
            Ok(Imported::Empty) => empty += 1,
            Err(e) => {
                progress.finish_and_clear();
                let hint = match e {
                    Error::TaskExists { .. } => "another program created it meanwhile",
                    _ => {
                        "run migrate again to finish: tasks already copied are checked and skipped"
                    }
                };
                return Err(Failure::Usage(format!(
                    "copying task {task:?} into {target} failed after {copied} of {} task(s) were \
                     copied: {e} ({hint})",
                    to_copy.len()
                )));
            }
        }
        progress.inc(1);
    }
    progress.finish_and_clear();

    // The check: every task copied now reads the same there as here (those already there
    // were compared above, and found the same).
    let progress = bar(to_copy.len() as u64, "verifying");
    let mut mismatches = Vec::new();
    for task in &to_copy {
        let diffs = pg.compare_task(&local, task)?;
        if !diffs.is_empty() {
            mismatches.push((task.to_string(), diffs));
        }
        progress.inc(1);
    }
    progress.finish_and_clear();
    let elapsed_ms = started.elapsed().as_millis() as u64;

    if json {
        print_json(&json!({
            "tasks": tasks.len(), "copied": copied, "already_there": already.len(), "empty": empty,
            "checkpoints": checkpoints, "calls": calls,
            "snapshots_written": snapshots_written.iter().map(|(t, s)| json!({"task": t, "seq": s})).collect::<Vec<_>>(),
            "verified": mismatches.is_empty(),
            "mismatches": mismatches.iter().map(|(t, d)| json!({"task": t, "differences": d})).collect::<Vec<_>>(),
            "elapsed_ms": elapsed_ms,
        }));
    } else {
        println!(
            "copied {copied} task(s) into {target}: {checkpoints} checkpoint(s), {calls} tool call(s)"
        );
        if !already.is_empty() {
            println!(
                "{} task(s) were already there, the same as here: skipped",
                already.len()
            );
        }
        if empty > 0 {
            println!("{empty} task(s) had nothing retained to copy");
        }
        for (task, seq) in &snapshots_written {
            println!(
                "  {task}: its first retained checkpoint, seq {seq}, is a delta whose fold base \
                 is not retained; written as a snapshot of its state"
            );
        }
        for (task, diffs) in &mismatches {
            println!("MISMATCH {task}: {}", diffs.join("; "));
        }
        if mismatches.is_empty() {
            println!(
                "verified {} task(s): every retained checkpoint loads the same state, every \
                 tool call has the same status and result ({elapsed_ms} ms)",
                tasks.len()
            );
        }
    }
    match mismatches.len() {
        0 => Ok(()),
        n => Err(Failure::Problem(format!(
            "{n} task(s) read differently from {target} than from {}",
            dir.display()
        ))),
    }
}
