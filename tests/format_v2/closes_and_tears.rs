//! Close records, seals and tears in recycled segments: strict mode, torn tails, clean
//! opens and closes, and no stale batch let back after a torn one.

use crate::common::segments::{copy_dir, read_header, segment_files, walk};
use agentwal::log::record::{self, RecordHeader};
use agentwal::log::{
    FLAG_BATCH_START, FLAG_DURABLE_BEFORE, KIND_CLOSE, KIND_SEAL, Log, LogOptions,
    RECORD_HEADER_BYTES, segment_path,
};
use agentwal::{CorruptionReason, Error, RecoveryMode, SyncMode};

use crate::helpers::{SEGMENT_BYTES, data_end, open, options, payload, write_at};
use crate::recycled::{Recycled, recycled_log};

// ---------------------------------------------------------------------------------------
// d. Bytes past the data of a recycled segment: a torn tail only after an unclean close

#[test]
fn past_the_data_of_a_recycled_segment_strict_mode_fails_only_after_an_unclean_close() {
    let Recycled { dir, log, path, .. } = recycled_log();
    let crashed = copy_dir(dir.path());
    drop(log);
    // Clean: nothing torn; Strict opens it (and changes nothing: the writer appends
    // after the close record).
    let (log, _) = open(dir.path(), RecoveryMode::Strict).expect("strict after a clean close");
    assert_eq!(log.recovery().torn_bytes, 0);
    drop(log);
    // Unclean: every byte past the data is a torn tail, which Strict refuses, changing
    // nothing on disk.
    let path = crashed.path().join(path.file_name().expect("name"));
    let end = data_end(&path) as u64;
    let file_bytes = std::fs::metadata(&path).expect("metadata").len();
    let before = std::fs::read(&path).expect("read");
    match open(crashed.path(), RecoveryMode::Strict) {
        Err(Error::Corruption {
            segment,
            offset,
            reason: CorruptionReason::TornTail { torn_bytes },
        }) => {
            assert_eq!(segment, path);
            assert_eq!((offset, torn_bytes), (end, file_bytes - end));
        }
        other => panic!("strict after a crash: {:?}", other.map(|_| ())),
    }
    assert_eq!(
        std::fs::read(&path).expect("read"),
        before,
        "Strict wrote nothing"
    );
    let (log, _) = open(crashed.path(), RecoveryMode::TolerateTornTail).expect("open");
    assert_eq!(log.recovery().torn_bytes, file_bytes - end);
}

#[test]
fn a_clean_close_in_a_recycled_segment_with_no_room_for_a_close_record_is_not_torn() {
    let Recycled {
        dir,
        log,
        acked,
        id,
        ..
    } = recycled_log();
    // Fill the segment to within a close record and a seal of its end: one record ends
    // 40 bytes before it (room for a seal, none for a close record and a seal).
    let path = segment_path(dir.path(), id);
    let end = data_end(&path);
    let fill = SEGMENT_BYTES as usize - 40 - end - RECORD_HEADER_BYTES;
    let a = log.append(1, &payload("fill", 0, fill)).expect("append");
    assert_eq!(a.pos.segment_id, id, "it fits");
    assert_eq!(data_end(&path), SEGMENT_BYTES as usize - 40);
    drop(log);
    // The close sealed the segment instead.
    let (at, last, _) = walk(&path).last().cloned().expect("records");
    assert_eq!((at, last.kind), (SEGMENT_BYTES as usize - 40, KIND_SEAL));
    let (log, got) =
        open(dir.path(), RecoveryMode::Strict).expect("strict open after a clean close");
    assert_eq!(got.len(), acked.len() + 1);
    assert_eq!(log.recovery().torn_bytes, 0);
    let next = log.append(1, b"next").expect("append");
    assert_eq!((next.lsn, next.pos.segment_id), (a.lsn + 1, id + 1));
    drop(log);
    let (_, got) = open(dir.path(), RecoveryMode::Strict).expect("reopen");
    assert_eq!(got.len(), acked.len() + 2);
}

