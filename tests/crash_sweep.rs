//! Crash-point sweep: power loss after every storage operation of an agent workload,
//! every disk image the fault model allows there (docs/log.md §2), recovered and judged.
//!
//! A round records one run of the workload (3 threads committing concurrently to their
//! own tasks, so commits share group-commit batches; 4 KiB segments, so they rotate
//! often; snapshots every 3 commits; retention of 3 checkpoints and explicit compaction;
//! task deletions; tool calls begun and finished; a state of up to 10 segments, whose
//! snapshots and big deltas get segments of their own; forks, of such a state too;
//! compaction retiring segment files that later rotations recycle) on `SimStorage`,
//! logging every storage
//! operation and, for every call, the operations it ran between. It then replays the
//! operations one by one. The disk after operations `0..n` is what a crash before
//! operation `n` leaves (for a read, the crash point after it has the same disk and more
//! calls acknowledged, so only points before a write are swept). For each such `n`, each
//! image from `SimStorage::crash_images` (the durable state, everything written, the
//! last write cut at every byte or sector, every subset of directory changes, and random
//! combinations of dropped, cut, lost, zeroed and garbled sectors) is opened and checked:
//!
//! - no panic, and the open succeeds (`Error::Corruption` fails the test: under this
//!   fault model a correct engine never leaves mid-log corruption);
//! - every acknowledged commit, tool-call record and deletion is there, nothing that had
//!   not started is, and every retained state is the fold of a prefix of the task's
//!   commits (`common::sim_workload::check`);
//! - recovery is idempotent: recovery on the same image crashes at a random operation,
//!   a random crash image of that is recovered again, and the contents are the same;
//! - writing after recovery works, and is durable: a commit and a call on the recovered
//!   store survive a crash right after.
//!
//! `AGENTWAL_CRASH_UNSAFE_OVERWRITE=1` drops the "powersafe overwrite" assumption (a
//! damaged sector may lose the durable bytes a write did not cover); DESIGN.md §3.2
//! explains why acknowledged commits can then be lost, and this mode shows it.
//!
//! Rounds with new seeds run until `AGENTWAL_CRASH_IMAGES` images (default 20,000) were
//! checked. The rounds' recordings together must have recycled a segment file, written
//! an oversized segment, compacted, forked a state larger than a segment and held a
//! snapshot larger than a segment (`common::sim_workload::Coverage`), or the sweep fails:
//! it would no longer cover them. `AGENTWAL_CRASH_SEED` sets the first seed, `AGENTWAL_CRASH_THREADS` the
//! workload's threads (1 makes the recording itself deterministic). The threads'
//! interleaving is not determined by the seed, so a failing round's recording is saved
//! to `target/crash-sweep/` and the failure prints the command that replays exactly it:
//! `AGENTWAL_CRASH_REPLAY=<file> [AGENTWAL_CRASH_POINT=<n>]`.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentwal::Store;
use agentwal::storage::Storage;
use agentwal::storage::sim::{SimImage, SimOp, SimStorage};
use common::env::env_u64;
use common::panic_text;
use common::rng::Rng;
use common::sim_workload::*;
use serde::{Deserialize, Serialize};

/// Steps per thread in a round: 36 (40 before the workload had big states) still give
/// one round more than the default 20,000 images, and each image, holding up to 10
/// segments of state and its snapshots, costs about 1.6 times what it did.
const STEPS: usize = 36;
/// Random images per crash point, on top of the systematic ones.
const SAMPLES: usize = 6;
/// The sweep stops after this many failures (`AGENTWAL_CRASH_MAX_FAILURES` overrides).
const MAX_FAILURES: usize = 20;

#[derive(Serialize, Deserialize)]
struct Recording {
    seed: u64,
    ops: Vec<SimOp>,
    events: Vec<Event>,
    big_snapshots: u64,
    #[serde(default)]
    compressed: u64,
}

fn record(seed: u64, threads: usize) -> Recording {
    let sim = SimStorage::new();
    sim.set_sync_latency(Duration::from_micros(300));
    sim.record();
    let store = open(&sim).expect("open on an empty disk");
    let events = run(&store, &sim, &plan(seed, threads, STEPS));
    let big_snapshots = big_snapshots(&store);
    let compressed = compressed_bodies(&store);
    drop(store);
    let failed: Vec<_> = events.iter().filter(|e| e.outcome.is_err()).collect();
    assert!(
        failed.is_empty(),
        "seed {seed:#x}: calls failed without faults: {failed:?}"
    );
    Recording {
        seed,
        ops: sim.take_recording(),
        events,
        big_snapshots,
        compressed,
    }
}

#[derive(Default)]
struct Totals {
    images: AtomicU64,
    points: AtomicU64,
    failures: Mutex<Vec<String>>,
    coverage: Mutex<Coverage>,
}

impl Totals {
    fn failed(&self) -> bool {
        let max = env_u64("AGENTWAL_CRASH_MAX_FAILURES").map_or(MAX_FAILURES, |m| m as usize);
        self.failures.lock().unwrap().len() >= max
    }
}

