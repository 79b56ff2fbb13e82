//! Injected I/O errors: for every storage operation `N` of an agent workload, the run is
//! repeated with operation `N` failing, once and then from `N` on (`SimStorage::fail_at`).
//! A single writer thread makes the operation sequence the same in every run, so `N`
//! hits the same call each time. Checked for every run:
//!
//! - the call that ran operation `N` returns an error (no error is swallowed);
//! - after a failed write or fsync in the log's append path (a commit, tool-call record or
//!   deletion), nothing later is acknowledged on that handle: every later write returns
//!   `Error::Poisoned`;
//! - every load that succeeds on the handle, before or after the error, returns the fold
//!   of the commits acknowledged so far;
//! - reopening recovers a valid prefix holding every acknowledged commit, call record and
//!   deletion: on what the disk holds (`durable_image`, as after a power loss) and on
//!   what the page cache shows (as after a process kill, or a reopen in the same boot);
//!   and after that reopen, writing works.
//!
//! The workload (`common::sim_workload`) has states of up to 10 segments, whose records
//! get segments of their own, forks of them, and compactions whose retired segment
//! files later rotations recycle; the clean runs together must have covered each
//! (`Coverage::assert_all`).
//!
//! `AGENTWAL_IO_ERRORS_SEED` changes the workload (default below; failures print it),
//! `AGENTWAL_IO_ERRORS_SEEDS` the number of workloads and `AGENTWAL_IO_ERRORS_STEPS` their
//! length (scripts/torture.sh runs more and longer ones).

mod common;

use agentwal::storage::sim::{SimOp, SimStorage};
use common::env::env_u64;
use common::sim_workload::*;

const SEED: u64 = 0x10E4;
/// Steps per workload (`AGENTWAL_IO_ERRORS_STEPS` overrides). Each of a workload's
/// operations fails in a run of its own, so a run's cost grows with the square of this:
/// 40 steps of the workload with big states, forks and recycling take about as many
/// operations as the 80 steps of the workload before it had them.
const STEPS: usize = 40;
/// Workloads (seeds) per run (`AGENTWAL_IO_ERRORS_SEEDS` overrides). 8, down from 16
/// for the workload without big states: a run of these costs about 1.7 times as much
/// (big records to write, copy and check at every operation), and 8 of them cover every
/// kind of segment (`Coverage::assert_all`).
const SEEDS: u64 = 8;

/// `io_errors_during_recovery` opens the disk after every this many operations (7 before
/// the workload had big states: their disks cost four times as much to recover, and the
/// retired files waiting for reuse add operations to every open).
const RECOVERY_POINT_EVERY: usize = 16;

fn steps() -> usize {
    env_u64("AGENTWAL_IO_ERRORS_STEPS").map_or(STEPS, |s| s as usize)
}

/// Whether a failed operation (as recorded) only reads.
fn is_read(what: &str) -> bool {
    let name = what.trim_end_matches(" (failed)");
    [
        "read", "read_all", "len", "list", "open", "view", "try_lock",
    ]
    .contains(&name)
}

/// One run with operation `n` failing (from then on if `persistent`).
fn run_with_fault(plan: &[Vec<Step>], n: u64, persistent: bool) -> Result<(), String> {
    let sim = SimStorage::new();
    sim.fail_at(n, persistent);
    sim.record();
    let (events, what) = match open(&sim) {
        Ok(store) => {
            let events = run(&store, &sim, plan);
            drop(store);
            let ops = sim.take_recording();
            (events, ops.get(n as usize).cloned())
        }
        Err(e) => {
            // The open hit it; it must be the open's own operation.
            if sim.ops() <= n {
                return Err(format!("open failed without reaching the fault: {e}"));
            }
            (Vec::new(), sim.take_recording().get(n as usize).cloned())
        }
    };
    let what = match what {
        Some(SimOp::NoEffect(what)) if what.ends_with("(failed)") => what,
        None => return Ok(()), // the run did not reach operation n
        Some(op) => return Err(format!("operation {n} was meant to fail: {op:?}")),
    };
    let mutation = !is_read(&what);
    if let Some(hit) = events.iter().find(|e| e.start <= n && n < e.end) {
        // Compaction reads the sizes of the segments it deletes for its report only.
        let report_size = hit.step == Step::Compact && is_read(&what) && hit.outcome.is_ok();
        if hit.outcome.is_ok() && !report_size {
            return Err(format!("{:?} swallowed the failed {what}", hit.step));
        }
        // After a failed write or fsync of the append path nothing is acknowledged, and
        // whatever reaches the log is refused as poisoned (with the fault once, every
        // commit reaches it; from then on, a commit may fail reading first).
        let writes = |e: &&Event| !matches!(e.step, Step::Load(_) | Step::Compact);
        if mutation && writes(&hit) {
            let later = events.iter().filter(|e| e.start > hit.start).filter(writes);
            let commit = |e: &&Event| matches!(e.step, Step::Commit(..));
            let bad = |e: &&Event| e.outcome.is_ok() || !persistent && commit(e) && !e.poisoned;
            if let Some(e) = later.into_iter().find(bad) {
                let after = &hit.step;
                return Err(format!(
                    "{:?} after the failed {what} in {after:?}: {:?}",
                    e.step, e.outcome
                ));
            }
        }
    }
    // With the fault once, later loads, and commits on a handle the fault did not
    // poison, hit no fault: they must work.
    let poisoned = events.iter().any(|e| e.poisoned);
    for e in events
        .iter()
        .filter(|e| !persistent && e.start > n && e.outcome.is_err())
    {
        let commit = matches!(e.step, Step::Commit(..)) && !poisoned;
        if matches!(e.step, Step::Load(_)) || commit {
            return Err(format!(
                "{:?} after the failed {what}: {:?}",
                e.step, e.outcome
            ));
        }
    }
    check_loads(&events)?;
    for (disk, image) in [
        ("durable", sim.durable_image()),
        ("volatile", sim.volatile_image()),
    ] {
        let reopened = SimStorage::from_image(&image);
        let store = open(&reopened).map_err(|e| format!("reopen ({disk}): {e}"))?;
        let got = contents(&store)?;
        check(&got, &events, u64::MAX).map_err(|e| format!("reopen ({disk}): {e}"))?;
        store
            .commit("after", &b"x".to_vec())
            .map_err(|e| format!("commit after reopen ({disk}): {e}"))?;
    }
    Ok(())
}

