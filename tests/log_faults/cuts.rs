//! The log cut and zeroed at every byte offset recovers exactly the complete batches.

use agentwal::CorruptionReason;
use agentwal::log::{Log, LogOptions, RecoveryMode, SyncMode};
use agentwal::log::{PREALLOCATE_BYTES, segment_file_name};

use crate::helpers::HEADER;
use crate::helpers::{
    expect_corruption, nonzero_len, open_collect, open_read_only_collect, scratch, sweep_options,
    with_mode, with_sync,
};
use crate::one_segment::{OneSegment, build_concurrent, build_sequential};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Damage {
    /// The file ends at the cut (`set_len`).
    Truncate,
    /// The bytes from the cut to the end of the data read as zeros; the file keeps its
    /// preallocated length (a lost sector, or a write that never reached the disk).
    ZeroTail,
}

/// For every cut from the end of the segment header to the end of the data: damages a
/// copy, then checks strict, read-only and writing opens, an append and a reopen.
/// Returns the number of cuts checked.
fn sweep(built: &OneSegment, damage: Damage) -> u64 {
    sweep_cuts(built, damage, HEADER..=built.data_end)
}

/// [`sweep`] over the given cuts only.
fn sweep_cuts(built: &OneSegment, damage: Damage, cuts: impl IntoIterator<Item = u64>) -> u64 {
    let work = scratch();
    let dir = work.path();
    let path = dir.join(segment_file_name(1));
    // The writing handles need no fsync to prove anything here; reopens read the page cache.
    let opts = with_sync(built.opts, SyncMode::Never);
    let mut file = Vec::with_capacity(built.bytes.len());
    let mut checked = 0;
    for cut in cuts {
        let what = format!("{} / {damage:?} at {cut}", built.what);
        file.clear();
        match damage {
            Damage::Truncate => file.extend_from_slice(&built.bytes[..cut as usize]),
            Damage::ZeroTail => {
                file.extend_from_slice(&built.bytes);
                file[cut as usize..built.data_end as usize].fill(0);
            }
        }
        std::fs::write(&path, &file).expect("write damaged segment");

        // Zeroing bytes that already are zero damages nothing: the first changed byte
        // is the first non-zero one at or after the cut.
        let first_damaged = match damage {
            Damage::Truncate => cut,
            Damage::ZeroTail => (cut..built.data_end)
                .find(|&o| built.bytes[o as usize] != 0)
                .unwrap_or(built.data_end),
        };
        let committed = built
            .batch_ends
            .iter()
            .copied()
            .filter(|&e| e <= first_damaged)
            .max()
            .unwrap_or(HEADER);
        let kept = built
            .records
            .iter()
            .take_while(|r| r.end() <= committed)
            .count();
        let expected = &built.records[..kept];
        let torn = nonzero_len(&file[committed as usize..]);

        if torn > 0 {
            let strict = Log::open(dir, with_mode(opts, RecoveryMode::Strict));
            let reason = expect_corruption(strict, &path, committed, &what);
            assert_eq!(
                reason,
                CorruptionReason::TornTail { torn_bytes: torn },
                "{what}"
            );
            assert_eq!(std::fs::read(&path).unwrap(), file, "{what}: strict wrote");
        }

        let (ro, seen) = open_read_only_collect(dir, opts).expect(&what);
        assert_eq!(seen, expected, "{what}: read-only");
        assert_eq!(ro.recovery().torn_bytes, torn, "{what}: read-only");
        drop(ro);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            file,
            "{what}: read-only wrote"
        );

        let (log, seen) = open_collect(dir, opts).expect(&what);
        assert_eq!(seen, expected, "{what}");
        let r = log.recovery();
        assert_eq!((r.records, r.torn_bytes), (kept as u64, torn), "{what}");
        assert!(r.skipped.is_empty(), "{what}");
        let a = log.append(7, b"appended after the damage").expect(&what);
        assert_eq!(
            (a.lsn, a.pos.segment_id, a.pos.offset),
            (kept as u64 + 1, 1, committed),
            "{what}: append position"
        );
        drop(log);

        let (log, seen) = open_collect(dir, opts).expect(&what);
        assert_eq!(seen.len(), kept + 1, "{what}: after append");
        assert_eq!(&seen[..kept], expected, "{what}: after append");
        assert_eq!(
            (seen[kept].lsn, seen[kept].offset, &seen[kept].payload[..]),
            (a.lsn, committed, &b"appended after the damage"[..]),
            "{what}: after append"
        );
        assert_eq!(log.recovery().torn_bytes, 0, "{what}: after append");
        checked += 1;
    }
    checked
}

#[test]
fn truncation_at_every_offset_recovers_complete_batches() {
    let built = build_sequential(
        "always, sequential",
        sweep_options(SyncMode::Always),
        50,
        None,
    );
    let cuts = sweep(&built, Damage::Truncate);
    assert_eq!(cuts, built.data_end - HEADER + 1);
    eprintln!("{}: {cuts} truncation offsets", built.what);
}

#[test]
fn zeroed_tail_at_every_offset_recovers_complete_batches() {
    let built = build_sequential(
        "always, sequential",
        sweep_options(SyncMode::Always),
        50,
        None,
    );
    let cuts = sweep(&built, Damage::ZeroTail);
    eprintln!("{}: {cuts} zeroed-tail offsets", built.what);
}

#[test]
fn truncation_and_zeroing_with_the_default_segment_size() {
    // Default segment_bytes: the segment is preallocated to 4 MiB of zeros. Each open
    // scans all of it (slow in debug builds), so only a few cuts in the last records.
    let built = build_sequential("default size", LogOptions::default(), 12, None);
    assert_eq!(built.bytes.len() as u64, PREALLOCATE_BYTES);
    let last = built.records.last().unwrap();
    let cuts = [last.offset + 3, built.data_end - 1];
    let checked =
        sweep_cuts(&built, Damage::Truncate, cuts) + sweep_cuts(&built, Damage::ZeroTail, cuts);
    assert_eq!(checked, 4);
}

#[test]
fn truncation_and_zeroing_without_durable_flags_recover_complete_batches() {
    // SyncMode::Never: only the batch after each flush carries FLAG_DURABLE_BEFORE.
    let built = build_sequential(
        "never, flush every 5",
        sweep_options(SyncMode::Never),
        50,
        Some(5),
    );
    let cuts = sweep(&built, Damage::Truncate) + sweep(&built, Damage::ZeroTail);
    eprintln!("{}: {cuts} offsets (truncated and zeroed)", built.what);
}

#[test]
fn truncation_and_zeroing_inside_multi_record_batches_drop_the_whole_batch() {
    let built = build_concurrent();
    let cuts = sweep(&built, Damage::Truncate) + sweep(&built, Damage::ZeroTail);
    eprintln!(
        "{}: {} batches, {cuts} offsets (truncated and zeroed)",
        built.what,
        built.batch_ends.len()
    );
}
