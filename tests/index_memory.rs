//! The index keeps positions and small metadata per task, not states: a rough check of
//! its memory per task (its own test binary, so no other test's allocations interfere).

mod common;

use agentwal::{AgentDelta, Options, Store, SyncMode};
use common::rss_anon_bytes;

#[test]
fn index_memory_per_task_is_small() {
    const TASKS: usize = 20_000;
    const CHECKPOINTS: usize = 4;
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        sync: SyncMode::Never,
        auto_compact: false,
        ..Options::default()
    };
    {
        let store: Store = Store::open_with(dir.path(), opts).unwrap();
        // Each state carries a kilobyte so that keeping states in memory would show.
        let d = AgentDelta::default().set("blob", "x".repeat(1024));
        for c in 0..CHECKPOINTS {
            for t in 0..TASKS {
                store.commit(&format!("task-{t:06}"), &d).unwrap();
            }
            let _ = c;
        }
        store.flush().unwrap();
    }
    // Hand the writer phase's freed memory back to the OS, so growth below is the index.
    // SAFETY: malloc_trim only releases free heap pages.
    unsafe {
        libc::malloc_trim(0);
    }
    let before = rss_anon_bytes();
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    let after = rss_anon_bytes();
    assert_eq!(store.tasks().unwrap().len(), TASKS);
    let per_task = after.saturating_sub(before) / TASKS as u64;
    println!("index: {per_task} B per task with {CHECKPOINTS} checkpoints each");
    // Documented (docs/store.md §1): ~200 B per task with up to 4 checkpoints held in place,
    // plus the id (about 240 B here); allow slack for the allocator and hash-map growth,
    // far below the 4 KiB a task's states would take.
    assert!(per_task < 512, "{per_task} B per task");
}
