//! `agentwal stats`: a store's size, live and dead bytes, tasks and biggest tasks.

use serde_json::json;

use crate::Outcome;
use crate::open::{Opened, Target};
use crate::render::{self, print_json};

/// What `stats` prints, from either backend.
struct Sizes {
    segments: u64,
    disk_bytes: u64,
    live_bytes: u64,
    /// None on PostgreSQL: dead row versions are VACUUM's, and agentwal does not count them.
    dead_bytes: Option<u64>,
    tasks: u64,
    checkpoints: u64,
}

/// Runs `agentwal stats`. On PostgreSQL: no segments, `disk` the tables' size with their
/// indexes and TOAST, `live` the stored bodies, arguments and results, `dead` unknown.
pub fn stats(target: &Target, json: bool) -> Outcome {
    let store = Opened::open(target)?;
    let s = match &store {
        Opened::Local(local) => {
            let s = local.stats();
            Sizes {
                segments: s.segments,
                disk_bytes: s.disk_bytes,
                live_bytes: s.live_bytes,
                dead_bytes: Some(s.dead_bytes),
                tasks: s.tasks,
                checkpoints: s.checkpoints,
            }
        }
        #[cfg(feature = "postgres")]
        Opened::Pg(pg, _) => {
            let s = pg.stats()?;
            Sizes {
                segments: 0,
                disk_bytes: s.table_bytes,
                live_bytes: s.stored_bytes,
                dead_bytes: None,
                tasks: s.tasks,
                checkpoints: s.checkpoints,
            }
        }
    };
    let mut infos = store.task_infos()?;
    infos.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.task.cmp(&b.task)));
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
    match s.dead_bytes {
        Some(dead) => println!("dead         {}", render::size(dead)),
        None => println!("dead         - (PostgreSQL: VACUUM reclaims dead rows)"),
    }
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
