//! What the engine does when it is misused or pointed at things that are not its own:
//! writes that fail on task ids nobody created, directories of someone else's files, stray
//! files in a store, a schema version bumped without migration hooks. Each failure must
//! leave nothing behind and name what is wrong.

mod common;

use std::path::Path;
use std::sync::{Arc, Barrier};

use agentwal::log::segment_file_name;
use agentwal::{
    AgentDelta, AgentState, CorruptionReason, Error, NotAStoreReason, Options, Store, SyncMode,
};
use common::states::{CounterV1, CounterV2, CounterV2Migrating};
use common::{rss_anon_bytes, serial};

// Every test holds `serial()`, so they run one at a time: one of them measures the
// process's memory.

fn opts() -> Options {
    Options {
        sync: SyncMode::Never,
        auto_compact: false,
        ..Options::default()
    }
}

/// Small segments: a record of a few KiB is too large for one.
fn small_segments() -> Options {
    Options {
        segment_bytes: 4096,
        ..opts()
    }
}

fn hi() -> AgentDelta {
    AgentDelta::default().set("k", "v")
}

#[test]
fn failed_writes_on_unknown_tasks_leave_no_index_slot() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open_with(dir.path(), small_segments()).unwrap();

    let conflict = store.commit_if("ghost-1", 7, &hi());
    assert!(matches!(conflict, Err(Error::Conflict { actual: 0, .. })));
    assert_eq!(store.index_slots(), 0, "commit_if conflict");

    let finish = store.finish_call("ghost-4", "c1", b"r");
    assert!(matches!(finish, Err(Error::UnknownTask { .. })));
    assert_eq!(store.index_slots(), 0, "finish_call on an unknown task");

    store.commit("src", &hi()).unwrap();
    assert_eq!(store.index_slots(), 1);
    let fork = store.fork("nowhere", 1, "ghost-6");
    assert!(matches!(fork, Err(Error::UnknownTask { .. })), "{fork:?}");
    assert_eq!(store.index_slots(), 1, "fork of an unknown task");

    assert_eq!(store.tasks().unwrap(), vec!["src".to_string()]);
    assert_eq!(store.stats().tasks, 1);
    // The name is free to use afterwards.
    assert_eq!(store.commit_if("ghost-1", 0, &hi()).unwrap(), 1);
    assert_eq!(store.index_slots(), 2);
}

/// Writes that fail in the log (here: every write after an injected fdatasync failure,
/// which poisons the handle) on tasks that do not exist leave no slot behind either.
#[test]
fn failed_appends_on_unknown_tasks_leave_no_index_slot() {
    use agentwal::storage::sim::SimStorage;
    let sim = SimStorage::new();
    let storage: std::sync::Arc<dyn agentwal::storage::Storage> = std::sync::Arc::new(sim.clone());
    let store: Store = Store::open_on(storage, "/store", small_segments()).unwrap();
    store.commit("src", &hi()).unwrap();
    store.commit("src", &hi()).unwrap();
    assert_eq!(store.index_slots(), 1);
    // From the next storage operation on, everything fails.
    sim.fail_at(sim.ops(), true);
    let commit = store.commit("ghost-2", &hi());
    assert!(commit.is_err(), "{commit:?}");
    assert_eq!(store.index_slots(), 1, "commit that failed to append");
    let call = store.begin_call("ghost-3", "c1", "tool", b"args");
    assert!(call.is_err(), "{call:?}");
    assert_eq!(store.index_slots(), 1, "begin_call that failed to append");
    let fork = store.fork("src", 2, "ghost-5");
    assert!(fork.is_err(), "{fork:?}");
    assert_eq!(store.index_slots(), 1, "fork that failed to append");
    assert_eq!(store.tasks().unwrap(), vec!["src".to_string()]);
}

#[test]
fn failed_writes_on_unknown_tasks_do_not_grow_memory() {
    const CALLS: usize = 300_000;
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open_with(dir.path(), opts()).unwrap();
    let d = hi();
    // Warm up whatever the first calls allocate once (error strings, the map's table).
    for i in 0..1000 {
        let _ = store.commit_if(&format!("warm-{i}"), 7, &d);
    }
    let before = rss_anon_bytes();
    for i in 0..CALLS {
        let r = store.commit_if(&format!("nonexistent-task-{i}"), 7, &d);
        assert!(matches!(r, Err(Error::Conflict { .. })), "{r:?}");
    }
    let after = rss_anon_bytes();
    let grown = after.saturating_sub(before);
    println!("RSS grew by {grown} B over {CALLS} failed commits");
    // Each leaked slot cost ~277 B (83 MB here); nothing should stay behind.
    assert!(
        grown < 8 << 20,
        "RSS grew by {grown} B over {CALLS} failed commits"
    );
    assert_eq!(store.tasks().unwrap().len(), 0);
    assert_eq!(store.index_slots(), 0);
}

