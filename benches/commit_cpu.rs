//! The commit path's CPU, for an instruction-counting profiler: `tasks` tasks commit
//! `steps` agent steps each (~1.9 KB deltas, `common::step`, built before the commits), on
//! one thread with `SyncMode::Never` (the CPU path alone, deterministic) or on one thread
//! per task with `SyncMode::Always` (group commit, as the workload bench's 64 tasks). Each
//! delta is handed over with `Store::commit_owned`, or lent with `Store::commit` when the
//! fourth argument is `borrowed`.
//!
//! ```text
//! cargo bench --bench commit_cpu --no-run    # then, with the binary it names:
//! valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*commit_one*' \
//!     target/release/deps/commit_cpu-HASH --bench [never|always] [tasks] [steps] [borrowed]
//! ```
//!
//! Callgrind counts the instructions spent inside `Store::commit` (everything it does,
//! group-commit leading included); divide by tasks × steps. Without valgrind it prints the
//! wall time per commit.

mod common;

use std::time::Instant;

use agentwal::{AgentDelta, Options, Store, SyncMode};
use common::step;

/// One commit, never inlined: the function callgrind's `--toggle-collect` names. A
/// borrowed delta is dropped by the caller, outside the count.
#[inline(never)]
fn commit_one(store: &Store, task: &str, delta: &mut AgentDelta, borrowed: bool) {
    if borrowed {
        store.commit(task, delta).expect("commit");
    } else {
        let owned = std::mem::take(delta);
        store.commit_owned(task, None, owned).expect("commit");
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if args.iter().any(|a| a == "--list") {
        return; // `cargo test --benches` probes with --list
    }
    let always = args.first().is_some_and(|a| a == "always");
    let tasks: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(64);
    let steps: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(20);
    let borrowed = args.get(3).is_some_and(|a| a == "borrowed");
    let dir = tempfile::Builder::new()
        .prefix("bench-commit-cpu-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("tempdir");
    let options = Options {
        sync: if always {
            SyncMode::Always
        } else {
            SyncMode::Never
        },
        auto_compact: false,
        ..Options::default()
    };
    let store: Store = Store::open_with(dir.path(), options).expect("open");
    let mut deltas: Vec<Vec<_>> = (0..tasks)
        .map(|t| (1..=steps).map(|i| step(t, i)).collect())
        .collect();
    let names: Vec<String> = (0..tasks).map(|t| format!("task-{t:04}")).collect();
    let started = Instant::now();
    if always {
        std::thread::scope(|s| {
            for (name, deltas) in names.iter().zip(&mut deltas) {
                let store = &store;
                s.spawn(move || {
                    for d in deltas {
                        commit_one(store, name, d, borrowed);
                    }
                });
            }
        });
    } else {
        for i in 0..steps as usize {
            for (name, deltas) in names.iter().zip(&mut deltas) {
                commit_one(&store, name, &mut deltas[i], borrowed);
            }
        }
    }
    let per_commit = started.elapsed() / (tasks * steps) as u32;
    println!(
        "{} commits ({tasks} tasks x {steps} steps, {}, {}): {per_commit:?} per commit",
        tasks * steps,
        if always { "always" } else { "never" },
        if borrowed { "borrowed" } else { "owned" }
    );
}
