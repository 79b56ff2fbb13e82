//! Read-only opens racing a writer see every acknowledged record.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use agentwal::log::{Log, LogOptions, RecoveryMode, SyncMode};

use crate::helpers::open_read_only_collect;
use crate::segment_chains::SMALL_SEGMENT_BYTES;

/// Payload of record `i` in the concurrent read test: its index, then filler.
fn indexed_payload(i: u64) -> Vec<u8> {
    let mut p = i.to_le_bytes().to_vec();
    p.resize(8 + (i % 50) as usize, (i % 251) as u8 + 1);
    p
}

#[test]
fn read_only_opens_during_appends_see_every_acknowledged_record() {
    for (sync, appends) in [(SyncMode::Always, 400), (SyncMode::Never, 3000)] {
        // A real disk: page-cache reads racing writes are the point here.
        let dir = tempfile::tempdir().unwrap();
        let opts = LogOptions {
            sync,
            segment_bytes: SMALL_SEGMENT_BYTES,
            recovery: RecoveryMode::TolerateTornTail,
        };
        let log = Log::open(dir.path(), opts).unwrap();
        let acknowledged = AtomicU64::new(0);
        let done = AtomicBool::new(false);
        let (opens, max_seen) = std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..appends {
                    let a = log.append(1, &indexed_payload(i)).unwrap();
                    assert_eq!(a.lsn, i + 1);
                    acknowledged.store(i + 1, Ordering::SeqCst);
                }
                done.store(true, Ordering::SeqCst);
            });
            let (mut opens, mut max_seen) = (0u64, 0u64);
            loop {
                let finished = done.load(Ordering::SeqCst);
                let before = acknowledged.load(Ordering::SeqCst);
                let what = format!("{sync:?}: read-only open {opens} (after {before} acks)");
                let (ro, seen) = open_read_only_collect(dir.path(), opts).expect(&what);
                assert!(
                    seen.len() as u64 >= before,
                    "{what}: saw only {}",
                    seen.len()
                );
                for (i, r) in seen.iter().enumerate() {
                    assert_eq!(
                        (r.lsn, &r.payload),
                        (i as u64 + 1, &indexed_payload(i as u64)),
                        "{what}"
                    );
                }
                assert_eq!(ro.recovery().records, seen.len() as u64, "{what}");
                max_seen = max_seen.max(seen.len() as u64);
                opens += 1;
                if finished {
                    assert_eq!(seen.len() as u64, appends, "{what}: after the last append");
                    break (opens, max_seen);
                }
            }
        });
        assert!(log.stats().rotations > 3, "{sync:?}: {:?}", log.stats());
        eprintln!(
            "{sync:?}: {opens} read-only opens during {appends} appends (max seen {max_seen})"
        );
    }
}
