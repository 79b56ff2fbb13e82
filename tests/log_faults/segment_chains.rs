//! Multi-segment logs: damaged segment chains and malformed segment files are clear
//! errors and leave the files untouched.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use agentwal::log::SegmentHeader;
use agentwal::log::record::{self};
use agentwal::log::{
    FLAG_BATCH_END, FLAG_BATCH_START, FLAG_DURABLE_BEFORE, FORMAT_VERSION, KIND_SEAL, mask_crc,
    segment_file_name,
};
use agentwal::log::{Log, LogOptions, RecoveryMode, SyncMode};
use agentwal::{CorruptionReason, Error};
use tempfile::TempDir;

use crate::helpers::{HEADER, HEADER_CRC_COVERED, RECORD_HEADER, Rec};
use crate::helpers::{
    copy_store, expect_corruption, kind, nonzero_len, open_collect, open_read_only_collect,
};
use crate::helpers::{scratch, snapshot, sweep_options, with_mode, write_at};
use crate::one_segment::{build_sequential, salt};

pub(crate) const SMALL_SEGMENT_BYTES: u64 = 4096;

/// A log spread over several 4 KiB segments, written under `SyncMode::Always`.
pub(crate) struct MultiSegment {
    pub(crate) _dir: TempDir,
    pub(crate) records: Vec<Rec>,
    /// Per segment: id, index range into `records`, seal offset (None for the last).
    pub(crate) segments: Vec<(u64, std::ops::Range<usize>, Option<u64>)>,
}

impl MultiSegment {
    pub(crate) fn dir(&self) -> &Path {
        self._dir.path()
    }

    pub(crate) fn opts() -> LogOptions {
        LogOptions {
            sync: SyncMode::Never,
            segment_bytes: SMALL_SEGMENT_BYTES,
            recovery: RecoveryMode::TolerateTornTail,
        }
    }
}

fn multi_payload(i: u64) -> Vec<u8> {
    let len = 60 + (i * 37 % 80) as usize;
    (0..len).map(|j| (i as usize + j * 3 + 1) as u8).collect()
}

fn build_multi_segment() -> MultiSegment {
    let dir = scratch();
    let opts = LogOptions {
        sync: SyncMode::Always,
        ..MultiSegment::opts()
    };
    let log = Log::open(dir.path(), opts).expect("open");
    let mut records = Vec::new();
    for i in 0..150 {
        let p = multi_payload(i);
        let a = log.append(kind(i), &p).expect("append");
        records.push(Rec {
            lsn: a.lsn,
            segment_id: a.pos.segment_id,
            offset: a.pos.offset,
            kind: kind(i),
            payload: p,
        });
    }
    drop(log);
    let last_id = records.last().unwrap().segment_id;
    assert!(last_id >= 4, "expected several segments, got {last_id}");
    let mut segments = Vec::new();
    for id in 1..=last_id {
        let first = records.iter().position(|r| r.segment_id == id).unwrap();
        let end = first
            + records[first..]
                .iter()
                .take_while(|r| r.segment_id == id)
                .count();
        let bytes = std::fs::read(dir.path().join(segment_file_name(id))).unwrap();
        assert_eq!(
            bytes.len() as u64,
            SMALL_SEGMENT_BYTES,
            "preallocated in full"
        );
        let seal = (id < last_id).then(|| {
            let at = records[end - 1].end();
            let (h, p) = record::decode(&bytes[at as usize..], salt(&bytes)).expect("seal decodes");
            assert_eq!((h.kind, p), (KIND_SEAL, &(id + 1).to_le_bytes()[..]));
            assert_eq!(
                h.flags,
                FLAG_BATCH_START | FLAG_BATCH_END | FLAG_DURABLE_BEFORE
            );
            at
        });
        segments.push((id, first..end, seal));
    }
    MultiSegment {
        _dir: dir,
        records,
        segments,
    }
}

/// Opens for writing and read-only: both must fail as `check` expects, and neither may
/// change, add or remove a file of the store.
#[track_caller]
fn assert_open_fails_untouched(
    dir: &Path,
    opts: LogOptions,
    read_only_too: bool,
    what: &str,
    check: impl Fn(&Error) -> bool,
) {
    let before = snapshot(dir);
    let mut results = vec![("writer", open_collect(dir, opts).map(|_| ()))];
    if read_only_too {
        results.push(("read-only", open_read_only_collect(dir, opts).map(|_| ())));
    }
    for (how, result) in results {
        match result {
            Err(e) => assert!(check(&e), "{what} ({how}): unexpected error: {e}"),
            Ok(()) => panic!("{what} ({how}): the open succeeded"),
        }
        assert!(snapshot(dir) == before, "{what} ({how}): the store changed");
    }
}

