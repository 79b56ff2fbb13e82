//! On a full tmpfs: reopen, compaction (also `agentwal compact`) and new commits work.

use std::process::Command;

use agentwal::{Options, Store};

use crate::tmpfs::{
    Tmpfs, after_the_failure, assert_latest, assert_retained_load, delta, fill, options,
};

#[test]
fn a_full_disk_is_reopened_compacted_and_written_again() {
    let Some(fs) = Tmpfs::mount("3m") else {
        return;
    };
    let dir = fs.store_dir();
    let store: Store = Store::open_with(&dir, options()).unwrap();
    let mut filled = fill(&store, &["t0", "t1"], None);
    after_the_failure(store, &dir, &filled);
    let free_when_full = fs.free_bytes();

    // The final segment was sealed when creating the next one failed: the open must not
    // need the space for it.
    let store: Store = Store::open_with(&dir, options())
        .unwrap_or_else(|e| panic!("reopening the full disk for writing: {e}"));
    filled.settle(&store);
    let mut model = filled.model;
    assert_latest(&store, &model, "writer reopened on the full disk");
    let report = store.compact().expect("compacting the full disk");
    let free = fs.free_bytes();
    assert!(
        report.segments_deleted >= 30 && free > free_when_full + (2 << 20),
        "compaction reclaimed too little: {report:?}, {free_when_full} -> {free} bytes free"
    );
    assert_latest(&store, &model, "after compaction");
    assert_retained_load(&store, "after compaction");

    // Commits work again, and everything survives a reopen.
    for i in 0..200 {
        let task = ["t0", "t1"][i % 2];
        let d = delta(task, 1_000_000 + i as u64);
        let seq = store.commit(task, &d).expect("committing after compaction");
        model.get_mut(task).unwrap().commit(seq, &d);
    }
    assert_latest(&store, &model, "after new commits");
    drop(store);
    let store: Store = Store::open_with(&dir, options()).unwrap();
    assert_latest(&store, &model, "reopened after new commits");
    assert_retained_load(&store, "reopened after new commits");
}

#[test]
fn agentwal_compact_recovers_a_full_disk() {
    let Some(fs) = Tmpfs::mount("3m") else {
        return;
    };
    let dir = fs.store_dir();
    let bin = env!("CARGO_BIN_EXE_agentwal");
    let run = |args: &[&str]| {
        let out = Command::new(bin).args(args).arg(&dir).output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "agentwal {args:?}: {text}");
        text
    };

    // Without retention, dead records are those of deleted tasks.
    let no_retention = Options {
        keep_checkpoints: None,
        ..options()
    };
    let store: Store = Store::open_with(&dir, no_retention).unwrap();
    let mut filled = fill(&store, &["a", "b", "c"], Some(20));
    assert!(
        filled.failure.is_disk_full(),
        "the fill ended with {:?}",
        filled.failure
    );
    drop(store);
    let free_when_full = fs.free_bytes();
    run(&["compact"]);
    assert!(
        fs.free_bytes() > free_when_full + (2 << 20),
        "agentwal compact reclaimed too little"
    );
    let store: Store = Store::open_with(&dir, no_retention).unwrap();
    filled.settle(&store);
    assert_latest(&store, &filled.model, "after agentwal compact");
    store
        .commit("a", &delta("a", 0))
        .expect("a commit after agentwal compact");
    drop(store);

    // With retention: agentwal compact --keep-checkpoints applies it.
    std::fs::remove_dir_all(&dir).unwrap();
    let store: Store = Store::open_with(&dir, options()).unwrap();
    let mut filled = fill(&store, &["t"], None);
    assert!(
        filled.failure.is_disk_full(),
        "the fill ended with {:?}",
        filled.failure
    );
    drop(store);
    let free_when_full = fs.free_bytes();
    run(&["compact", "--keep-checkpoints", "2"]);
    assert!(
        fs.free_bytes() > free_when_full + (2 << 20),
        "agentwal compact --keep-checkpoints reclaimed too little"
    );
    let store: Store = Store::open_with(&dir, options()).unwrap();
    filled.settle(&store);
    let mut model = filled.model;
    for (task, m) in &mut model {
        let d = delta(task, 0);
        let seq = store
            .commit(task, &d)
            .expect("a commit after agentwal compact");
        m.commit(seq, &d);
    }
    assert_latest(&store, &model, "after agentwal compact --keep-checkpoints");
}

#[test]
fn a_disk_full_in_the_middle_of_a_segment_reopens_for_writing() {
    // 8 MiB segments on 6 MiB: the first 4 MiB preallocation fits, growing the segment
    // does not, so the final segment is not sealed. The open zeroes ahead of the data
    // only within the space the segment already holds.
    let Some(fs) = Tmpfs::mount("6m") else {
        return;
    };
    let dir = fs.store_dir();
    let big = Options {
        segment_bytes: 8 << 20,
        ..options()
    };
    let store: Store = Store::open_with(&dir, big).unwrap();
    let mut filled = fill(&store, &["t"], None);
    after_the_failure(store, &dir, &filled);
    let store: Store = Store::open_with(&dir, big)
        .unwrap_or_else(|e| panic!("reopening the full disk for writing: {e}"));
    filled.settle(&store);
    assert_latest(&store, &filled.model, "writer reopened on the full disk");
}
