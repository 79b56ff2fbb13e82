//! Round trips, reopen, rotation and concurrent appenders on the plain log.

use agentwal::Error;
use agentwal::log::{Log, LogOptions, RecordPos, SEGMENT_HEADER_BYTES, SyncMode};

fn small() -> LogOptions {
    LogOptions {
        segment_bytes: 4096,
        ..LogOptions::default()
    }
}

/// Default options with `SyncMode::Periodic(interval)`.
fn periodic(interval: std::time::Duration) -> LogOptions {
    LogOptions {
        sync: SyncMode::Periodic(interval),
        ..LogOptions::default()
    }
}

fn collect(dir: &std::path::Path, opts: LogOptions) -> (Log, Vec<(u64, u8, Vec<u8>)>) {
    let mut out = Vec::new();
    let log = Log::open_with(dir, opts, |r| {
        out.push((r.lsn, r.kind, r.payload.to_vec()));
        Ok(())
    })
    .expect("open");
    (log, out)
}

#[test]
fn round_trip_and_reopen_after_clean_close() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let a = log.append(1, b"first").unwrap();
    let b = log.append(2, b"second").unwrap();
    assert_eq!((a.lsn, b.lsn), (1, 2));
    assert_eq!(log.read(b.pos).unwrap(), b"second");
    drop(log);
    let (log, recs) = collect(dir.path(), LogOptions::default());
    assert_eq!(
        recs,
        vec![(1, 1, b"first".to_vec()), (2, 2, b"second".to_vec())]
    );
    assert_eq!(log.append(1, b"third").unwrap().lsn, 3);
    assert_eq!(log.read(a.pos).unwrap(), b"first");
}

#[test]
fn rotation_across_many_segments() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small()).unwrap();
    let mut positions = Vec::new();
    for i in 0..500u32 {
        let payload = vec![(i % 251) as u8; 100 + (i as usize % 300)];
        positions.push((log.append(1, &payload).unwrap().pos, payload));
    }
    assert!(log.stats().rotations > 20, "{:?}", log.stats());
    for (pos, payload) in &positions {
        assert_eq!(&log.read(*pos).unwrap(), payload);
    }
    drop(log);
    let (log, recs) = collect(dir.path(), small());
    assert_eq!(recs.len(), 500);
    for (i, (lsn, _, payload)) in recs.iter().enumerate() {
        assert_eq!(*lsn, i as u64 + 1);
        assert_eq!(payload, &positions[i].1);
    }
    // Sealed segments are read through mmap.
    assert_eq!(log.read(positions[0].0).unwrap(), positions[0].1);
}

#[test]
fn concurrent_appenders_all_recovered_in_lsn_order() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small()).unwrap();
    std::thread::scope(|s| {
        for t in 0..8u8 {
            let log = log.clone();
            s.spawn(move || {
                for i in 0..200u32 {
                    let mut p = vec![t];
                    p.extend_from_slice(&i.to_le_bytes());
                    log.append(1, &p).unwrap();
                }
            });
        }
    });
    let stats = log.stats();
    assert_eq!(stats.appends, 1600);
    drop(log);
    let (_log, recs) = collect(dir.path(), small());
    assert_eq!(recs.len(), 1600);
    let mut next = [0u32; 8];
    for (i, (lsn, _, p)) in recs.iter().enumerate() {
        assert_eq!(*lsn, i as u64 + 1);
        let t = p[0] as usize;
        let n = u32::from_le_bytes(p[1..5].try_into().unwrap());
        assert_eq!(n, next[t], "thread {t}'s records out of order");
        next[t] += 1;
    }
}

#[test]
fn second_writer_is_locked_and_read_only_sees_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    for i in 0..10u8 {
        log.append(1, &[i]).unwrap();
    }
    match Log::open(dir.path(), LogOptions::default()) {
        Err(Error::Locked { dir: d }) => assert_eq!(d, dir.path()),
        other => panic!("expected Locked, got {:?}", other.map(|_| ())),
    }
    let mut seen = 0;
    let ro = Log::open_read_only(dir.path(), LogOptions::default(), |_| {
        seen += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, 10);
    assert!(matches!(ro.append(1, b"x"), Err(Error::ReadOnly)));
}