#[test]
fn corruption_in_a_sealed_segment_names_it_even_in_its_last_batch() {
    let built = build_multi_segment();
    let work = scratch();
    let dir = work.path();
    copy_store(built.dir(), dir);
    let opts = MultiSegment::opts();
    let mut flips = 0;
    for (id, range, seal) in &built.segments {
        let path = dir.join(segment_file_name(*id));
        let original = std::fs::read(&path).unwrap();
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        let last = &built.records[range.end - 1];
        // The first record, the last record (its own last batch) and the seal.
        let first = &built.records[range.start];
        let region = (first.offset..first.end()).chain(last.offset..seal.unwrap_or(last.offset));
        for byte in region {
            for bit in 0..8 {
                let what = format!("segment {id}: flip of byte {byte} bit {bit}");
                file.write_all_at(&[original[byte as usize] ^ (1 << bit)], byte)
                    .unwrap();
                let result = open_collect(dir, opts);
                if last.contains(byte) || first.contains(byte) {
                    let owner = if last.contains(byte) { last } else { first };
                    let reason = expect_corruption(result, &path, owner.offset, &what);
                    if owner == last {
                        let later_offset = seal.unwrap();
                        assert_eq!(reason, CorruptionReason::ValidDataAfter { later_offset });
                    }
                } else {
                    expect_corruption(result, &path, seal.unwrap(), &what);
                }
                file.write_all_at(&original[byte as usize..=byte as usize], byte)
                    .unwrap();
                flips += 1;
            }
        }
    }
    // In the final segment the same damage to the last record is a torn tail.
    let (id, range, _) = built.segments.last().unwrap();
    let path = dir.join(segment_file_name(*id));
    let last = &built.records[range.end - 1];
    let original = std::fs::read(&path).unwrap();
    write_at(
        &path,
        last.offset + 30,
        &[original[last.offset as usize + 30] ^ 1],
    );
    let (log, seen) = open_collect(dir, opts).unwrap();
    assert_eq!(seen, &built.records[..built.records.len() - 1]);
    assert_eq!(log.recovery().torn_bytes, last.end() - last.offset);
    eprintln!(
        "{} segments, {flips} flips in sealed segments",
        built.segments.len()
    );
}

#[test]
fn missing_middle_segment_is_a_broken_chain() {
    let built = build_multi_segment();
    for missing in [2, built.segments.len() as u64 - 1] {
        let work = scratch();
        let dir = work.path();
        copy_store(built.dir(), dir);
        std::fs::remove_file(dir.join(segment_file_name(missing))).unwrap();
        let next = dir.join(segment_file_name(missing + 1));
        assert_open_fails_untouched(
            dir,
            MultiSegment::opts(),
            true,
            &format!("segment {missing} deleted"),
            |e| {
                matches!(e, Error::Corruption {
                    segment,
                    offset: 0,
                    reason: CorruptionReason::BrokenChain(_),
                } if *segment == next)
            },
        );
    }
}

#[test]
fn sealed_segment_without_its_seal_is_corruption() {
    let built = build_multi_segment();
    let (penultimate, ..) = built.segments[built.segments.len() - 2];
    for id in [1, penultimate] {
        let (_, range, seal) = &built.segments[id as usize - 1];
        let seal = seal.unwrap();
        let last = &built.records[range.end - 1];
        // (what, first byte zeroed or cut, expected error offset)
        let cases = [
            ("seal zeroed", seal, seal),
            ("last record and seal zeroed", last.offset, last.offset),
            ("truncated before the seal", seal, seal),
            ("truncated inside the seal", seal + 10, seal),
        ];
        for (how, from, offset) in cases {
            let what = format!("segment {id}: {how}");
            let work = scratch();
            let dir = work.path();
            copy_store(built.dir(), dir);
            let path = dir.join(segment_file_name(id));
            if how.starts_with("truncated") {
                let file = OpenOptions::new().write(true).open(&path).unwrap();
                file.set_len(from).unwrap();
            } else {
                write_at(&path, from, &vec![0; (seal + 28 - from) as usize]);
            }
            assert_open_fails_untouched(dir, MultiSegment::opts(), true, &what, |e| {
                matches!(e, Error::Corruption { segment, offset: o, .. }
                    if *segment == path && *o == offset)
            });
            let reason = expect_corruption(
                open_collect(dir, MultiSegment::opts()),
                &path,
                offset,
                &what,
            );
            if how.ends_with("zeroed") || how == "truncated before the seal" {
                assert!(
                    matches!(reason, CorruptionReason::BrokenChain(_)),
                    "{what}: {reason:?}"
                );
            }
        }
    }
}