#[test]
fn a_torn_batch_after_a_close_record_is_a_torn_tail() {
    // A writer that reopened after a clean close appended a two-record batch after the
    // close record and crashed before its last record was written: its first record
    // lies there complete, under the segment's salt. The close record no longer ends
    // this life's bytes: the batch is torn, the segment gets sealed at open.
    let Recycled {
        dir, log, acked, ..
    } = recycled_log();
    drop(log);
    let path = {
        let (_, last) = segment_files(dir.path()).pop().expect("segments");
        last
    };
    let records = walk(&path);
    let (close_at, close, _) = records.last().cloned().expect("records");
    assert_eq!(close.kind, KIND_CLOSE);
    let close_end = close_at + RECORD_HEADER_BYTES;
    let salt = read_header(&path).salt;
    let first = RecordHeader {
        payload_len: 100,
        lsn: close.lsn,
        kind: 1,
        flags: FLAG_BATCH_START | FLAG_DURABLE_BEFORE,
    };
    let body = payload("torn batch", 0, 100);
    let mut bytes = Vec::new();
    record::encode_into(&mut bytes, salt, &first, record::payload_crc(&body), &body);
    write_at(&path, close_end, &bytes);
    let file_bytes = std::fs::metadata(&path).expect("metadata").len();
    let torn = file_bytes - close_end as u64;
    let strict = copy_dir(dir.path());
    match open(strict.path(), RecoveryMode::Strict) {
        Err(Error::Corruption {
            reason: CorruptionReason::TornTail { torn_bytes },
            ..
        }) => assert_eq!(torn_bytes, torn),
        other => panic!(
            "strict: a torn batch: {:?}",
            other.map(|(l, _)| l.recovery().clone())
        ),
    }
    let (log, got) = open(dir.path(), RecoveryMode::TolerateTornTail).expect("open");
    assert_eq!(got, acked);
    assert_eq!(log.recovery().torn_bytes, torn, "{:?}", log.recovery());
    let sealed = walk(&path).last().cloned().expect("records");
    assert_eq!(
        (sealed.0, sealed.1.kind),
        (close_end, KIND_SEAL),
        "sealed at open"
    );
}

#[test]
fn clean_opens_and_closes_of_a_recycled_segment_never_leave_it_looking_torn() {
    // Every clean close of a writer in a recycled segment writes a close record, even one
    // that appended nothing; each open zeroes the close record it finds and appends in
    // its place, so they never pile up: one close record, always at the same offset.
    let Recycled {
        dir,
        log,
        acked,
        id,
        ..
    } = recycled_log();
    drop(log);
    let path = segment_path(dir.path(), id);
    let first_close = walk(&path).last().cloned().expect("records");
    assert_eq!(first_close.1.kind, KIND_CLOSE);
    for round in 0..SEGMENT_BYTES / RECORD_HEADER_BYTES as u64 {
        let (log, got) = open(dir.path(), RecoveryMode::Strict)
            .unwrap_or_else(|e| panic!("round {round}: strict open after a clean close: {e}"));
        assert_eq!(got, acked, "round {round}");
        assert_eq!(log.recovery().torn_bytes, 0, "round {round}");
        drop(log);
        let records = walk(&path);
        let close = records.last().cloned().expect("records");
        assert_eq!(
            (close.0, close.1.kind),
            (first_close.0, KIND_CLOSE),
            "round {round}: one close record, where the first was"
        );
        let closes = records.iter().filter(|r| r.1.kind == KIND_CLOSE).count();
        assert_eq!(closes, 1, "round {round}");
    }
    let (log, _) = open(dir.path(), RecoveryMode::Strict).expect("open");
    let a = log.append(1, b"next").expect("append");
    assert_eq!(
        (a.pos.segment_id, a.pos.offset),
        (id, first_close.0 as u64),
        "appended in place of the close record"
    );
    drop(log);

    let (_, got) = open(dir.path(), RecoveryMode::Strict).expect("open");
    assert_eq!(got.len(), acked.len() + 1);
}

