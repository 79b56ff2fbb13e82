//! Faults at chosen points: a directory fsync in compaction, a segment header read, a
//! failed compact.

use crate::common::sim_workload::*;
use agentwal::storage::sim::{SimOp, SimStorage};

/// Regression: when the rename installing a compacted segment worked but the directory
/// fsync after it failed, compaction returned the error without repointing the index, so
/// the handle read old offsets in the new file: `Corruption` for healthy records, or
/// another record's data if an old offset fell on a record boundary.
#[test]
fn failed_directory_fsync_in_compaction_leaves_reads_working() {
    // No snapshots and no retention: every load folds every delta, compacted ones too.
    let options = agentwal::Options {
        segment_bytes: 4096,
        snapshot_every: 1000,
        auto_compact: false,
        ..agentwal::Options::default()
    };
    let open = |sim: &SimStorage| {
        let storage: std::sync::Arc<dyn agentwal::storage::Storage> =
            std::sync::Arc::new(sim.clone());
        agentwal::Store::<Tally>::open_on(storage, DIR, options).unwrap()
    };
    let delta = |i: usize| vec![i as u8; 100 + 10 * i];
    let expected = |t: usize, upto: usize| {
        let mut state = Tally::default();
        (0..upto)
            .filter(|i| i % 3 == t)
            .for_each(|i| agentwal::State::apply(&mut state, &delta(i)));
        state
    };
    let scenario = |sim: &SimStorage| {
        let store = open(sim);
        for i in 0..30 {
            store.commit(&format!("t{}", i % 3), &delta(i)).unwrap();
        }
        store.delete_task("t2").unwrap(); // something dead, so the records move
        let compacted = store.compact();
        (store, compacted)
    };
    let dry = SimStorage::new();
    dry.record();
    scenario(&dry).1.unwrap();
    let ops = dry.take_recording();
    let install = ops.iter().position(|op| {
        matches!(op, SimOp::Rename(from, _) | SimOp::Exchange(from, _)
            if from.to_string_lossy().ends_with(".compact.tmp"))
    });
    let n = install.expect("compaction installed a segment") + 1;
    assert!(matches!(ops[n], SimOp::SyncDir(_)));

    let sim = SimStorage::new();
    sim.fail_at(n as u64, false);
    let (store, compacted) = scenario(&sim);
    assert!(compacted.is_err(), "the failed fsync is reported");
    for t in 0..2 {
        let cp = store.load_latest(&format!("t{t}")).unwrap().unwrap();
        assert_eq!(*cp.state, expected(t, 30), "task t{t} on the live handle");
    }
    store.commit("t0", &delta(30)).unwrap();
    drop(store);
    for image in [sim.durable_image(), sim.volatile_image()] {
        let store = open(&SimStorage::from_image(&image));
        assert_eq!(
            *store.load_latest("t0").unwrap().unwrap().state,
            expected(0, 31)
        );
        assert_eq!(
            *store.load_latest("t1").unwrap().unwrap().state,
            expected(1, 31)
        );
        assert!(store.load_latest("t2").unwrap().is_none());
    }
}

/// Regression: the open looked for the newest compacted segment by reading every
/// segment's header and took a header it could not read for "not compacted". After a
/// crash between a compaction's install and its deletions (superseded segments still on
/// disk), a transient read error on the compacted segment's header then made recovery
/// read the superseded segments and report the compacted one as corruption ("compacted
/// segment after older segments") instead of the I/O error.
#[test]
fn io_error_reading_a_segment_header_is_not_reported_as_corruption() {
    let sim = SimStorage::new();
    sim.record();
    let store = open(&sim).unwrap();
    // A call kept live in the first segment: compaction deletes a leading run of dead
    // segments before it writes (docs/store.md §7), and this test needs segments that only
    // the compacted one supersedes.
    store.begin_call("t0", "c0", "tool", b"args").unwrap();
    for i in 0..60 {
        store
            .commit(&format!("t{}", i % 3), &vec![i as u8; 100 + 10 * i])
            .unwrap();
    }
    store.delete_task("t2").unwrap();
    store.compact().unwrap();
    drop(store);
    let ops = sim.take_recording();
    let install = ops.iter().position(|op| {
        matches!(op, SimOp::Rename(from, _) | SimOp::Exchange(from, _)
            if from.to_string_lossy().ends_with(".compact.tmp"))
    });
    // The disk after the install's directory fsync, before the deletions.
    let crashed = SimStorage::new();
    ops[..install.unwrap() + 2]
        .iter()
        .for_each(|op| crashed.apply(op));
    let image = crashed.volatile_image();
    let segments = image
        .files
        .keys()
        .filter(|p| p.extension().is_some_and(|e| e == "wal"));
    assert!(
        segments.count() >= 3,
        "superseded segments before the compacted one"
    );
    let clean = SimStorage::from_image(&image);
    let store = open(&clean).unwrap();
    let opened = clean.ops();
    let expected = contents(&store).unwrap();
    for fault in 0..opened {
        let sim = SimStorage::from_image(&image);
        sim.fail_at(fault, false);
        match open(&sim) {
            Ok(store) => assert_eq!(contents(&store).unwrap(), expected),
            Err(agentwal::Error::Io { .. }) => {}
            Err(e) => panic!("operation {fault} of the open failing: {e}"),
        }
    }
}

