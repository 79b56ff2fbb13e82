//! `agentwal tasks` and `agentwal history`: the tasks of a store, and one task's
//! checkpoints.

use serde_json::{Value as J, json};

use super::unknown_task;
use crate::Outcome;
use crate::open::{Opened, Target};
use crate::render::{self, print_json};

/// Runs `agentwal tasks`.
pub fn tasks(target: &Target, json: bool) -> Outcome {
    let store = Opened::open(target)?;
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

/// Runs `agentwal history`.
pub fn history(target: &Target, task: &str, json: bool) -> Outcome {
    let store = Opened::open(target)?;
    unknown_task(&store, task)?;
    let cps = store.api().list_checkpoints(task)?;
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
