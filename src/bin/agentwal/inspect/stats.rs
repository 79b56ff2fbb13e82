//! `agentwal stats`: a store's size, live and dead bytes, tasks and biggest tasks.

use std::path::Path;

use serde_json::json;

use crate::Outcome;
use crate::open::open;
use crate::render::{self, print_json};

/// Runs `agentwal stats`.
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