#[test]
fn malformed_segment_files_are_clear_errors_and_left_untouched() {
    let built = build_sequential(
        "always, sequential",
        sweep_options(SyncMode::Always),
        10,
        None,
    );
    let opts = sweep_options(SyncMode::Always);
    let name = segment_file_name(1);
    let fresh = |bytes: &[u8]| {
        let work = scratch();
        std::fs::write(work.path().join(&name), bytes).unwrap();
        work
    };
    let header_with_version = |version: u32| {
        let mut b = built.bytes.clone();
        b[8..12].copy_from_slice(&version.to_le_bytes());
        let crc = mask_crc(crc32fast::hash(&b[..HEADER_CRC_COVERED]));
        b[HEADER_CRC_COVERED..HEADER_CRC_COVERED + 4].copy_from_slice(&crc.to_le_bytes());
        b
    };
    let corrupt_at = |path: PathBuf, offset: u64, reason: fn(&CorruptionReason) -> bool| {
        move |e: &Error| {
            matches!(e, Error::Corruption { segment, offset: o, reason: r }
                if *segment == path && *o == offset && reason(r))
        }
    };

    // Bad magic.
    let mut b = built.bytes.clone();
    b[..8].copy_from_slice(b"NOTAWAL!");
    let work = fresh(&b);
    let path = work.path().join(&name);
    assert_open_fails_untouched(
        work.path(),
        opts,
        true,
        "bad magic",
        corrupt_at(path, 0, |r| matches!(r, CorruptionReason::BadHeader(_))),
    );

    // A newer (and an older, unknown) version with a correct header checksum.
    for version in [FORMAT_VERSION + 1, 0] {
        let b = header_with_version(version);
        // Sanity: the rewritten header is otherwise valid.
        let work = fresh(&b);
        let path = work.path().join(&name);
        assert_open_fails_untouched(
            work.path(),
            opts,
            true,
            &format!("version {version}"),
            |e| {
                matches!(e, Error::UnsupportedFormat { segment, found, supported }
                if *segment == path && *found == version && *supported == FORMAT_VERSION)
            },
        );
    }
    // The same rewrite with version 1 is accepted: the test above changed only the version.
    let work = fresh(&header_with_version(FORMAT_VERSION));
    let (_log, seen) = open_collect(work.path(), opts).unwrap();
    assert_eq!(seen, built.records);
    let decoded = SegmentHeader::decode(&built.bytes, Path::new("x")).unwrap();
    assert_eq!((decoded.id, decoded.first_lsn), (1, 1));

    // A segment file cut inside its header (it is renamed into place only once complete).
    for len in 0..HEADER {
        let work = fresh(&built.bytes[..len as usize]);
        let path = work.path().join(&name);
        let read_only_too = len % 13 == 0;
        assert_open_fails_untouched(
            work.path(),
            opts,
            read_only_too,
            &format!("header cut at {len}"),
            corrupt_at(path, 0, |r| matches!(r, CorruptionReason::BadHeader(_))),
        );
    }

    // A header naming another segment than its file name.
    let work = scratch();
    std::fs::write(work.path().join(segment_file_name(3)), &built.bytes).unwrap();
    let path = work.path().join(segment_file_name(3));
    assert_open_fails_untouched(
        work.path(),
        opts,
        true,
        "header names segment 1",
        corrupt_at(path, 0, |r| matches!(r, CorruptionReason::BrokenChain(_))),
    );

    // A record length running past the end of the segment (the checksum cannot even be
    // computed). In the middle of the log the error names the record; its reason says
    // why it cannot be a torn tail: the durable batch after it.
    let file_len = built.bytes.len() as u64;
    let (rec, next) = (&built.records[4], &built.records[5]);
    for length in [u32::MAX, (file_len - rec.offset - RECORD_HEADER + 1) as u32] {
        let mut b = built.bytes.clone();
        b[rec.offset as usize + 4..][..4].copy_from_slice(&length.to_le_bytes());
        let work = fresh(&b);
        let path = work.path().join(&name);
        for mode in [RecoveryMode::TolerateTornTail, RecoveryMode::Strict] {
            assert_open_fails_untouched(
                work.path(),
                with_mode(opts, mode),
                true,
                &format!("record length {length}, {mode:?}"),
                corrupt_at(path.clone(), rec.offset, |r| {
                    matches!(r, CorruptionReason::ValidDataAfter { .. })
                }),
            );
        }
        let reason = expect_corruption(open_collect(work.path(), opts), &path, rec.offset, "");
        assert_eq!(
            reason,
            CorruptionReason::ValidDataAfter {
                later_offset: next.offset
            }
        );
    }
    // In the final batch the same damage is a torn tail: strict refuses it, the default
    // mode drops that one record.
    let last = built.records.last().unwrap();
    let mut b = built.bytes.clone();
    b[last.offset as usize + 4..][..4].copy_from_slice(&u32::MAX.to_le_bytes());
    let torn = nonzero_len(&b[last.offset as usize..]);
    let work = fresh(&b);
    let path = work.path().join(&name);
    assert_open_fails_untouched(
        work.path(),
        with_mode(opts, RecoveryMode::Strict),
        true,
        "final record length, strict",
        move |e| {
            matches!(e, Error::Corruption { segment, offset, reason: CorruptionReason::TornTail { torn_bytes } }
                if *segment == path && *offset == last.offset && *torn_bytes == torn)
        },
    );
    let (log, seen) = open_collect(work.path(), opts).unwrap();
    assert_eq!(seen, &built.records[..9]);
    assert_eq!(log.recovery().torn_bytes, torn);
}
