//! The sweep: which crash points are tried, and the judgement of each disk image.

use std::collections::HashSet;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::sync_channel;
use std::time::Instant;

use crate::common::env::env_u64;
use crate::common::panic_text;
use crate::common::rng::Rng;
use agentwal::storage::sim::{SimImage, SimOp, SimStorage};

use crate::workload::{CUTS, MAX_FAILURES, Recording, SAMPLES, Workload, open};

/// Indices (into `crash_images`) of the images checked when there are `len`: the durable
/// and volatile ones, at most `CUTS` systematic ones, and the `SAMPLES` random mixes.
fn selected(len: usize) -> Vec<usize> {
    if len <= 2 + CUTS + SAMPLES {
        return (0..len).collect();
    }
    let systematic = 2..len - SAMPLES;
    let mut picked: Vec<usize> = (0..2).chain(len - SAMPLES..len).collect();
    // The first cuts (a write torn near its start), the last ones (directory subsets come
    // last; else the end of the write), and an even spread between.
    let (head, tail) = (2, CUTS / 2);
    picked.extend(systematic.start..systematic.start + head);
    picked.extend(systematic.end - tail..systematic.end);
    let middle = (systematic.start + head)..(systematic.end - tail);
    let spread = CUTS - head - tail;
    let step = middle.len() / (spread + 1);
    picked.extend((1..=spread).map(|k| middle.start + k * step));
    picked.sort_unstable();
    picked.dedup();
    picked
}

/// Recovers `image` (a crash before operation `n`) and judges it; then appends and judges
/// the durable image after that.
fn check_image(
    image: &SimImage,
    n: u64,
    w: &Workload,
    rec: &Recording,
    seed: u64,
) -> Result<(), String> {
    let (appends, base) = (&rec.appends, &rec.base);
    let sim = SimStorage::from_image(image);
    let (log, all) = open(&sim, w).map_err(|e| format!("open: {e}"))?;
    if !log.recovery().skipped.is_empty() {
        return Err(format!("recovery skipped: {:?}", log.recovery().skipped));
    }
    if all.get(..base.len()) != Some(&base[..]) {
        return Err("the records from before the recording are not all there".into());
    }
    let got = &all[base.len()..];
    let acked = appends.iter().take_while(|a| a.end <= n).count();
    let begun = appends.iter().take_while(|a| a.start < n).count();
    for (i, (lsn, kind, payload)) in got.iter().enumerate() {
        let Some(a) = appends.get(i) else {
            return Err(format!("record {i} (lsn {lsn}) was never appended"));
        };
        if (*lsn, *kind, payload) != (a.lsn, a.kind, &a.payload) {
            let same = if payload == &a.payload {
                "same"
            } else {
                "other"
            };
            return Err(format!(
                "record {i}: lsn {lsn} kind {kind} with {} bytes ({same} payload), appended \
                 as lsn {} kind {} with {} bytes",
                payload.len(),
                a.lsn,
                a.kind,
                a.payload.len()
            ));
        }
    }
    if got.len() < acked {
        let lost = appends[got.len()].lsn;
        let found = got.len();
        return Err(format!(
            "{found} records recovered, {acked} acknowledged: lsn {lost} is lost"
        ));
    }
    if got.len() > begun {
        let found = got.len();
        return Err(format!(
            "{found} records recovered, only {begun} appends had begun"
        ));
    }

    // Append after recovery; it must read back, and be durable.
    let mut rng = Rng(seed);
    let len = match rng.below(2) {
        0 => 1 + rng.below(512),
        _ => w.large_bytes.start + rng.below(64 << 10),
    };
    let payload = rng.bytes(len as usize);
    let a = log
        .append(1, &payload)
        .map_err(|e| format!("append after recovery: {e}"))?;
    let next = appends[0].lsn + got.len() as u64;
    if a.lsn != next {
        return Err(format!("append after recovery: lsn {}, not {next}", a.lsn));
    }
    match log.read(a.pos) {
        Ok(p) if p == payload => {}
        Ok(_) => return Err("the record appended after recovery reads back wrong".into()),
        Err(e) => return Err(format!("reading the record appended after recovery: {e}")),
    }
    let durable = SimStorage::from_image(&sim.durable_image());
    drop(log);
    let (_, mut again) = open(&durable, w).map_err(|e| format!("open after appending: {e}"))?;
    if again.pop() != Some((a.lsn, 1, payload)) {
        return Err("the record appended after recovery is not durable".into());
    }
    if again != all {
        return Err("appending after recovery changed the recovered records".into());
    }
    Ok(())
}