#[test]
fn periodic_and_never_modes_recover_after_flush() {
    for sync in [
        SyncMode::Never,
        SyncMode::Periodic(std::time::Duration::from_millis(5)),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let opts = LogOptions { sync, ..small() };
        let log = Log::open(dir.path(), opts).unwrap();
        for i in 0..100u8 {
            log.append(1, &[i; 50]).unwrap();
        }
        log.flush().unwrap();
        drop(log);
        let (_l, recs) = collect(dir.path(), opts);
        assert_eq!(recs.len(), 100);
    }
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small()).unwrap();
    assert!(matches!(
        log.append(0, b"x"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        log.append(0xFF, b"x"),
        Err(Error::InvalidArgument(_))
    ));
    // Larger than a segment: it gets one of its own. Only the format's limit is real
    // (the zeroed vector is never touched, so it costs no memory).
    let big = log.append(1, &vec![3u8; 5000]).unwrap();
    assert_eq!(log.read(big.pos).unwrap(), vec![3u8; 5000]);
    assert_eq!(
        log.payload_bytes_max(),
        agentwal::log::RECORD_PAYLOAD_BYTES_MAX
    );
    assert!(matches!(
        log.append(
            1,
            &vec![0u8; agentwal::log::RECORD_PAYLOAD_BYTES_MAX as usize + 1]
        ),
        Err(Error::RecordTooLarge { .. })
    ));
    assert!(
        log.read(RecordPos {
            segment_id: 1,
            offset: 3000
        })
        .is_err()
    );
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("notes.txt"), b"hi").unwrap();
    assert!(matches!(
        Log::open(other.path(), small()),
        Err(Error::NotAStore { .. })
    ));
    assert!(matches!(
        Log::open(
            dir.path(),
            LogOptions {
                segment_bytes: 10,
                ..small()
            }
        ),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn reopening_with_smaller_segments_keeps_the_new_limit() {
    let dir = tempfile::tempdir().unwrap();
    let big = LogOptions {
        segment_bytes: 1 << 20,
        ..LogOptions::default()
    };
    let log = Log::open(dir.path(), big).unwrap();
    for _ in 0..60 {
        log.append(1, &[7u8; 10_000]).unwrap();
    }
    drop(log);
    let log = Log::open(dir.path(), small()).unwrap();
    // Placement follows the new segment size, not the reopened segment's: a record
    // larger than it gets a segment of its own, sized to hold it.
    let jumbo = log.append(1, &[1u8; 100_000]).unwrap();
    assert_eq!(
        jumbo.pos.segment_id, 2,
        "the reopened oversized segment is sealed"
    );
    let a = log.append(1, b"after").unwrap();
    assert_eq!(a.pos.segment_id, 3, "the jumbo segment holds one record");
    for _ in 0..20 {
        log.append(1, &[2u8; 1000]).unwrap();
    }
    drop(log);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let len = std::fs::metadata(&path).unwrap().len();
        if name.ends_with(".wal") && name == format!("{:020}.wal", 2) {
            assert_eq!(
                len,
                SEGMENT_HEADER_BYTES as u64 + 20 + 100_000 + 28,
                "{name} holds one record and a seal"
            );
        } else if name.ends_with(".wal") && name != format!("{:020}.wal", 1) {
            assert!(len <= 4096, "{name} is {len} bytes");
        }
    }
    let (_log, recs) = collect(dir.path(), small());
    assert_eq!(recs.len(), 82);
}

/// Small batches land on zeroed space (no extent conversion per fdatasync); large ones make
/// the writer stop zeroing, since writing every byte twice then costs more (docs/format.md §6).
/// Either way every record reads back and survives a reopen.
#[test]
fn zeroing_ahead_follows_batch_size() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let opened = log.stats().zero_bytes_written;
    assert!(opened > 0, "an open zeroes ahead: {:?}", log.stats());
    let small = vec![7u8; 3 << 10];
    let mut expected = Vec::new();
    for _ in 0..400 {
        log.append(1, &small).unwrap();
        expected.push(small.clone());
    }
    let after_small = log.stats().zero_bytes_written;
    assert!(
        after_small > opened,
        "1.2 MB of small batches passed the zeroed 1 MiB: {:?}",
        log.stats()
    );
    let large = vec![9u8; 100 << 10];
    for _ in 0..20 {
        log.append(1, &large).unwrap();
        expected.push(large.clone());
    }
    let settled = log.stats().zero_bytes_written;
    for _ in 0..60 {
        log.append(1, &large).unwrap();
        expected.push(large.clone());
    }
    assert_eq!(
        log.stats().zero_bytes_written,
        settled,
        "6 MB of 100 KiB batches wrote zeros: {:?}",
        log.stats()
    );
    drop(log);
    let (_log, recs) = collect(dir.path(), LogOptions::default());
    let payloads: Vec<Vec<u8>> = recs.into_iter().map(|r| r.2).collect();
    assert_eq!(payloads, expected);
}