fn saved(rec: &Recording) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/crash-sweep");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("seed-{:#x}.rec", rec.seed));
    std::fs::write(&path, postcard::to_stdvec(rec).unwrap()).unwrap();
    path
}

/// Work for the checkers: a crash image of point `n`, or the disk a process kill before
/// operation `n` leaves (index `usize::MAX`).
type Job = (u64, usize, Result<SimImage, SimStorage>);

/// Checks every crash image of every crash point of `rec` (or only of point `only`).
fn sweep(rec: &Recording, only: Option<u64>, totals: &Totals) {
    let coverage = Coverage {
        big_snapshots: rec.big_snapshots,
        compressed: rec.compressed,
        ..Coverage::of(&rec.ops, &rec.events)
    };
    println!("seed {:#x}: {coverage:?}", rec.seed);
    totals.coverage.lock().unwrap().add(&coverage);
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let (tx, rx) = sync_channel::<Job>(4 * workers);
    let rx = Mutex::new(rx);
    let failures_before = totals.failures.lock().unwrap().len();
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                while let Ok((n, i, job)) = rx.lock().unwrap().recv() {
                    let seed = rec.seed ^ n.wrapping_mul(0x9E37_79B9) ^ (i as u64) << 40;
                    let report = |label: &str, outcome: std::thread::Result<Result<(), String>>| {
                        totals.images.fetch_add(1, Ordering::Relaxed);
                        let why = match outcome {
                            Ok(Ok(())) => return,
                            Ok(Err(why)) => why,
                            Err(panic) => format!("panic: {:?}", panic_text(&panic)),
                        };
                        let msg = format!("seed {:#x}, crash point {n}, {label}: {why}", rec.seed);
                        eprintln!("FAILED {msg}");
                        totals.failures.lock().unwrap().push(msg);
                    };
                    match job {
                        Ok(image) => {
                            let check = || check_image(&image, n, &rec.events, seed);
                            let label = format!("image {i} ({})", image.label);
                            report(&label, catch_unwind(AssertUnwindSafe(check)));
                        }
                        Err(disk) => check_kill(disk, n, &rec.events, seed, &report),
                    }
                }
            });
        }
        let replay = SimStorage::new();
        replay.set_powersafe_overwrite(std::env::var("AGENTWAL_CRASH_UNSAFE_OVERWRITE").is_err());
        let len = rec.ops.len() as u64;
        for n in 0..=len {
            let next = rec.ops.get(n as usize);
            let swept = next.is_none_or(SimOp::mutates) && only.is_none_or(|p| p == n);
            if swept && !totals.failed() {
                totals.points.fetch_add(1, Ordering::Relaxed);
                let images = replay.crash_images(rec.seed ^ n, SAMPLES);
                for (i, image) in images.enumerate() {
                    tx.send((n, i, Ok(image))).unwrap();
                }
                tx.send((n, usize::MAX, Err(replay.fork()))).unwrap();
            }
            if let Some(op) = next {
                replay.apply(op);
            }
        }
        drop(tx);
    });
    if totals.failures.lock().unwrap().len() > failures_before {
        let path = saved(rec);
        eprintln!(
            "replay: AGENTWAL_CRASH_REPLAY={} [AGENTWAL_CRASH_POINT=<n>] \
             cargo test --release --test crash_sweep -- --nocapture",
            path.display()
        );
    }
}

/// Counts a checked image and records its failure, if any (a panic is one).
type Report<'a> = dyn Fn(&str, std::thread::Result<Result<(), String>>) + 'a;

/// A process kill before operation `n` (the next process sees everything written, the
/// disk holds what was synced), recovery, one more commit and call, then a power loss:
/// every crash image of that must hold what was acknowledged, the new writes included.
fn check_kill(disk: SimStorage, n: u64, events: &[Event], seed: u64, report: &Report<'_>) {
    let mut rng = Rng(seed);
    let len = 1 + rng.below(100) as usize;
    let delta = rng.bytes(len);
    let recover_and_write = || -> Result<(), String> {
        let store = open(&disk).map_err(|e| format!("open: {e}"))?;
        check(&contents(&store)?, events, n)?;
        write_after(&store, &delta)
    };
    let outcome = catch_unwind(AssertUnwindSafe(recover_and_write));
    let failed = !matches!(outcome, Ok(Ok(())));
    report("process kill, recovery, commit", outcome);
    if failed {
        return;
    }
    for (i, image) in disk.crash_images(seed, SAMPLES).enumerate() {
        let check = || -> Result<(), String> {
            let store = open(&SimStorage::from_image(&image)).map_err(|e| format!("open: {e}"))?;
            let mut got = contents(&store)?;
            check_after(&mut got, &delta)?;
            check(&got, events, n)
        };
        let label = format!(
            "process kill, recovery, commit, power loss: image {i} ({})",
            image.label
        );
        report(&label, catch_unwind(AssertUnwindSafe(check)));
    }
}

/// Commits `delta` as seq 1 of the new task "after" and begins one call there.
fn write_after(store: &Store<Tally>, delta: &[u8]) -> Result<(), String> {
    let seq = store
        .commit("after", &delta.to_vec())
        .map_err(|e| format!("commit after recovery: {e}"))?;
    store
        .begin_call("after", "k", "tool", b"args")
        .map_err(|e| format!("begin_call after recovery: {e}"))?;
    match seq {
        1 => Ok(()),
        _ => Err(format!("first commit after recovery got seq {seq}")),
    }
}

