//! Salvage around corrupt snapshots and lost checkpoints, and reopening a headless
//! history.

use std::path::Path;

use agentwal::{AgentDelta, AgentState, Options, RecoveryMode, Store, SyncMode};

use crate::{contents, delta, small};

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
