//! The index memory per task after opening a store with many tasks: RSS from
//! /proc/self/status, read in a child process so nothing else this bench allocated counts.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agentwal::{AgentDelta, Message, Options, Store, SyncMode};

use crate::config::Config;
use crate::generator::task_id;
use crate::metering::rss;

/// Set in the environment of the child process that measures index memory.
pub const CHILD_ENV: &str = "AGENTWAL_BENCH_CHILD_INDEX_RSS";

pub struct IndexMemory {
    pub tasks: usize,
    pub checkpoints_per_task: usize,
    pub anon_bytes: i64,
    /// RssAnon growth after `malloc_trim`: the allocator's retained free memory removed.
    pub anon_trimmed_bytes: i64,
    pub file_bytes: i64,
    pub open: Duration,
}

/// Builds a store with `tasks` tasks of `per_task` small checkpoints, then opens it in a
/// child process and reads the child's RSS before and after the open.
pub fn index_memory(cfg: &Config, tasks: usize, per_task: usize) -> IndexMemory {
    let dir = cfg.tmpdir("bench-workload-index-");
    build(dir.path(), tasks, per_task);
    let exe = std::env::current_exe().expect("the bench executable");
    let out = Command::new(exe)
        .env(CHILD_ENV, dir.path())
        .output()
        .expect("run the index-memory child");
    assert!(
        out.status.success(),
        "index-memory child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let field = |name: &str| -> i64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("child printed no {name}: {text}"))
    };
    assert_eq!(field("tasks=") as usize, tasks);
    IndexMemory {
        tasks,
        checkpoints_per_task: per_task,
        anon_bytes: field("anon_after=") - field("anon_before="),
        anon_trimmed_bytes: field("anon_trimmed=") - field("anon_before="),
        file_bytes: field("file_after=") - field("file_before="),
        open: Duration::from_micros(field("open_us=") as u64),
    }
}

/// Fills `dir` with `tasks` tasks of `per_task` small checkpoints.
fn build(dir: &Path, tasks: usize, per_task: usize) {
    let options = Options {
        sync: SyncMode::Never,
        ..Options::default()
    };
    let store: Store = Store::open_with(dir, options).expect("open");
    std::thread::scope(|s| {
        for b in 0..2 {
            let store = &store;
            s.spawn(move || {
                for step in 0..per_task {
                    for task in (b..tasks).step_by(2) {
                        let delta = AgentDelta::default()
                            .message(Message::user(format!("task {task}, step {step}")))
                            .set("step", step as i64);
                        store.commit(&task_id(task), &delta).expect("commit");
                    }
                }
            });
        }
    });
    store.flush().expect("flush");
}

/// The child: opens the store, prints RSS before and after.
pub fn index_memory_child(dir: &Path) {
    let before = rss();
    let t0 = Instant::now();
    let store: Store = Store::open_with(dir, Options::default()).expect("open");
    let open = t0.elapsed();
    let after = rss();
    // What the allocator kept from recovery's temporary buffers is not index: hand free
    // memory back to the OS and read RSS again.
    // SAFETY: malloc_trim only releases free memory; no pointer is invalidated.
    unsafe { libc::malloc_trim(0) };
    let trimmed = rss();
    let tasks = store.recovery_report().tasks;
    println!("anon_before={}", before.0);
    println!("file_before={}", before.1);
    println!("anon_after={}", after.0);
    println!("file_after={}", after.1);
    println!("anon_trimmed={}", trimmed.0);
    println!("open_us={}", open.as_micros());
    println!("tasks={tasks}");
    drop(store);
}
