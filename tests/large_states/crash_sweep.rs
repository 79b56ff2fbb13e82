//! A crash at every point of a large state's life recovers what was acknowledged.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use crate::common::panic_text;
use crate::common::rng::Rng;
use crate::common::sim_workload::{self as sim, Coverage, Step};
use agentwal::storage::sim::{SimImage, SimOp, SimStorage};

// ---------------------------------------------------------------------------------------
// The crash sweep, on the simulated disk with `common::sim_workload`'s 4 KiB segments.

/// Systematic images (cuts, directory subsets) per crash point, at most, besides the
/// durable and volatile ones; and random ones.
const CUTS: usize = 16;

const SAMPLES: usize = 6;

/// The life of a state of 10 segments, as workload steps (one thread).
fn life() -> Vec<Step> {
    let mut rng = Rng(0xB16);
    let mut text_rng = Rng(0x7E47);
    let mut bytes = |n: usize| rng.bytes(n);
    // Bytes compaction compresses (the big state stays incompressible: ten segments on
    // disk, compacted or not).
    let mut text = |n: usize| sim::compressible_bytes(&mut text_rng, n);
    let commit = |task: &str, delta: Vec<u8>| Step::Commit(task.into(), delta);
    let mut steps = vec![commit("big", bytes(sim::BULK_BYTES_MAX + 4096))];
    steps.push(commit("big", bytes(40)));
    steps.push(commit("big", bytes(60)));
    steps.push(Step::Fork("big".into(), "fork".into()));
    steps.push(commit("fork", bytes(30)));
    steps.push(Step::Compact);
    steps.push(commit("fork", text(5000))); // a delta larger than a segment
    steps.push(commit("big", bytes(20)));
    steps.push(Step::Delete("big".into()));
    steps.push(Step::Compact);
    for i in 0..6 {
        steps.push(commit("fork", text(900 + 10 * i)));
    }
    // A record of a segment of its own seals the segment before it: compacted next.
    steps.push(commit("other", bytes(5000)));
    steps.push(Step::Compact);
    steps.push(Step::Load("fork".into()));
    steps
}

/// Indices (into `crash_images`) of the images checked when there are `len`: durable,
/// volatile, at most `CUTS` systematic ones spread over the rest, and the random ones.
fn selected(len: usize) -> Vec<usize> {
    if len <= 2 + CUTS + SAMPLES {
        return (0..len).collect();
    }
    let systematic = 2..len - SAMPLES;
    let step = systematic.len().div_ceil(CUTS);
    let mut picked: Vec<usize> = (0..2).chain(len - SAMPLES..len).collect();
    picked.extend(systematic.clone().step_by(step.max(1)));
    picked.push(systematic.end - 1);
    picked.sort_unstable();
    picked.dedup();
    picked
}

/// Recovers `image` (a crash before operation `n`), judges it, writes and checks that
/// the write is durable.
fn check_image(image: &SimImage, n: u64, events: &[sim::Event]) -> Result<(), String> {
    let disk = SimStorage::from_image(image);
    let store = sim::open(&disk).map_err(|e| format!("open: {e}"))?;
    let report = store.recovery_report();
    if !report.skipped.is_empty() || !report.lost.is_empty() {
        return Err(format!("recovery skipped or lost records: {report:?}"));
    }
    let got = sim::contents(&store)?;
    sim::check(&got, events, n)?;
    let seq = store
        .commit("after", &b"after".to_vec())
        .map_err(|e| format!("commit after recovery: {e}"))?;
    let durable = SimStorage::from_image(&disk.durable_image());
    drop(store);
    let again = sim::open(&durable).map_err(|e| format!("open after writing: {e}"))?;
    let mut after = sim::contents(&again)?;
    match after
        .remove("after")
        .and_then(|(cps, _)| cps.last().cloned())
    {
        Some((s, _)) if s == seq => {}
        other => return Err(format!("the commit after recovery is lost: {other:?}")),
    }
    match after == got {
        true => Ok(()),
        false => Err("writing after recovery changed the recovered contents".into()),
    }
}

#[test]
fn crash_sweep_of_a_state_ten_segments_large() {
    let started = Instant::now();
    let disk = SimStorage::new();
    disk.record();
    let store = sim::open(&disk).unwrap();
    let plan = vec![life()];
    let events = sim::run(&store, &disk, &plan);
    assert!(
        events.iter().all(|e| e.outcome.is_ok()),
        "calls failed without faults: {events:?}"
    );
    sim::check_loads(&events).unwrap();
    let big_snapshots = sim::big_snapshots(&store);
    let compressed = sim::compressed_bodies(&store);
    let infos = store.list_checkpoints("fork").unwrap();
    assert!(
        infos
            .iter()
            .any(|i| i.snapshot && i.bytes > 10 * sim::options().segment_bytes),
        "the fork holds a snapshot of 10 segments: {infos:?}"
    );
    drop(store);
    let ops = disk.take_recording();
    let coverage = Coverage {
        big_snapshots,
        compressed,
        ..Coverage::of(&ops, &events)
    };
    println!("crash sweep of a big state: {coverage:?}");
    assert!(coverage.max_state_bytes >= 10 * sim::options().segment_bytes);
    coverage.assert_all("crash sweep of a big state");

    let (mut images, mut points, mut failures) = (0, 0, Vec::new());
    let replay = SimStorage::new();
    for n in 0..=ops.len() as u64 {
        let next = ops.get(n as usize);
        if next.is_none_or(SimOp::mutates) {
            points += 1;
            let mut all = replay.crash_images(0xB16 ^ n, SAMPLES);
            let mut at = 0;
            for i in selected(all.len()) {
                let image = all.nth(i - at).expect("an image");
                at = i + 1;
                images += 1;
                let outcome = catch_unwind(AssertUnwindSafe(|| check_image(&image, n, &events)));
                let why = match outcome {
                    Ok(Ok(())) => continue,
                    Ok(Err(why)) => why,
                    Err(panic) => format!("panic: {}", panic_text(&panic)),
                };
                let msg = format!("crash point {n}, image {i} ({}): {why}", image.label);
                eprintln!("FAILED {msg}");
                failures.push(msg);
            }
        }
        if let Some(op) = next {
            replay.apply(op);
        }
        if failures.len() >= 10 {
            break;
        }
    }
    println!(
        "crash sweep of a big state: {images} images at {points} crash points in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