/// Checks and removes what [`write_after`] wrote.
fn check_after(got: &mut Contents, delta: &[u8]) -> Result<(), String> {
    let (cps, calls) = got
        .remove("after")
        .ok_or("the commit after recovery is lost")?;
    let mut expected = Tally::default();
    agentwal::State::apply(&mut expected, &delta.to_vec());
    match cps.last() == Some(&(1, expected)) && calls.len() == 1 {
        true => Ok(()),
        false => Err("the writes after recovery are lost or wrong".into()),
    }
}

/// Recovers `image` (a crash before operation `n`) and judges it.
fn check_image(image: &SimImage, n: u64, events: &[Event], seed: u64) -> Result<(), String> {
    let mut rng = Rng(seed);
    // Recover and judge.
    let sim = SimStorage::from_image(image);
    let store = open(&sim).map_err(|e| format!("open: {e}"))?;
    let recovery_ops = sim.ops();
    let report = store.recovery_report();
    if !report.skipped.is_empty() || !report.lost.is_empty() {
        return Err(format!("recovery skipped or lost records: {report:?}"));
    }
    let got = contents(&store)?;
    check(&got, events, n)?;

    // A read-only open of the same image sees the same (and changes nothing); with no
    // segment yet, it finds no store.
    let reader = SimStorage::from_image(image);
    let storage: Arc<dyn Storage> = Arc::new(reader.clone());
    let segments = image
        .files
        .keys()
        .any(|p| p.extension().is_some_and(|e| e == "wal"));
    match Store::<Tally>::open_read_only_on(storage, DIR, options()) {
        Ok(read_only) if contents(&read_only)? != got => {
            return Err("a read-only open sees other contents".into());
        }
        Err(e) if segments => return Err(format!("read-only open: {e}")),
        _ => {}
    }
    if reader.volatile_image().files != image.files {
        return Err("a read-only open changed the disk".into());
    }

    // Crash during recovery, recover again: the same contents.
    let again = SimStorage::from_image(image);
    again.crash_after(rng.below(recovery_ops));
    let _ = open(&again);
    let mut images = again.crash_images(seed, 2);
    let pick = rng.below(images.len() as u64) as usize;
    let second = images.nth(pick).expect("an image");
    let sim2 = SimStorage::from_image(&second);
    let store2 = open(&sim2).map_err(|e| format!("reopen after a crash in recovery: {e}"))?;
    if contents(&store2)? != got {
        return Err(format!(
            "recovery not idempotent: crash at op {} of recovery, image {pick} ({})",
            again.ops(),
            second.label
        ));
    }
    drop(store2);

    // Write after recovery; it must be durable.
    let len = 1 + rng.below(100) as usize;
    let delta = rng.bytes(len);
    write_after(&store, &delta)?;
    let durable = SimStorage::from_image(&sim.durable_image());
    drop(store);
    let store3 = open(&durable).map_err(|e| format!("open after writing: {e}"))?;
    let mut after = contents(&store3)?;
    check_after(&mut after, &delta)?;
    if after != got {
        return Err("writing after recovery changed the recovered contents".into());
    }
    Ok(())
}

#[test]
fn crash_sweep() {
    let started = Instant::now();
    let totals = Totals::default();
    let threads = env_u64("AGENTWAL_CRASH_THREADS").unwrap_or(3) as usize;
    if let Ok(path) = std::env::var("AGENTWAL_CRASH_REPLAY") {
        let rec: Recording = postcard::from_bytes(&std::fs::read(&path).unwrap()).unwrap();
        println!(
            "replaying {path} (seed {:#x}, {} operations)",
            rec.seed,
            rec.ops.len()
        );
        sweep(&rec, env_u64("AGENTWAL_CRASH_POINT"), &totals);
    } else {
        let target = env_u64("AGENTWAL_CRASH_IMAGES").unwrap_or(20_000);
        let first = env_u64("AGENTWAL_CRASH_SEED").unwrap_or(0xC0FFEE);
        let mut round = 0;
        while totals.images.load(Ordering::Relaxed) < target && !totals.failed() {
            let rec = record(first.wrapping_add(round), threads);
            sweep(&rec, None, &totals);
            round += 1;
        }
        println!(
            "crash sweep: seeds {first:#x}..={:#x} ({round} rounds, {threads} threads)",
            first.wrapping_add(round.saturating_sub(1))
        );
    }
    let images = totals.images.load(Ordering::Relaxed);
    let points = totals.points.load(Ordering::Relaxed);
    let secs = started.elapsed().as_secs_f64();
    let coverage = *totals.coverage.lock().unwrap();
    println!("crash sweep: {images} images checked at {points} crash points in {secs:.1} s");
    println!("crash sweep: {coverage:?}");
    let failures = totals.failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    if std::env::var_os("AGENTWAL_CRASH_REPLAY").is_none() {
        coverage.assert_all("crash sweep");
    }
}
