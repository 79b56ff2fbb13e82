//! Snapshots, retention, compaction and bounded disk.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use agentwal::{
    AgentDelta, AgentState, Compression, Message, Options, RecoveryMode, State, Store, SyncMode,
};

fn delta(task: usize, i: u64) -> AgentDelta {
    AgentDelta::default()
        .message(Message::assistant(format!(
            "t{task} step {i} {}",
            "m".repeat(40)
        )))
        .set("step", i as i64)
}

/// Every retained checkpoint of every task, loaded.
fn contents(store: &Store) -> BTreeMap<String, Vec<(u64, AgentState)>> {
    let mut out = BTreeMap::new();
    for task in store.tasks().unwrap() {
        let cps = store
            .list_checkpoints(&task)
            .unwrap()
            .into_iter()
            .map(|c| {
                (
                    c.seq,
                    (*store.load(&task, c.seq).unwrap().expect("retained").state).clone(),
                )
            })
            .collect();
        out.insert(task, cps);
    }
    out
}

fn small(keep: Option<u32>) -> Options {
    Options {
        segment_bytes: 16 << 10,
        snapshot_every: 4,
        keep_checkpoints: keep,
        auto_compact: false,
        // The segment counts these tests plan on are in bytes as encoded (compressed
        // records through compaction: tests/compression.rs).
        compression: Compression::None,
        ..Options::default()
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn retention_bounds_what_is_served_and_keeps_the_latest() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open_with(dir.path(), small(Some(3))).unwrap();
    for i in 1..=10 {
        store.commit("t", &delta(0, i)).unwrap();
    }
    let seqs: Vec<u64> = store
        .list_checkpoints("t")
        .unwrap()
        .iter()
        .map(|c| c.seq)
        .collect();
    assert_eq!(seqs, vec![8, 9, 10]);
    assert_eq!(store.load("t", 7).unwrap(), None);
    let mut want = AgentState::default();
    for i in 1..=8 {
        want.apply(&delta(0, i));
    }
    assert_eq!(*store.load("t", 8).unwrap().unwrap().state, want);
    drop(store);
    let aged = Options {
        keep_checkpoints: None,
        max_age: Some(Duration::from_millis(1)),
        ..small(None)
    };
    std::thread::sleep(Duration::from_millis(5));
    let store: Store = Store::open_with(dir.path(), aged).unwrap();
    let seqs: Vec<u64> = store
        .list_checkpoints("t")
        .unwrap()
        .iter()
        .map(|c| c.seq)
        .collect();
    assert_eq!(seqs, vec![10], "max_age drops all but the latest");
    assert_eq!(store.load_latest("t").unwrap().unwrap().seq, 10);
}

#[test]
fn compaction_reclaims_space_and_preserves_contents_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let opts = small(Some(4));
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    for i in 1..=300 {
        for t in 0..5 {
            store.commit(&format!("task-{t}"), &delta(t, i)).unwrap();
        }
    }
    store.begin_call("task-0", "c1", "tool", b"args").unwrap();
    store.finish_call("task-0", "c1", b"result").unwrap();
    store
        .begin_call("task-1", "c2", "tool", b"pending")
        .unwrap();
    store.delete_task("task-4").unwrap();
    let before = contents(&store);
    let disk_before = store.stats().disk_bytes;
    let report = store.compact().unwrap();
    assert!(report.segments_deleted > 10, "{report:?}");
    let disk_after = store.stats().disk_bytes;
    assert!(
        disk_after * 4 < disk_before,
        "{disk_before} -> {disk_after}"
    );
    assert_eq!(contents(&store), before);
    assert_eq!(
        store.call_result("task-0", "c1").unwrap(),
        Some(b"result".to_vec())
    );
    // Writing after compaction works, and everything survives reopen.
    store.commit("task-0", &delta(0, 301)).unwrap();
    let before = contents(&store);
    drop(store);
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    assert_eq!(contents(&store), before);
    assert!(
        !store.tasks().unwrap().contains(&"task-4".to_string()),
        "deleted task resurrected"
    );
    assert_eq!(store.pending_calls("task-1").unwrap().len(), 1);
    // A second pass over an already compacted store is harmless.
    store.compact().unwrap();
    assert_eq!(contents(&store), before);
}

