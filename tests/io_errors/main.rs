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

#[path = "../common/mod.rs"]
mod common;

use agentwal::storage::sim::SimStorage;
use common::env::env_u64;
use common::sim_workload::*;

mod targeted;
mod workload;

use workload::{RECOVERY_POINT_EVERY, SEED, SEEDS, run_with_fault, steps};

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