/// `compact` seals the active segment (a seal record, then an fdatasync) before its pass.
/// For every storage operation of a `compact` on a store smaller than a segment, failing
/// once: the commits acknowledged afterwards on that handle (none, if the failure
/// poisoned it) are all in the image the disk holds, and in the page cache's.
#[test]
fn a_failed_compact_never_acknowledges_a_commit_it_then_loses() {
    let options = agentwal::Options {
        auto_compact: false,
        ..agentwal::Options::default()
    };
    let open = |sim: &SimStorage| {
        let storage: std::sync::Arc<dyn agentwal::storage::Storage> =
            std::sync::Arc::new(sim.clone());
        agentwal::Store::<Tally>::open_on(storage, DIR, options)
    };
    let delta = |i: usize| vec![i as u8; 50 + i];
    let fold = |n: usize| {
        let mut state = Tally::default();
        (0..n).for_each(|i| agentwal::State::apply(&mut state, &delta(i)));
        state
    };
    let before = |sim: &SimStorage| {
        let store = open(sim).unwrap();
        for i in 0..10 {
            store.commit("t", &delta(i)).unwrap();
        }
        store
    };
    let dry = SimStorage::new();
    let store = before(&dry);
    let first = dry.ops();
    dry.record();
    store.compact().unwrap();
    let last = dry.ops();
    let ops = dry.take_recording();
    drop(store);
    assert_eq!(
        ops.len() as u64,
        last - first,
        "one recorded op per operation"
    );
    // The seal's writes and fdatasync: those before the pass creates its segment.
    let pass_starts = ops.iter().position(|op| matches!(op, SimOp::Create(..)));
    let seal_ops = ops[..pass_starts.expect("the pass wrote a segment")]
        .iter()
        .filter(|op| matches!(op, SimOp::Write(..) | SimOp::SyncData(_)))
        .count();
    assert!(seal_ops >= 2, "a seal record and its fdatasync: {ops:?}");
    for n in first..last {
        let in_seal = matches!(
            ops[(n - first) as usize],
            SimOp::Write(..) | SimOp::SyncData(_)
        ) && pass_starts.is_some_and(|p| ((n - first) as usize) < p);
        let sim = SimStorage::new();
        let store = before(&sim);
        sim.fail_at(n, false);
        let compacted = store.compact();
        let mut acked = 10;
        for i in 10..15 {
            match store.commit("t", &delta(i)) {
                Ok(_) => acked = i + 1,
                Err(e) => {
                    // Half a seal may be on disk, or the kernel may have dropped the
                    // pages a failed fdatasync did not write: the handle is poisoned.
                    assert!(
                        !in_seal || matches!(e, agentwal::Error::Poisoned { .. }),
                        "op {n}: {e}"
                    );
                    break;
                }
            }
        }
        assert!(
            !in_seal || acked == 10,
            "op {n}: a failed seal, then {} commits acknowledged",
            acked - 10
        );
        assert!(
            compacted.is_err() || acked == 15,
            "op {n}: a commit failed after a compact that did not"
        );
        drop(store);
        for (what, image) in [
            ("durable", sim.durable_image()),
            ("volatile", sim.volatile_image()),
        ] {
            let store = open(&SimStorage::from_image(&image))
                .unwrap_or_else(|e| panic!("op {n}, {what} image: reopen: {e}"));
            let cp = store.load_latest("t").unwrap().expect("committed");
            assert!(
                cp.seq >= acked as u64,
                "op {n}, {what} image: seq {} after {acked} acknowledged",
                cp.seq
            );
            assert_eq!(*cp.state, fold(cp.seq as usize), "op {n}, {what} image");
        }
    }
}