#[test]
fn crash_at_each_compaction_step_recovers_the_same_contents() {
    let base = tempfile::tempdir().unwrap();
    let before_dir = base.path().join("before");
    let after_dir = base.path().join("after");
    let opts = small(Some(3));
    {
        let store: Store = Store::open_with(&before_dir, opts).unwrap();
        for i in 1..=120 {
            for t in 0..3 {
                store.commit(&format!("task-{t}"), &delta(t, i)).unwrap();
            }
        }
        store.delete_task("task-2").unwrap();
        store.commit("task-0", &delta(0, 999)).unwrap();
    }
    copy_dir(&before_dir, &after_dir);
    let (expected, through) = {
        let store: Store = Store::open_with(&after_dir, opts).unwrap();
        let expected = contents(&store);
        let report = store.compact().unwrap();
        assert!(report.segments_deleted >= 3);
        assert_eq!(contents(&store), expected);
        let through: u64 = store
            .dir()
            .read_dir()
            .unwrap()
            .filter_map(|e| {
                e.ok()?
                    .file_name()
                    .to_str()?
                    .strip_suffix(".wal")?
                    .parse()
                    .ok()
            })
            .min()
            .unwrap();
        (expected, through)
    };
    let name = |id: u64| format!("{id:020}.wal");
    let old_ids: Vec<u64> = (1..through)
        .filter(|id| before_dir.join(name(*id)).exists())
        .collect();
    let mut images = 0;
    // Step 1 interrupted: a (possibly partial) temporary file beside the old segments.
    for cut in [0usize, 100, 4000, usize::MAX] {
        let d = base.path().join(format!("tmp-{cut}"));
        copy_dir(&before_dir, &d);
        let compacted = std::fs::read(after_dir.join(name(through))).unwrap();
        let tmp = d.join(format!("{}.compact.tmp", name(through)));
        std::fs::write(&tmp, &compacted[..cut.min(compacted.len())]).unwrap();
        check(&d, opts, &expected);
        assert!(!tmp.exists(), "open removes leftover temp files");
        images += 1;
    }
    // Steps 2-3: the compacted segment installed, any subset of old segments still there.
    for mask in 0u32..(1 << old_ids.len().min(8)) {
        let d = base.path().join(format!("installed-{mask}"));
        copy_dir(&after_dir, &d);
        for (bit, id) in old_ids.iter().enumerate().take(8) {
            if mask & (1 << bit) != 0 {
                std::fs::copy(before_dir.join(name(*id)), d.join(name(*id))).unwrap();
            }
        }
        check(&d, opts, &expected);
        images += 1;
    }
    assert!(images > 8);
}

fn check(dir: &Path, opts: Options, expected: &BTreeMap<String, Vec<(u64, AgentState)>>) {
    let store: Store = Store::open_with(dir, opts).unwrap();
    assert_eq!(&contents(&store), expected, "{}", dir.display());
    store.commit("task-0", &delta(0, 5000)).unwrap();
    drop(store);
    // Recovery is idempotent: a second open sees the same, plus the new commit.
    let store: Store = Store::open_with(dir, opts).unwrap();
    assert_eq!(
        store.load_latest("task-0").unwrap().unwrap().state.vars["step"],
        5000i64.into()
    );
}

#[test]
fn compaction_under_concurrent_committers_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        sync: SyncMode::Never,
        ..small(None)
    };
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let compactor = s.spawn(|| {
            let mut passes = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                store.compact().unwrap();
                passes += 1;
            }
            passes
        });
        let writers: Vec<_> = (0..8)
            .map(|t| {
                let store = store.clone();
                s.spawn(move || {
                    for i in 1..=150 {
                        assert_eq!(store.commit(&format!("task-{t}"), &delta(t, i)).unwrap(), i);
                        if i % 50 == 0 {
                            let got = store.load(&format!("task-{t}"), i / 2).unwrap().unwrap();
                            assert_eq!(got.state.vars["step"], ((i / 2) as i64).into());
                        }
                    }
                })
            })
            .collect();
        writers.into_iter().for_each(|w| w.join().unwrap());
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(compactor.join().unwrap() > 0);
    });
    store.flush().unwrap();
    let want = contents(&store);
    drop(store);
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    assert_eq!(contents(&store), want);
    for t in 0..8 {
        let latest = store.load_latest(&format!("task-{t}")).unwrap().unwrap();
        assert_eq!((latest.seq, latest.state.messages.len()), (150, 150));
    }
}