#[test]
fn removing_empty_slots_never_loses_a_concurrent_commit() {
    const TASKS: usize = 2000;
    const THREADS: usize = 4;
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open_with(dir.path(), opts()).unwrap();
    let barrier = Arc::new(Barrier::new(THREADS));
    let wins: Vec<Vec<usize>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let store = store.clone();
                let barrier = barrier.clone();
                s.spawn(move || {
                    let mut won = Vec::new();
                    barrier.wait();
                    for i in 0..TASKS {
                        let task = format!("task-{i}");
                        if t % 2 == 0 {
                            // Two threads race to create the task: exactly one wins.
                            match store.commit_if(&task, 0, &hi()) {
                                Ok(1) => won.push(i),
                                Err(Error::Conflict { .. }) => {}
                                other => panic!("{task}: {other:?}"),
                            }
                        } else {
                            // Two threads fail on it meanwhile (and on names that never
                            // come to exist), removing slots they find empty.
                            let _ = store.commit_if(&task, 99, &hi());
                            let _ = store.commit_if(&format!("ghost-{i}"), 99, &hi());
                        }
                    }
                    won
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut won: Vec<usize> = wins.into_iter().flatten().collect();
    won.sort_unstable();
    assert_eq!(
        won,
        (0..TASKS).collect::<Vec<_>>(),
        "each task created once"
    );
    for i in 0..TASKS {
        let latest = store.load_latest(&format!("task-{i}")).unwrap();
        assert_eq!(latest.map(|c| c.seq), Some(1), "task-{i}");
    }
    assert_eq!(store.tasks().unwrap().len(), TASKS);
    assert_eq!(store.index_slots(), TASKS);
    store.flush().unwrap();
    drop(store);
    let store: Store = Store::open_with(dir.path(), opts()).unwrap();
    assert_eq!(store.tasks().unwrap().len(), TASKS);
}

#[test]
fn a_directory_of_foreign_files_is_not_taken_over() {
    let _serial = serial();
    let work = tempfile::tempdir().unwrap();
    let notes = work.path().join("notes.tmp");
    std::fs::write(&notes, b"my notes").unwrap();
    for read_only in [false, true] {
        let opened = match read_only {
            false => Store::<AgentState>::open(work.path()).map(drop),
            true => Store::<AgentState>::open_read_only(work.path()).map(drop),
        };
        let Err(e) = opened else {
            panic!("read_only={read_only}: a directory holding notes.tmp opened as a store");
        };
        assert!(
            matches!(&e, Error::NotAStore { reason: NotAStoreReason::ForeignFile(f), .. }
                if *f == notes),
            "read_only={read_only}: {e:?}"
        );
        assert!(e.to_string().contains("notes.tmp"), "{e}");
    }
    assert_eq!(std::fs::read(&notes).unwrap(), b"my notes");
    let names: Vec<_> = std::fs::read_dir(work.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "nothing was added (no LOCK, no segment)");
}

#[test]
fn only_the_engines_own_temp_files_are_deleted() {
    let _serial = serial();
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    // A crash before the first segment was in place leaves LOCK and a temp segment: still
    // a store to create.
    std::fs::write(dir.join("LOCK"), b"").unwrap();
    std::fs::write(dir.join(format!("{}.tmp", segment_file_name(1))), b"half").unwrap();
    let store: Store = Store::open_with(dir, opts()).unwrap();
    store.commit("t", &hi()).unwrap();
    store.flush().unwrap();
    drop(store);
    assert!(!dir.join(format!("{}.tmp", segment_file_name(1))).exists());

    let user_dir = dir.join("x.tmp");
    std::fs::create_dir(&user_dir).unwrap();
    let user_file = dir.join("notes.tmp");
    std::fs::write(&user_file, b"mine").unwrap();
    let ours = [
        dir.join(format!("{}.tmp", segment_file_name(9))),
        dir.join(format!("{}.compact.tmp", segment_file_name(1))),
    ];
    for path in &ours {
        std::fs::write(path, b"left by a crash").unwrap();
    }
    let store: Store = Store::open_with(dir, opts()).unwrap();
    assert_eq!(store.load_latest("t").unwrap().unwrap().seq, 1);
    drop(store);
    assert!(user_dir.is_dir(), "a directory named x.tmp stays");
    assert_eq!(std::fs::read(&user_file).unwrap(), b"mine");
    for path in &ours {
        assert!(!path.exists(), "{} was left", path.display());
    }
}

#[test]
fn a_regular_file_is_not_a_directory() {
    let _serial = serial();
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("store");
    std::fs::write(&file, b"not a directory").unwrap();
    for read_only in [false, true] {
        let opened = match read_only {
            false => Store::<AgentState>::open(&file).map(drop),
            true => Store::<AgentState>::open_read_only(&file).map(drop),
        };
        let e = opened.unwrap_err();
        assert!(
            matches!(&e, Error::NotAStore { dir, reason: NotAStoreReason::NotADirectory }
                if *dir == file),
            "read_only={read_only}: {e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains("not a directory") && text.contains("store"),
            "{text}"
        );
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"not a directory");
}

/// A store whose final segment is segment 4.
fn four_segments(dir: &Path) {
    let store: Store = Store::open_with(dir, small_segments()).unwrap();
    let d = AgentDelta::default().set("k", "v".repeat(300));
    let mut i = 0;
    while store.stats().segments < 4 {
        store.commit(&format!("t{}", i % 3), &d).unwrap();
        i += 1;
    }
    store.flush().unwrap();
}

#[test]
fn a_stray_segment_file_is_named_not_the_healthy_final_segment() {
    let _serial = serial();
    // (stray id, what its error must say)
    for (stray, says) in [(99, "segments 5..=98 are missing"), (5, "file is empty")] {
        let work = tempfile::tempdir().unwrap();
        let dir = work.path();
        four_segments(dir);
        let path = dir.join(segment_file_name(stray));
        std::fs::write(&path, b"").unwrap();
        for read_only in [false, true] {
            let opened = match read_only {
                false => Store::<AgentState>::open_with(dir, small_segments()).map(drop),
                true => Store::<AgentState>::open_read_only_with(dir, small_segments()).map(drop),
            };
            let e = opened.unwrap_err();
            let Error::Corruption {
                segment, reason, ..
            } = &e
            else {
                panic!("stray {stray}: {e:?}");
            };
            assert_eq!(*segment, path, "stray {stray}: {e}");
            assert!(
                matches!(
                    reason,
                    CorruptionReason::BrokenChain(_) | CorruptionReason::BadHeader(_)
                ),
                "{e}"
            );
            assert!(e.to_string().contains(says), "stray {stray}: {e}");
        }
        // The healthy store opens again once the stray file is gone.
        std::fs::remove_file(&path).unwrap();
        let store: Store = Store::open_with(dir, small_segments()).unwrap();
        assert_eq!(store.tasks().unwrap().len(), 3);
    }
}

#[test]
fn a_commit_on_a_history_it_cannot_read_is_refused_before_writing() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    {
        let store: Store<CounterV1> = Store::open_with(dir.path(), opts()).unwrap();
        store.commit("t", &5).unwrap();
        store.commit("t", &7).unwrap();
        store.flush().unwrap();
    }
    {
        let store: Store<CounterV2> = Store::open_with(dir.path(), opts()).unwrap();
        let e = store.commit("t", &(1, "new".into())).unwrap_err();
        assert!(
            matches!(
                e,
                Error::SchemaMismatch {
                    found: 1,
                    expected: 2
                }
            ),
            "{e:?}"
        );
        // The hint names the hooks that exist.
        let text = e.to_string();
        assert!(
            text.contains("migrate_state") && text.contains("migrate_delta"),
            "{text}"
        );
        assert!(!text.contains("`State::migrate`"), "{text}");
        assert_eq!(store.stats().appends, 0, "nothing was written");
        // A task this program started is unaffected.
        assert_eq!(store.commit("fresh", &(1, "a".into())).unwrap(), 1);
        store.flush().unwrap();
    }
    {
        // The v1 history is intact: the old program still reads it.
        let store: Store<CounterV1> = Store::open_with(dir.path(), opts()).unwrap();
        let latest = store.load_latest("t").unwrap().unwrap();
        assert_eq!((latest.seq, latest.state.total), (2, 12));
    }
    {
        // With the hooks, the commit migrates the history and writes it under v2 ...
        let store: Store<CounterV2Migrating> = Store::open_with(dir.path(), opts()).unwrap();
        assert_eq!(store.commit("t", &(1, "now".into())).unwrap(), 3);
        store.flush().unwrap();
    }
    // ... so a program without the hooks reads it from there on.
    let store: Store<CounterV2> = Store::open_with(dir.path(), opts()).unwrap();
    let latest = store.load_latest("t").unwrap().unwrap();
    assert_eq!((latest.seq, latest.state.total), (3, 13));
    assert_eq!(latest.state.label, "now");
    assert_eq!(store.commit("t", &(1, "later".into())).unwrap(), 4);
}