/// A 64-bit hash of `image`'s files (not its label), to recognise an image seen before.
fn fingerprint(image: &SimImage) -> u64 {
    let mut h = 0u64;
    let mut mix = |word: u64| {
        h = (h ^ word).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^= h >> 29;
    };
    for (path, bytes) in &image.files {
        path.as_os_str()
            .as_encoded_bytes()
            .iter()
            .for_each(|&b| mix(b.into()));
        mix(bytes.len() as u64);
        let words = bytes.chunks_exact(8);
        let rest = words
            .remainder()
            .iter()
            .fold(0, |r, &b| r << 8 | u64::from(b));
        words.for_each(|w| mix(u64::from_le_bytes(w.try_into().unwrap())));
        mix(rest);
    }
    h
}

/// Checks the selected crash images of the crash points of `rec` in `points` (or, with
/// `AGENTWAL_CRASH_POINT` set, of that one); prints and asserts the outcome. An image
/// already checked with the same records acknowledged and begun (the durable image stays
/// the same until the next fdatasync, and zeros written over zeros change no byte) is
/// not checked again.
pub(crate) fn sweep(w: &Workload, rec: &Recording, points: Range<u64>) {
    let started = Instant::now();
    let only = env_u64("AGENTWAL_CRASH_POINT");
    let (images, repeats, swept) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let seen = Mutex::new(HashSet::<(u64, usize, usize)>::new());
    let failures = Mutex::new(Vec::<String>::new());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let (tx, rx) = sync_channel::<(u64, usize, SimImage)>(workers);
    let rx = Mutex::new(rx);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                while let Ok((n, i, image)) = rx.lock().unwrap().recv() {
                    let acked = rec.appends.iter().take_while(|a| a.end <= n).count();
                    let begun = rec.appends.iter().take_while(|a| a.start < n).count();
                    let key = (fingerprint(&image), acked, begun);
                    if !seen.lock().unwrap().insert(key) {
                        repeats.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let seed = w.seed ^ n.wrapping_mul(0x9E37_79B9) ^ (i as u64) << 40;
                    let check = || check_image(&image, n, w, rec, seed);
                    images.fetch_add(1, Ordering::Relaxed);
                    let why = match catch_unwind(AssertUnwindSafe(check)) {
                        Ok(Ok(())) => continue,
                        Ok(Err(why)) => why,
                        Err(panic) => format!("panic: {:?}", panic_text(&panic)),
                    };
                    let label = &image.label;
                    let msg = format!("{}: crash point {n}, image {i} ({label}): {why}", w.name);
                    eprintln!("FAILED {msg}");
                    failures.lock().unwrap().push(msg);
                }
            });
        }
        let replay = SimStorage::from_image(&rec.start);
        for n in 0..=rec.ops.len() as u64 {
            let next = rec.ops.get(n as usize);
            let wanted = only.map_or(points.contains(&n), |p| p == n);
            let swept_here = next.is_none_or(SimOp::mutates) && wanted;
            if swept_here && failures.lock().unwrap().len() < MAX_FAILURES {
                swept.fetch_add(1, Ordering::Relaxed);
                let mut all = replay.crash_images(w.seed ^ n, SAMPLES);
                let mut at = 0;
                for i in selected(all.len()) {
                    let image = all.nth(i - at).expect("an image");
                    at = i + 1;
                    tx.send((n, i, image)).unwrap();
                }
            }
            if let Some(op) = next {
                replay.apply(op);
            }
        }
        drop(tx);
    });
    let (images, repeats) = (images.into_inner(), repeats.into_inner());
    let points = swept.into_inner();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "crash sweep (large batches, {}): {images} images checked at {points} crash points \
         ({repeats} repeated images skipped) in {secs:.1} s",
        w.name
    );
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} failures (replay one: AGENTWAL_CRASH_POINT=<n> cargo test --release --test \
         crash_sweep_large_batches {} -- --nocapture):\n{}",
        failures.len(),
        w.name,
        failures.join("\n")
    );
}
