//! Compaction hooks that rewrite payloads: recovery delivers the rewrite, and a pass
//! runs once new segments outweigh the compacted one.

use std::collections::BTreeMap;
use std::sync::Mutex;

use agentwal::RecoveryMode;
use agentwal::log::{Log, RECORD_HEADER_BYTES};

use crate::foreign_images::KeepLive;
use crate::helpers::{options, payload};

/// A compaction pass writes the payload `CompactionHooks::rewrite` gives a record when it
/// is shorter (and ignores a longer one), checksums it as any record, reports the new
/// size, and recovery then delivers the new payload under the record's own LSN.
#[test]
fn compaction_writes_a_rewritten_payload_that_recovery_delivers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), options(RecoveryMode::Strict)).expect("open");
    let hooks = KeepLive {
        rewrite: true,
        ..KeepLive::default()
    };
    let mut expected = BTreeMap::new();
    for i in 0..40u64 {
        let kind = 1 + (i % 3) as u8;
        let p = payload("w", i, 400);
        let a = log.append(kind, &p).expect("append");
        hooks.at.lock().expect("lock").push(a.pos);
        let kept = if kind == 2 { p[..100].to_vec() } else { p };
        expected.insert(a.lsn, (kind, kept));
    }
    // Seal the last of them, so that the pass copies every one.
    let last = hooks
        .at
        .lock()
        .expect("lock")
        .last()
        .copied()
        .expect("appended");
    while log.active_segment_id().expect("active") == last.segment_id {
        log.append(1, b"tail").expect("append");
    }
    log.compact(true, &hooks)
        .expect("compact")
        .expect("a pass ran");
    let sizes = hooks.sizes.lock().expect("lock").clone();
    assert_eq!(sizes.len(), 40);
    for pos in hooks.at.lock().expect("lock").iter() {
        let bytes = sizes[pos] as usize - RECORD_HEADER_BYTES;
        assert!(bytes == 100 || bytes == 400, "{bytes}");
    }
    drop(log);
    let mut got = BTreeMap::new();
    Log::open_with(dir.path(), options(RecoveryMode::Strict), |r| {
        got.insert(r.lsn, (r.kind, r.payload.to_vec()));
        Ok(())
    })
    .expect("reopen");
    got.retain(|_, (_, p)| p != b"tail");
    assert_eq!(got, expected);
}

/// With nothing dead, a pass that is not forced runs only for hooks that rewrite payloads,
/// and only once the segments no pass wrote hold a segment's worth and as much as the
/// compacted segment: right after it, another finds nothing to do.
#[test]
fn hooks_that_rewrite_get_a_pass_once_new_segments_outweigh_the_compacted_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), options(RecoveryMode::Strict)).expect("open");
    let keep = KeepLive::default();
    let append = |n: u64| {
        for i in 0..n {
            let a = log.append(2, &payload("g", i, 400)).expect("append");
            keep.at.lock().expect("lock").push(a.pos);
        }
    };
    append(40);
    assert_eq!(
        log.compact(false, &keep).expect("compact"),
        None,
        "nothing dead"
    );
    let rewriting = KeepLive {
        rewrite: true,
        at: Mutex::new(keep.at.lock().expect("lock").clone()),
        ..KeepLive::default()
    };
    let first = log.compact(false, &rewriting).expect("compact");
    assert!(
        first.as_ref().is_some_and(|c| c.records_rewritten > 30),
        "{first:?}"
    );
    assert_eq!(log.compact(false, &rewriting).expect("compact"), None);
    // Less than a segment of new bytes: still nothing.
    for i in 0..3 {
        let a = log.append(2, &payload("h", i, 400)).expect("append");
        rewriting.at.lock().expect("lock").push(a.pos);
    }
    assert_eq!(log.compact(false, &rewriting).expect("compact"), None);
}