#[test]
fn bounded_disk_after_100k_commits_over_100_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let segment_bytes = 64 << 10;
    let opts = Options {
        sync: SyncMode::Never,
        segment_bytes,
        keep_checkpoints: Some(8),
        ..Options::default()
    };
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    let mut peak = 0;
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let store = store.clone();
                s.spawn(move || {
                    for i in 1..=1000u64 {
                        for t in (w..100).step_by(4) {
                            let d = AgentDelta::default()
                                .set("step", i as i64)
                                .set("note", "x".repeat(20));
                            store.commit(&format!("task-{t}"), &d).unwrap();
                        }
                    }
                })
            })
            .collect();
        while writers.iter().any(|w| !w.is_finished()) {
            peak = peak.max(store.stats().disk_bytes);
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    store.compact().unwrap();
    let stats = store.stats();
    assert_eq!(stats.tasks, 100);
    let bound = 2 * stats.live_bytes + 2 * segment_bytes;
    println!(
        "live {} disk {} bound {} peak-during-run {}",
        stats.live_bytes, stats.disk_bytes, bound, peak
    );
    assert!(stats.disk_bytes <= bound, "{stats:?}");
    drop(store);
    let started = std::time::Instant::now();
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    let report = store.recovery_report();
    println!(
        "reopen: {} records, {} bytes in {:?}",
        report.records,
        report.bytes,
        started.elapsed()
    );
    // Opening reads live data, not the 100,000 commits of history: per task the 8 kept
    // checkpoints, the snapshot they fold from and the deltas between (the size rule
    // snapshots these ~75-byte deltas after SNAPSHOT_DELTA_BYTES_FLOOR bytes, ~55 deltas).
    let deltas_per_snapshot = agentwal::SNAPSHOT_DELTA_BYTES_FLOOR / 70;
    assert!(
        report.records < 100 * (8 + deltas_per_snapshot + 1),
        "{report:?}"
    );
    for t in 0..100 {
        assert_eq!(
            store
                .load_latest(&format!("task-{t}"))
                .unwrap()
                .unwrap()
                .seq,
            1000
        );
    }
}

#[test]
fn salvage_serves_the_previous_checkpoint_when_the_newest_snapshot_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        snapshot_every: 1,
        ..small(None)
    };
    let (victim_seg, victim_offset) = {
        let store: Store = Store::open_with(dir.path(), opts).unwrap();
        for i in 1..=5 {
            store.commit("victim", &delta(0, i)).unwrap();
        }
        let info = store.list_checkpoints("victim").unwrap();
        assert!(info.last().unwrap().snapshot);
        // Later records from another task make the damage mid-log, not a torn tail.
        for i in 1..=3 {
            store.commit("other", &delta(1, i)).unwrap();
        }
        locate_last_record_of(dir.path(), "victim")
    };
    // Flip a byte in the middle of the newest snapshot's payload.
    let mut bytes = std::fs::read(&victim_seg).unwrap();
    bytes[victim_offset as usize + 40] ^= 0x20;
    std::fs::write(&victim_seg, &bytes).unwrap();

    match Store::<AgentState>::open_with(dir.path(), opts) {
        Err(agentwal::Error::Corruption {
            segment, offset, ..
        }) => {
            assert_eq!((segment, offset), (victim_seg.clone(), victim_offset));
        }
        other => panic!("expected corruption, got {:?}", other.map(|_| ())),
    }
    let salvage = Options {
        recovery: RecoveryMode::Salvage,
        ..opts
    };
    let store: Store = Store::open_with(dir.path(), salvage).unwrap();
    let latest = store.load_latest("victim").unwrap().unwrap();
    assert_eq!(latest.seq, 4);
    assert_eq!(store.load_latest("other").unwrap().unwrap().seq, 3);
    let report = store.recovery_report();
    assert_eq!(report.skipped.len(), 1);
    assert_eq!(
        (report.skipped[0].segment.clone(), report.skipped[0].offset),
        (victim_seg, victim_offset)
    );
    assert_eq!(report.lost.len(), 1, "{report:?}");
    assert_eq!(
        (report.lost[0].task.as_str(), report.lost[0].seqs.clone()),
        ("victim", vec![5])
    );
}