#[test]
fn io_errors() {
    let first = env_u64("AGENTWAL_IO_ERRORS_SEED").unwrap_or(SEED);
    let seeds = env_u64("AGENTWAL_IO_ERRORS_SEEDS").unwrap_or(SEEDS);
    let mut failures = Vec::new();
    let (mut runs, mut ops) = (0, 0);
    let mut coverage = Coverage::default();
    for seed in first..first + seeds {
        let plan = plan(seed, 1, steps());
        let clean = SimStorage::new();
        clean.record();
        let store = open(&clean).unwrap();
        let events = run(&store, &clean, &plan);
        let big_snapshots = big_snapshots(&store);
        let compressed = compressed_bodies(&store);
        drop(store);
        assert!(
            events.iter().all(|e| e.outcome.is_ok()),
            "seed {seed}: clean run failed"
        );
        check_loads(&events).unwrap();
        coverage.add(&Coverage {
            big_snapshots,
            compressed,
            ..Coverage::of(&clean.take_recording(), &events)
        });
        let total = clean.ops();
        ops += total;
        for persistent in [false, true] {
            for n in 0..total {
                runs += 1;
                if let Err(why) = run_with_fault(&plan, n, persistent) {
                    let how = if persistent { "from then on" } else { "once" };
                    let msg = format!("seed {seed}: operation {n} failing {how}: {why}");
                    eprintln!("FAILED {msg}");
                    failures.push(msg);
                }
            }
        }
    }
    println!(
        "io errors: seeds {first}..{}, {runs} runs over {ops} operations; {coverage:?}",
        first + seeds
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    coverage.assert_all("io errors");
}

/// Faults during recovery: disks left by crashes at many points of a workload (torn
/// tails to repair, temporary files, compactions to finish) are opened with each
/// operation of the open, a few reads and one commit failing in turn. An injected I/O
/// error must come back as `Error::Io` (never as corruption, never swallowed by the
/// open), and the disk must then open cleanly with every acknowledged record.
#[test]
fn io_errors_during_recovery() {
    let seed = SEED;
    let sim = SimStorage::new();
    sim.record();
    let events = run(&open(&sim).unwrap(), &sim, &plan(seed, 1, steps()));
    let ops = sim.take_recording();
    let replay = SimStorage::new();
    let (mut runs, mut failures) = (0, Vec::new());
    for (n, op) in ops.iter().enumerate() {
        replay.apply(op);
        if n % RECOVERY_POINT_EVERY != 0 {
            continue;
        }
        let mut images = replay.crash_images(seed ^ n as u64, 1);
        let image = images.nth(2).unwrap_or_else(|| replay.volatile_image());
        let n = n as u64 + 1; // the disk after operations 0..=n
        let dry = SimStorage::from_image(&image);
        let _ = recover_and_write(&dry);
        for fault in 0..dry.ops() {
            for persistent in [false, true] {
                runs += 1;
                if let Err(why) = recovery_fault(&image, &events, n, fault, persistent) {
                    let how = if persistent { "from then on" } else { "once" };
                    let msg = format!(
                        "seed {seed}, disk after operation {n} ({}), recovery operation \
                         {fault} failing {how}: {why}",
                        image.label
                    );
                    eprintln!("FAILED {msg}");
                    failures.push(msg);
                }
            }
        }
    }
    println!("io errors during recovery: seed {seed}, {runs} runs");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Opens, reads everything, commits once; the operations after the open are counted.
fn recover_and_write(sim: &SimStorage) -> agentwal::Result<(u64, agentwal::Result<u64>)> {
    let store = open(sim)?;
    let opened = sim.ops();
    let _ = contents(&store);
    Ok((opened, store.commit("after", &b"x".to_vec())))
}

fn recovery_fault(
    image: &agentwal::storage::sim::SimImage,
    events: &[Event],
    n: u64,
    fault: u64,
    persistent: bool,
) -> Result<(), String> {
    let sim = SimStorage::from_image(image);
    sim.fail_at(fault, persistent);
    let acked_after = match recover_and_write(&sim) {
        Err(agentwal::Error::Io { .. }) => false,
        Err(e) => return Err(format!("open failed with {e}")),
        Ok((opened, _)) if fault < opened => return Err("the open swallowed it".into()),
        Ok((_, committed)) => committed.is_ok(),
    };
    for (disk, image) in [
        ("durable", sim.durable_image()),
        ("volatile", sim.volatile_image()),
    ] {
        let store =
            open(&SimStorage::from_image(&image)).map_err(|e| format!("reopen ({disk}): {e}"))?;
        let mut got = contents(&store)?;
        let after = got.remove("after");
        if acked_after && after.is_none() {
            return Err(format!("reopen ({disk}): the acknowledged commit is lost"));
        }
        check(&got, events, n).map_err(|e| format!("reopen ({disk}): {e}"))?;
    }
    Ok(())
}

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
