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

/// What one step of the bounded-disk workload writes to `task` (the same sizes at every
/// step: fixed-width ids and values).
fn bounded_step(store: &Store, task: &str, i: u64) {
    let call = format!("call-{i:06}");
    store
        .begin_call(task, &call, "search", b"q=some-query")
        .unwrap();
    store.finish_call(task, &call, b"ten results").unwrap();
    let d = AgentDelta::default()
        .set("step", 1_000_000 + i as i64)
        .set("note", "x".repeat(20));
    store.commit(task, &d).unwrap();
}

/// Record sizes of the bounded-disk workload, measured on a scratch store: (a snapshot
/// record, a delta record, a tool call's begin and finish records together).
fn bounded_record_bytes() -> (u64, u64, u64) {
    let sized = |snapshot_every| {
        let dir = tempfile::tempdir().unwrap();
        let options = Options {
            snapshot_every,
            ..small(None)
        };
        let store: Store = Store::open_with(dir.path(), options).unwrap();
        bounded_step(&store, "task-99", 999_999);
        let cp = store.list_checkpoints("task-99").unwrap()[0].clone();
        assert_eq!(cp.snapshot, snapshot_every == 1, "{cp:?}");
        (cp.bytes, store.stats().live_bytes - cp.bytes)
    };
    let ((snapshot, pair), (delta, _)) = (sized(1), sized(1024));
    (snapshot, delta, pair)
}

