//! Strict recovery and salvage: a torn tail reported without changes, a corrupt middle
//! record skipped and its range reported.

use agentwal::CorruptionReason;
use agentwal::log::record::{self};
use agentwal::log::{
    FLAG_BATCH_END, FLAG_BATCH_START, FLAG_DURABLE_BEFORE, KIND_SEAL, segment_file_name,
};
use agentwal::log::{Log, RecoveryMode, SkippedRange, SyncMode};

use crate::helpers::{
    RECORD_HEADER, Rec, expect_corruption, nonzero_len, open_collect, open_read_only_collect,
    scratch, sweep_options, with_mode,
};
use crate::one_segment::{build_sequential, salt};

#[test]
fn strict_recovery_reports_a_torn_tail_and_changes_nothing() {
    let built = build_sequential(
        "always, sequential",
        sweep_options(SyncMode::Always),
        20,
        None,
    );
    let work = scratch();
    let dir = work.path();
    let path = dir.join(segment_file_name(1));
    let last = built.records.last().unwrap();
    let cut = last.offset + 7;
    std::fs::write(&path, &built.bytes[..cut as usize]).unwrap();
    let torn = nonzero_len(&built.bytes[last.offset as usize..cut as usize]);
    let strict = with_mode(sweep_options(SyncMode::Always), RecoveryMode::Strict);
    for read_only in [false, true] {
        let result = if read_only {
            Log::open_read_only(dir, strict, |_| Ok(()))
        } else {
            Log::open(dir, strict)
        };
        let reason = expect_corruption(result, &path, last.offset, "strict");
        assert_eq!(reason, CorruptionReason::TornTail { torn_bytes: torn });
        assert_eq!(std::fs::read(&path).unwrap(), &built.bytes[..cut as usize]);
    }
    // The default mode discards the same tail.
    let (log, seen) = open_collect(dir, sweep_options(SyncMode::Always)).unwrap();
    assert_eq!(seen, &built.records[..built.records.len() - 1]);
    assert_eq!(log.recovery().torn_bytes, torn);
}

#[test]
fn salvage_skips_a_corrupt_middle_record_and_reports_the_range() {
    let built = build_sequential(
        "always, sequential",
        sweep_options(SyncMode::Always),
        20,
        None,
    );
    let work = scratch();
    let dir = work.path();
    let path = dir.join(segment_file_name(1));
    let mut bytes = built.bytes.clone();
    let (bad, next) = (&built.records[7], &built.records[8]);
    bytes[bad.offset as usize + 21] ^= 0x10; // a payload byte
    std::fs::write(&path, &bytes).unwrap();

    let default = sweep_options(SyncMode::Always);
    let reason = expect_corruption(Log::open(dir, default), &path, bad.offset, "default");
    assert_eq!(
        reason,
        CorruptionReason::ValidDataAfter {
            later_offset: next.offset
        }
    );

    let salvage = with_mode(default, RecoveryMode::Salvage);
    let mut expected = built.records.clone();
    expected.remove(7);
    // The skipped range says why the record there was rejected: its checksum.
    let (header, _) =
        record::decode(&built.bytes[bad.offset as usize..], salt(&built.bytes)).unwrap();
    let damaged_payload = &bytes[(bad.offset + RECORD_HEADER) as usize..bad.end() as usize];
    let stored_crc = &bytes[bad.offset as usize..bad.offset as usize + 4];
    let expected_skip = SkippedRange {
        segment: path.clone(),
        offset: bad.offset,
        bytes: next.offset - bad.offset,
        reason: CorruptionReason::ChecksumMismatch {
            stored: u32::from_le_bytes(stored_crc.try_into().unwrap()),
            computed: header.checksum(
                salt(&bytes),
                record::payload_crc(damaged_payload),
                damaged_payload.len() as u64,
            ),
        },
    };
    let check = |log: &Log, seen: &[Rec], what: &str| {
        assert_eq!(seen, expected, "{what}");
        let r = log.recovery();
        assert_eq!(r.records, 19, "{what}");
        assert_eq!(r.torn_bytes, 0, "{what}");
        assert_eq!(r.skipped, std::slice::from_ref(&expected_skip), "{what}");
    };
    let (ro, seen) = open_read_only_collect(dir, salvage).unwrap();
    check(&ro, &seen, "salvage, read-only");
    drop(ro);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "read-only salvage wrote"
    );
    let (log, seen) = open_collect(dir, salvage).unwrap();
    check(&log, &seen, "salvage");
    // Salvage leaves the damage in place and appends after the last record.
    let a = log.append(1, b"after salvage").unwrap();
    assert_eq!((a.lsn, a.pos.offset), (21, built.data_end));
    drop(log);
    let (_log, seen) = open_collect(dir, salvage).unwrap();
    assert_eq!(seen.len(), 20);
    assert_eq!(seen[19].payload, b"after salvage");
}

/// A writer that salvages past a bad last record appends over it: whatever is left of the
/// skipped bytes past its new data must be zeroed, or the next open finds them after the
/// new records (a torn tail in the default mode, an error in `Strict`). Here the skipped
/// record is a seal that claims durable predecessors but names the wrong segment, which
/// no mode accepts.
#[test]
fn salvage_zeroes_the_skipped_tail_it_appends_over() {
    let built = build_sequential(
        "always, sequential",
        sweep_options(SyncMode::Always),
        20,
        None,
    );
    // On the disk, not in /dev/shm: tmpfs keeps no extent map, so there the writer zeroes
    // ahead of the data anyway and would hide what this test looks for.
    let work = tempfile::tempdir().expect("temporary directory");
    let dir = work.path();
    let path = dir.join(segment_file_name(1));
    let mut bytes = built.bytes.clone();
    let last = &built.records[19];
    let wrong_next = 5u64.to_le_bytes();
    let header = record::RecordHeader {
        payload_len: wrong_next.len() as u32,
        lsn: last.lsn,
        kind: KIND_SEAL,
        flags: FLAG_BATCH_START | FLAG_BATCH_END | FLAG_DURABLE_BEFORE,
    };
    let mut seal = Vec::new();
    record::encode_into(
        &mut seal,
        salt(&bytes),
        &header,
        record::payload_crc(&wrong_next),
        &wrong_next,
    );
    // The rest of the old last record stays behind the seal.
    bytes[last.offset as usize..][..seal.len()].copy_from_slice(&seal);
    std::fs::write(&path, &bytes).unwrap();

    let salvage = with_mode(sweep_options(SyncMode::Always), RecoveryMode::Salvage);
    let (log, seen) = open_collect(dir, salvage).unwrap();
    assert_eq!(seen, &built.records[..19]);
    assert_eq!(log.recovery().skipped.len(), 1, "{:?}", log.recovery());
    let a = log.append(1, b"short").unwrap();
    assert_eq!(a.pos.offset, last.offset, "appends over the skipped record");
    drop(log);
    let strict = with_mode(sweep_options(SyncMode::Always), RecoveryMode::Strict);
    let (log, seen) = open_collect(dir, strict).expect("nothing left past the new record");
    assert_eq!(seen.len(), 20);
    assert_eq!(seen[19].payload, b"short");
    assert_eq!(log.recovery().torn_bytes, 0);
}