/// Whether `dir` is on a file system known to map extents for FIEMAP (ext4, XFS, btrfs).
/// Elsewhere (tmpfs, say) a reopen zeroes again, by design.
fn maps_extents(dir: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    const MAGICS: [i64; 3] = [0xEF53, 0x5846_5342, 0x9123_683E];
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `st` is a valid statfs to fill in.
    let rc = unsafe { libc::statfs(path.as_ptr(), &mut st) };
    rc == 0 && MAGICS.contains(&(st.f_type as i64))
}

/// A reopen does not zero again what the previous writer zeroed ahead (it reads the file
/// system's extent map); a fresh log does.
#[test]
fn reopen_does_not_zero_again() {
    let dir = tempfile::tempdir().unwrap();
    if !maps_extents(dir.path()) {
        eprintln!("skipped: not ext4, XFS or btrfs");
        return;
    }
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    assert!(
        log.stats().zero_bytes_written > 0,
        "a fresh log zeroes ahead"
    );
    let mut expected = Vec::new();
    for i in 0..100u32 {
        let payload = vec![i as u8; 3 << 10];
        log.append(1, &payload).unwrap();
        expected.push(payload);
    }
    drop(log);
    let (log, recs) = collect(dir.path(), LogOptions::default());
    assert_eq!(
        (log.stats().zero_bytes_written, log.stats().fsyncs),
        (0, 0),
        "the previous writer left 700 KiB zeroed past its data: {:?}",
        log.stats()
    );
    let payloads: Vec<Vec<u8>> = recs.into_iter().map(|r| r.2).collect();
    assert_eq!(payloads, expected);
    // Past the zeroed space, it zeroes ahead again.
    for _ in 0..400 {
        log.append(1, &[5u8; 3 << 10]).unwrap();
    }
    assert!(log.stats().zero_bytes_written > 0, "{:?}", log.stats());
}

/// Dropping the last handle releases the directory at once, also while the `Periodic`
/// flusher is in the middle of an fdatasync: reopening right away must not find it locked.
#[test]
fn periodic_log_releases_its_lock_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let opts = periodic(std::time::Duration::from_millis(1));
    for round in 0..300u32 {
        let log = Log::open(dir.path(), opts).unwrap_or_else(|e| panic!("round {round}: {e}"));
        // Appends over 1 to 3 ms, so the flusher's syncs fall at every phase of the drop.
        for i in 0..4u32 {
            log.append(1, &(round * 4 + i).to_le_bytes()).unwrap();
            let pause_us = 250 + u64::from((round * 7 + i * 13) % 11) * 50;
            std::thread::sleep(std::time::Duration::from_micros(pause_us));
        }
    }
}

/// The `Periodic` flusher makes appends durable by itself, every interval.
#[test]
fn periodic_flusher_syncs_without_being_asked() {
    let dir = tempfile::tempdir().unwrap();
    let opts = periodic(std::time::Duration::from_millis(5));
    let log = Log::open(dir.path(), opts).unwrap();
    let before = log.stats().fsyncs;
    log.append(1, b"flushed by the flusher").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while log.stats().fsyncs == before {
        assert!(std::time::Instant::now() < deadline, "no fsync within 10 s");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// Dropping the last handle of a `Periodic` log makes its appends durable: after a power
/// loss right after the drop (the simulated disk keeps only what was synced), they are
/// all there, although the flusher's interval never came.
#[test]
fn periodic_log_flushes_when_dropped() {
    use agentwal::storage::sim::SimStorage;
    let sim = SimStorage::new();
    let opts = periodic(std::time::Duration::from_secs(3600));
    let log = Log::open_on(std::sync::Arc::new(sim.clone()), "/log", opts, |_| Ok(())).unwrap();
    for i in 0..10u8 {
        log.append(1, &[i; 100]).unwrap();
    }
    drop(log);
    let after_power_loss = SimStorage::from_image(&sim.durable_image());
    let mut seen = 0;
    Log::open_on(
        std::sync::Arc::new(after_power_loss),
        "/log",
        LogOptions::default(),
        |r| {
            assert_eq!(r.payload, [seen as u8; 100]);
            seen += 1;
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(seen, 10);
}