/// Bounded disk with retention and the tool-call journal (docs/store.md §7, "Bounded
/// disk"): 100,000 steps over 100 tasks (4 writer threads of 25 tasks), each step a tool
/// call (`begin_call`, `finish_call`) and then a checkpoint, `keep_checkpoints = Some(8)`,
/// 64 KiB segments, `SyncMode::Never`, and the store's own background compaction.
///
/// The bound `B`, after forced passes: per task, what stays live, plus two segments (the
/// active one, preallocated, and slack for its records), plus the retired segment files
/// waiting to be recycled (at most `RECYCLE_FILES_MAX` segments, docs/format.md §6).
/// - Checkpoints: the 8 retained, and the snapshot they fold from with the deltas since.
///   The size rule writes a snapshot once the deltas since the last pass
///   `SNAPSHOT_DELTA_BYTES_FLOOR` (these states stay far below half of it), so at most
///   `FLOOR / delta + 1` deltas precede the oldest retained: `9 + FLOOR / delta + 1`
///   records of at most a snapshot's or a delta's size, whichever is larger.
/// - Tool calls: those finished after the oldest retained checkpoint, the calls of the 7
///   steps since it, plus one (a call whose records a rotation split: its begin stays in
///   the compacted segment until its finish, in the active segment, is compacted too).
///
/// Record sizes are measured on a scratch store (`bounded_record_bytes`): `B` is about
/// 1 MB. Without pruning every call stays, 100,000 begin-and-finish pairs of 124 bytes:
/// 12.5 MB. The writers pause at each quarter of the run for two forced passes, and the
/// disk must then be within `B`, as at the end (without pruning it is 3 MB at the first).
///
/// While the writers run, the background pass runs once dead bytes exceed
/// `max(live, COMPACTION_DEAD_BYTES_MIN)`, so the disk also holds up to that much dead
/// data (at most `max(B, MIN)`), the compacted segment being written (at most `B`), and
/// what the writers append between the threshold and the end of the pass: the compactor
/// looks every 100 ms, and it gets 500 ms at the run's mean write rate. The peak sampled
/// must stay within `2 B + max(B, MIN) + 0.5 s of writes` (5 to 10 MB here, with the
/// write rate; the peaks seen were 2.6 to 3.4 MB, and 25 MB without pruning).
#[test]
fn bounded_disk_after_100k_steps_with_tool_calls_over_100_tasks() {
    use std::sync::Barrier;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const TASKS: u64 = 100;
    const STEPS: u64 = 1000;
    const KEEP: u64 = 8;
    const WRITERS: u64 = 4;
    const PAUSES: [u64; 3] = [250, 500, 750];
    let dir = tempfile::tempdir().unwrap();
    let segment_bytes = 64 << 10;
    let opts = Options {
        sync: SyncMode::Never,
        segment_bytes,
        keep_checkpoints: Some(KEEP as u32),
        ..Options::default()
    };
    let (snapshot, delta, pair) = bounded_record_bytes();
    let deltas_per_snapshot = agentwal::SNAPSHOT_DELTA_BYTES_FLOOR / delta + 1;
    let checkpoints_per_task = KEEP + 1 + deltas_per_snapshot;
    let calls_per_task = KEEP;
    let recycled = agentwal::log::RECYCLE_FILES_MAX as u64;
    let bound = TASKS * (checkpoints_per_task * snapshot.max(delta) + calls_per_task * pair)
        + (2 + recycled) * segment_bytes;
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    // Both compacted twice: a pruned call whose records a rotation split is copied whole
    // by the first pass, and dropped by the second (its records then share a segment).
    let compacted_disk = || {
        store.compact().unwrap();
        store.compact().unwrap();
        store.stats().disk_bytes
    };
    let paused = Barrier::new(WRITERS as usize + 1);
    let resume = Barrier::new(WRITERS as usize + 1);
    let (running, peak) = (AtomicBool::new(true), AtomicU64::new(0));
    let started = std::time::Instant::now();
    let mut at_pauses = Vec::new();
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (store, paused, resume) = (store.clone(), &paused, &resume);
                s.spawn(move || {
                    for i in 1..=STEPS {
                        for t in (w..TASKS).step_by(WRITERS as usize) {
                            bounded_step(&store, &format!("task-{t}"), i);
                        }
                        if PAUSES.contains(&i) {
                            paused.wait();
                            resume.wait();
                        }
                    }
                })
            })
            .collect();
        let sampler = s.spawn(|| {
            while running.load(Ordering::Relaxed) {
                peak.fetch_max(store.stats().disk_bytes, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        for _ in PAUSES {
            paused.wait();
            at_pauses.push(compacted_disk());
            resume.wait();
        }
        writers.into_iter().for_each(|w| w.join().unwrap());
        running.store(false, Ordering::Relaxed);
        sampler.join().unwrap();
    });
    let run = started.elapsed();
    let peak = peak.into_inner();
    let written = store.stats().bytes_written;
    let half_second_of_writes = (written as f64 / run.as_secs_f64() / 2.0) as u64;
    let peak_bound =
        2 * bound + bound.max(agentwal::COMPACTION_DEAD_BYTES_MIN) + half_second_of_writes;
    at_pauses.push(compacted_disk());
    let stats = store.stats();
    assert_eq!(stats.tasks, TASKS);
    println!(
        "{} steps in {run:?}: written {written}, live {}, disk {} after each quarter \
         {at_pauses:?}, bound {bound}; peak during the run {peak}, peak bound {peak_bound}; \
         {} compactions (records: snapshot {snapshot}, delta {delta}, call {pair})",
        TASKS * STEPS,
        stats.live_bytes,
        stats.disk_bytes,
        stats.compactions,
    );
    for (quarter, disk) in at_pauses.iter().enumerate() {
        assert!(
            *disk <= bound,
            "after quarter {}: disk {disk} > bound {bound}",
            quarter + 1
        );
    }
    assert!(stats.disk_bytes <= bound, "{stats:?}");
    assert!(peak <= peak_bound, "peak {peak} > {peak_bound}");
    // The journal keeps the calls of the steps after the oldest retained checkpoint, and
    // the index holds no more (a pruned call leaves it with its records).
    let kept: Vec<String> = (STEPS - KEEP + 2..=STEPS)
        .map(|i| format!("call-{i:06}"))
        .collect();
    for t in 0..TASKS {
        let task = format!("task-{t}");
        let calls: Vec<String> = store
            .calls(&task)
            .unwrap()
            .into_iter()
            .map(|c| c.call_id)
            .collect();
        assert_eq!(calls, kept, "{task}");
        let oldest = format!("call-{:06}", STEPS - KEEP + 1);
        assert_eq!(store.call_result(&task, &oldest).unwrap(), None, "{task}");
    }
    assert!(
        store.index_call_entries() as u64 <= TASKS * calls_per_task,
        "{} call entries",
        store.index_call_entries()
    );
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
    // Opening reads live data, not the 100,000 steps of history: per task the
    // checkpoints and calls above, and the active segment's records (calls pruned before
    // the reopen among them, which the index serves again until the next pass).
    let active_records = segment_bytes / pair.min(delta);
    assert!(
        report.records < TASKS * (checkpoints_per_task + 2 * calls_per_task) + active_records,
        "{report:?}"
    );
    for t in 0..TASKS {
        let task = format!("task-{t}");
        assert_eq!(store.load_latest(&task).unwrap().unwrap().seq, STEPS);
        let last = format!("call-{STEPS:06}");
        assert_eq!(
            store.call_result(&task, &last).unwrap(),
            Some(b"ten results".to_vec())
        );
    }
    store.verify().unwrap();
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

/// Options for the journal's retention tests: small segments, no background pass.
fn journal(keep: Option<u32>) -> Options {
    Options {
        segment_bytes: 4096,
        ..small(keep)
    }
}

/// Commits checkpoints of a task no test here reads, until the log has rotated past the
/// records written so far (so that a forced pass compacts them).
fn rotate(store: &Store) {
    let segments = store.stats().segments;
    let mut i = 0;
    while store.stats().segments == segments {
        i += 1;
        store.commit("filler", &delta(9, i)).unwrap();
    }
}

fn call_ids(store: &Store, task: &str) -> Vec<String> {
    let calls = store.calls(task).unwrap();
    calls.into_iter().map(|c| c.call_id).collect()
}

/// The journal's retention rule (docs/store.md §4): with retention configured, a compaction
/// pass drops a finished call whose finish lies before its task's oldest retained
/// checkpoint, its records and its index entry; pending calls and calls finished later
/// stay, across reopens. Without retention nothing is dropped.
#[test]
fn compaction_drops_calls_finished_before_the_oldest_retained_checkpoint() {
    for keep in [Some(2), None] {
        let dir = tempfile::tempdir().unwrap();
        let store: Store = Store::open_with(dir.path(), journal(keep)).unwrap();
        store.begin_call("t", "before-1", "tool", b"a").unwrap();
        store.finish_call("t", "before-1", b"r0").unwrap();
        store.commit("t", &delta(0, 1)).unwrap(); // a snapshot: the fold base of seq 3
        store.begin_call("t", "pending", "tool", b"p").unwrap();
        store.begin_call("t", "before-3", "tool", b"b").unwrap();
        store.finish_call("t", "before-3", b"r1").unwrap();
        store.commit("t", &delta(0, 2)).unwrap();
        store.commit("t", &delta(0, 3)).unwrap(); // with keep 2, the oldest retained
        store.begin_call("t", "after-3", "tool", b"c").unwrap();
        store.finish_call("t", "after-3", b"r2").unwrap();
        store.commit("t", &delta(0, 4)).unwrap();
        // A deleted task's calls go whatever their state.
        store.begin_call("gone", "done", "tool", b"d").unwrap();
        store.finish_call("gone", "done", b"r3").unwrap();
        store.begin_call("gone", "open", "tool", b"e").unwrap();
        store.delete_task("gone").unwrap();
        assert_eq!(
            store.list_checkpoints("t").unwrap()[0].seq,
            keep.map_or(1, |_| 3)
        );
        // Nothing is pruned before a pass.
        assert_eq!(
            store.call_result("t", "before-1").unwrap(),
            Some(b"r0".to_vec())
        );
        rotate(&store);
        store.compact().unwrap();
        let all = ["before-1", "pending", "before-3", "after-3"];
        let (kept, entries): (&[&str], usize) = match keep {
            // "before-3" finished after the fold base (seq 1) but before seq 3: no retained
            // checkpoint can resume from before it, so it goes.
            Some(_) => (&["pending", "after-3"], 2),
            None => (&all, 4),
        };
        assert_eq!(call_ids(&store, "t"), kept, "keep {keep:?}");
        assert_eq!(store.index_call_entries(), entries, "keep {keep:?}");
        let results = |store: &Store| {
            all.map(|c| {
                store
                    .call_result("t", c)
                    .unwrap()
                    .map(|r| String::from_utf8(r).unwrap())
            })
        };
        let want = match keep {
            Some(_) => [None, None, None, Some("r2".into())],
            None => [
                Some("r0".into()),
                None,
                Some("r1".into()),
                Some("r2".into()),
            ],
        };
        assert_eq!(results(&store), want, "keep {keep:?}");
        assert_eq!(store.pending_calls("t").unwrap().len(), 1);
        assert_eq!(store.call_result("gone", "done").unwrap(), None);
        if keep.is_some() {
            // The dropped ids are free again: a new call, not the old one.
            store.begin_call("t", "before-1", "other", b"new").unwrap();
        } else {
            assert!(matches!(
                store.begin_call("t", "before-1", "other", b"new"),
                Err(agentwal::Error::InvalidArgument(_))
            ));
        }
        let ids = call_ids(&store, "t");
        drop(store);
        let store: Store = Store::open_with(dir.path(), journal(keep)).unwrap();
        assert_eq!(call_ids(&store, "t"), ids, "keep {keep:?}: after a reopen");
        assert_eq!(results(&store), want, "keep {keep:?}: after a reopen");
        assert!(!store.tasks().unwrap().contains(&"gone".to_string()));
        store.verify().unwrap();
        if keep.is_some() {
            let pending: Vec<String> = (store.pending_calls("t").unwrap().into_iter())
                .map(|p| p.call_id)
                .collect();
            assert_eq!(pending, ["pending", "before-1"]);
            // A pending call stays however old it gets.
            for i in 5..=20 {
                store.commit("t", &delta(0, i)).unwrap();
            }
            store.finish_call("t", "before-1", b"late").unwrap();
            rotate(&store);
            store.compact().unwrap();
            assert_eq!(call_ids(&store, "t"), ["pending", "before-1"]);
        }
    }
}

/// A call retention no longer keeps is pruned at the pass that finds it (its result is
/// gone from then on); its id stays taken, and a write of it is refused, until its records
/// have left the log.
#[test]
fn a_pruned_call_answers_none_and_keeps_its_id_until_its_records_go() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open_with(dir.path(), journal(Some(1))).unwrap();
    store.begin_call("t", "c", "tool", b"a").unwrap();
    store.finish_call("t", "c", b"r").unwrap();
    store.commit("t", &delta(0, 1)).unwrap();
    // Still in the active segment, which a background pass leaves alone: pruned, not
    // dropped.
    store.compact_sealed_segments().unwrap();
    assert_eq!(store.call_result("t", "c").unwrap(), None);
    assert!(call_ids(&store, "t").is_empty());
    assert_eq!(store.index_call_entries(), 1);
    let invalid = |r: agentwal::Result<()>| matches!(r, Err(agentwal::Error::InvalidArgument(_)));
    assert!(invalid(store.begin_call("t", "c", "tool", b"a")));
    assert!(invalid(store.finish_call("t", "c", b"r")));
    // A reopen before its records go serves it again, until the next pass.
    drop(store);
    let store: Store = Store::open_with(dir.path(), journal(Some(1))).unwrap();
    assert_eq!(store.call_result("t", "c").unwrap(), Some(b"r".to_vec()));
    rotate(&store);
    store.compact().unwrap();
    assert_eq!(store.call_result("t", "c").unwrap(), None);
    assert_eq!(store.index_call_entries(), 0);
    store.begin_call("t", "c", "tool", b"again").unwrap();
    assert_eq!(call_ids(&store, "t"), ["c"]);
}

/// The soundness trap: a pass compacts only a prefix of segments, so a pruned call whose
/// begin lies in it and whose finish lies after it must keep its begin; dropping it would
/// leave a finish without a begin, which recovery reports as `Inconsistent`. Its records
/// go once they share a segment. Each step is reopened and verified.
#[test]
fn a_pruned_call_split_across_segments_leaves_the_log_whole() {
    let dir = tempfile::tempdir().unwrap();
    let opts = journal(Some(1));
    let reopen = |store: Store| -> Store {
        drop(store);
        let store: Store = Store::open_with(dir.path(), opts).unwrap();
        store.verify().unwrap();
        store
    };
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    // The begin fills most of segment 1; the finish does not fit after it.
    store
        .begin_call("t", "split", "tool", &[b'a'; 3000])
        .unwrap();
    assert_eq!(store.stats().segments, 1);
    store.finish_call("t", "split", &[b'r'; 2000]).unwrap();
    assert_eq!(store.stats().segments, 2, "the finish went to segment 2");
    store.commit("t", &delta(0, 1)).unwrap();
    // Segment 1 is the prefix; the finish sits in the active segment after it, which a
    // background pass leaves alone.
    store.compact_sealed_segments().unwrap();
    assert_eq!(store.call_result("t", "split").unwrap(), None, "pruned");
    let store = reopen(store);
    assert_eq!(
        store.call_result("t", "split").unwrap(),
        Some(vec![b'r'; 2000]),
        "both records are still on disk"
    );
    // Once both are sealed, a pass copies them into one compacted segment ...
    rotate(&store);
    store.compact().unwrap();
    let store = reopen(store);
    assert_eq!(
        store.call_result("t", "split").unwrap(),
        Some(vec![b'r'; 2000])
    );
    // ... and the next drops them together.
    store.compact().unwrap();
    assert_eq!(store.index_call_entries(), 0);
    let store = reopen(store);
    assert_eq!(store.call_result("t", "split").unwrap(), None);
    assert_eq!(store.index_call_entries(), 0);
    assert_eq!(store.load_latest("t").unwrap().unwrap().seq, 1);
}

/// `max_age` alone is retention too: once every checkpoint but the latest is too old, a
/// pass drops the calls that finished before the latest.
#[test]
fn max_age_prunes_the_calls_that_finished_before_the_oldest_young_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        max_age: Some(Duration::from_millis(50)),
        ..journal(None)
    };
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    store.begin_call("t", "old", "tool", b"a").unwrap();
    store.finish_call("t", "old", b"r").unwrap();
    store.commit("t", &delta(0, 1)).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    store.begin_call("t", "young", "tool", b"b").unwrap();
    store.finish_call("t", "young", b"r").unwrap();
    store.commit("t", &delta(0, 2)).unwrap();
    store.begin_call("t", "after", "tool", b"c").unwrap();
    store.finish_call("t", "after", b"r").unwrap();
    rotate(&store);
    store.compact().unwrap();
    // Seq 1 is too old, seq 2 (the latest) is kept: "young" finished before it.
    assert_eq!(store.list_checkpoints("t").unwrap()[0].seq, 2);
    assert_eq!(call_ids(&store, "t"), ["after"]);
    assert_eq!(store.index_call_entries(), 1);
}

/// Regression: `compact` seals the active segment; a record larger than a segment
/// appended right after was planned one segment too far (past the next, never created),
/// and the writer's assertion that segments are created in order fired.
#[test]
fn a_record_larger_than_a_segment_right_after_compact() {
    let dir = tempfile::tempdir().unwrap();
    let opts = small(None);
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    store.commit("t", &delta(0, 1)).unwrap();
    store.compact().unwrap();
    let big = AgentDelta::default().message(Message::user("b".repeat(3 * (16 << 10))));
    assert_eq!(store.commit("t", &big).unwrap(), 2);
    store.commit("t", &delta(0, 3)).unwrap();
    let want = store.load_latest("t").unwrap().unwrap();
    drop(store);
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    store.verify().unwrap();
    let got = store.load_latest("t").unwrap().unwrap();
    assert_eq!((got.seq, &*got.state), (3, &*want.state));
}