#[test]
fn a_recycled_segment_cut_short_after_its_data_is_sealed_at_open() {
    // No crash shortens a recycled file (its length is its earlier life's), but a copy
    // cut short may: less than a seal's room after the data.
    let Recycled {
        dir,
        log,
        acked,
        id,
        path,
        ..
    } = recycled_log();
    let crashed = copy_dir(dir.path());
    drop(log);
    let path = crashed.path().join(path.file_name().expect("name"));
    let end = data_end(&path) as u64;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open")
        .set_len(end + 10)
        .expect("truncate");
    let (log, got) = open(crashed.path(), RecoveryMode::TolerateTornTail).expect("open");
    assert_eq!(got, acked);
    assert_eq!(log.recovery().torn_bytes, 10);
    let (seal_at, seal, _) = walk(&path).last().cloned().expect("records");
    assert_eq!((seal_at as u64, seal.kind), (end, KIND_SEAL));
    let a = log.append(1, b"next").expect("append");
    assert_eq!(a.pos.segment_id, id + 1);
    drop(log);
    let (_, got) = open(crashed.path(), RecoveryMode::Strict).expect("reopen");
    assert_eq!(got.len(), acked.len() + 1);
}

/// After a clean close, the next writer appends where the close record was, having zeroed
/// it durably first. Were the close record left in place, a crash that tore the first
/// batch appended after it but kept a later one (possible with more than one unsynced
/// batch, as `Periodic` and `Never` allow) would look like a clean end: the writer would
/// append over the torn batch, and a record of the same size (so the same LSN, reused)
/// would line the scan up on the stale later batch, which would then be replayed though
/// its predecessor was lost. docs/log.md §3.3.
#[test]
fn a_torn_batch_after_a_clean_reopen_never_lets_a_later_stale_batch_back() {
    let Recycled {
        dir,
        log,
        acked,
        id,
        ..
    } = recycled_log();
    drop(log); // a clean close: a close record at the end of the data
    // Never: both batches are written and neither is synced, so the second carries no
    // DURABLE_BEFORE and losing the first is a tear, not corruption.
    let mut got = Vec::new();
    let never = LogOptions {
        sync: SyncMode::Never,
        ..options(RecoveryMode::TolerateTornTail)
    };
    let log = Log::open_with(dir.path(), never, |r| {
        got.push((r.lsn, r.payload.to_vec()));
        Ok(())
    })
    .expect("reopen");
    assert_eq!(got, acked);
    let first = payload("lost", 1, 200);
    let a1 = log.append(1, &first).expect("append");
    let a2 = log.append(1, &payload("stale", 2, 200)).expect("append");
    assert_eq!((a1.pos.segment_id, a2.pos.segment_id), (id, id));
    // A crash image: the first batch torn (its header garbled), the second intact.
    let image = copy_dir(dir.path());
    drop(log);
    let path = segment_path(image.path(), id);
    write_at(&path, a1.pos.offset as usize + 4, &[0xA5; 8]);
    let (log, got) = open(image.path(), RecoveryMode::TolerateTornTail).expect("recover");
    assert_eq!(got, acked, "neither record of the torn life");
    assert!(log.recovery().torn_bytes > 0, "{:?}", log.recovery());
    // A record of the first one's size: same length, same (reused) LSN.
    let n = log.append(1, &payload("new!", 1, 200)).expect("append");
    assert_eq!(n.lsn, a1.lsn, "the LSN of the torn record is reused");
    drop(log);
    let (_, got) = open(image.path(), RecoveryMode::TolerateTornTail).expect("reopen");
    let mut want = acked.clone();
    want.push((n.lsn, payload("new!", 1, 200)));
    assert_eq!(got, want, "the stale batch is never replayed");
}