/// Salvage names a damaged checkpoint below the task's latest as lost too, not only one
/// beyond it: a task whose first checkpoint is gone reports seq 1.
#[test]
fn salvage_names_a_lost_checkpoint_below_the_latest() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        snapshot_every: 8,
        ..small(None)
    };
    let (victim_seg, victim_offset) = {
        let store: Store = Store::open_with(dir.path(), opts).unwrap();
        store.commit("victim", &delta(0, 1)).unwrap();
        let first = locate_last_record_of(dir.path(), "victim");
        for i in 2..=3 {
            store.commit("victim", &delta(0, i)).unwrap();
        }
        for i in 1..=3 {
            store.commit("other", &delta(1, i)).unwrap();
        }
        first
    };
    let mut bytes = std::fs::read(&victim_seg).unwrap();
    bytes[victim_offset as usize + 40] ^= 0x20;
    std::fs::write(&victim_seg, &bytes).unwrap();
    let salvage = Options {
        recovery: RecoveryMode::Salvage,
        ..opts
    };
    let store: Store = Store::open_with(dir.path(), salvage).unwrap();
    let report = store.recovery_report();
    assert_eq!(report.skipped.len(), 1, "{report:?}");
    assert_eq!(
        (
            report.lost.len(),
            report
                .lost
                .first()
                .map(|l| (l.task.as_str(), l.seqs.clone()))
        ),
        (1, Some(("victim", vec![1]))),
        "{report:?}"
    );
    // Seq 1 held the base its deltas fold onto: the task cannot be rebuilt, and says so
    // by serving nothing rather than a state that was never committed.
    assert!(store.load_latest("victim").unwrap().is_none());
    assert_eq!(store.load_latest("other").unwrap().unwrap().seq, 3);
}

/// Finds the segment and offset of the last record whose payload mentions `task`.
fn locate_last_record_of(dir: &Path, task: &str) -> (std::path::PathBuf, u64) {
    let mut found = None;
    agentwal::log::Log::open_read_only(dir, Default::default(), |rec| {
        if rec
            .payload
            .windows(task.len())
            .any(|w| w == task.as_bytes())
        {
            found = Some((rec.segment_id, rec.offset));
        }
        Ok(())
    })
    .unwrap();
    let (seg, off) = found.unwrap();
    (agentwal::log::segment_path(dir, seg), off)
}

/// Regression: compaction drops a task's dead checkpoints only inside the compacted
/// prefix; older dead ones beyond it survive, so a task's history may start mid-chain.
/// Reopening such a store used to fail with `Inconsistent` ("seq 1951 where 1 was expected").
#[test]
fn reopen_after_retention_and_compaction_with_a_headless_history() {
    for (keep, snapshot_every) in [(3, 8), (1, 4), (2, 5)] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            segment_bytes: 4096,
            keep_checkpoints: Some(keep),
            snapshot_every,
            sync: SyncMode::Never,
            ..small(None)
        };
        // A state that stays small, so snapshots keep fitting in a segment.
        let step = |i: u64| {
            AgentDelta::default()
                .set("step", i as i64)
                .set("note", format!("n{i}"))
        };
        let store: Store = Store::open_with(dir.path(), opts).unwrap();
        for i in 1..=600u64 {
            store.commit("t", &step(i)).unwrap();
            if i % 37 == 0 {
                store.compact().unwrap();
                let want = contents(&store);
                let reopened: Store = Store::open_read_only(dir.path()).unwrap();
                drop(reopened);
                assert_eq!(contents(&store), want);
            }
        }
        let want = contents(&store);
        drop(store);
        let store: Store = Store::open_with(dir.path(), opts).unwrap();
        assert_eq!(contents(&store), want, "keep {keep}");
        store.compact().unwrap();
        drop(store);
        let store: Store = Store::open_with(dir.path(), opts).unwrap();
        assert_eq!(
            contents(&store),
            want,
            "keep {keep} after a second compaction"
        );
        assert_eq!(store.commit("t", &step(601)).unwrap(), 601);
    }
}
