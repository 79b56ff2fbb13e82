//! The workload, and running it with one storage operation failing once or from then
//! on.

use crate::common::env::env_u64;
use crate::common::sim_workload::*;
use agentwal::storage::sim::{SimOp, SimStorage};

pub(crate) const SEED: u64 = 0x10E4;

/// Steps per workload (`AGENTWAL_IO_ERRORS_STEPS` overrides). Each of a workload's
/// operations fails in a run of its own, so a run's cost grows with the square of this:
/// 40 steps of the workload with big states, forks and recycling take about as many
/// operations as the 80 steps of the workload before it had them.
const STEPS: usize = 40;

/// Workloads (seeds) per run (`AGENTWAL_IO_ERRORS_SEEDS` overrides). 8, down from 16
/// for the workload without big states: a run of these costs about 1.7 times as much
/// (big records to write, copy and check at every operation), and 8 of them cover every
/// kind of segment (`Coverage::assert_all`).
pub(crate) const SEEDS: u64 = 8;

/// `io_errors_during_recovery` opens the disk after every this many operations (7 before
/// the workload had big states: their disks cost four times as much to recover, and the
/// retired files waiting for reuse add operations to every open).
pub(crate) const RECOVERY_POINT_EVERY: usize = 16;

pub(crate) fn steps() -> usize {
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
pub(crate) fn run_with_fault(plan: &[Vec<Step>], n: u64, persistent: bool) -> Result<(), String> {
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
