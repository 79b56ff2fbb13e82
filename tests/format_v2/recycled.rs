//! Recycled segment files: old bytes past the data (ghosts of an earlier life) are never
//! delivered, after a clean close or a crash.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::common::hooks::NothingLive;
use crate::common::segments::{copy_dir, free_files, read_header, segment_files, walk};
use agentwal::RecoveryMode;
use agentwal::log::record::Salt;
use agentwal::log::{
    FORMAT_VERSION, KIND_CLOSE, KIND_SEAL, Log, RECORD_HEADER_BYTES, RecordPos, segment_path,
};
use tempfile::TempDir;

use crate::foreign_images::salt_after;
use crate::helpers::{
    Records, SEGMENT_BYTES, data_end, encode, inode, open, options, payload, salt_of, write_at,
};

// ---------------------------------------------------------------------------------------
// b. A segment file from a previous life never validates

/// A log whose active segment is a recycled file, with records in it.
pub(crate) struct Recycled {
    pub(crate) dir: TempDir,
    pub(crate) log: Log,
    /// Every record the log holds (all acknowledged), in order.
    pub(crate) acked: Records,
    /// The recycled segment: its id and path.
    pub(crate) id: u64,
    pub(crate) path: PathBuf,
    /// The salt of the file's previous life.
    pub(crate) old_salt: u32,
}

/// Fills four segments, compacts with nothing live (the sealed segments are retired to
/// `.free` files), then appends until the writer rotates into a recycled file, and a few
/// records more there.
pub(crate) fn recycled_log() -> Recycled {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), options(RecoveryMode::TolerateTornTail)).expect("open");
    let mut acked: Vec<(RecordPos, u64, Vec<u8>)> = Vec::new();
    for i in 0..40 {
        let p = payload("old", i, 300);
        let a = log.append(1, &p).expect("append");
        acked.push((a.pos, a.lsn, p));
    }
    let active = acked.last().expect("appended").0.segment_id;
    assert!(active >= 4, "four segments");
    log.compact(true, &NothingLive::default())
        .expect("compact")
        .expect("a pass ran");
    acked.retain(|(pos, _, _)| pos.segment_id >= active);
    let free = free_files(dir.path());
    let files_max = agentwal::log::recycle_files_max(SEGMENT_BYTES, log.stats().rotations);
    assert!(
        !free.is_empty() && free.len() <= files_max,
        "retired files wait for reuse: {free:?}"
    );
    let free_salts: HashMap<u64, u32> = free
        .iter()
        .map(|f| (inode(f), salt_of(&read_header(f))))
        .collect();
    assert_eq!(log.stats().segments_recycled, 0);
    let mut i = 100;
    loop {
        let p = payload("new", i, 300);
        let a = log.append(1, &p).expect("append");
        acked.push((a.pos, a.lsn, p));
        i += 1;
        if a.pos.segment_id > active {
            break;
        }
    }
    let id = active + 1;
    for _ in 0..3 {
        let p = payload("new", i, 300);
        let a = log.append(1, &p).expect("append");
        assert_eq!(a.pos.segment_id, id, "room for a few more");
        acked.push((a.pos, a.lsn, p));
        i += 1;
    }
    assert_eq!(log.stats().segments_recycled, 1, "{:?}", log.stats());
    let path = segment_path(dir.path(), id);
    let h = read_header(&path);
    assert!(h.is_recycled(), "the recycled flag: {h:?}");
    assert_eq!(h.version(), FORMAT_VERSION);
    let old_salt = *free_salts
        .get(&inode(&path))
        .expect("the segment is one of the retired files");
    assert!(
        salt_after(old_salt, salt_of(&h)),
        "the new life's salt {:#x} comes after the old one's {old_salt:#x}",
        salt_of(&h)
    );
    assert_eq!(
        free_files(dir.path()).len(),
        free.len() - 1,
        "one was taken"
    );
    Recycled {
        dir,
        log,
        acked: acked.into_iter().map(|(_, lsn, p)| (lsn, p)).collect(),
        id,
        path,
        old_salt,
    }
}

/// The payload of a record planted as an earlier life's.
const GHOST: &[u8] = b"a record of the file's earlier life";

/// Plants earlier-life records (under `old_salt`, durable batches whose LSNs follow
/// `next_lsn` on) at `at` and further on in segment `path`, past its data: bytes the file
/// could have held from its earlier life. Returns their offsets.
pub(crate) fn plant_ghosts(path: &Path, at: usize, old_salt: u32, next_lsn: u64) -> Vec<usize> {
    let file_bytes = std::fs::metadata(path).expect("metadata").len() as usize;
    let mut offsets = Vec::new();
    let mut offset = at;
    let mut lsn = next_lsn;
    while offset + 200 <= file_bytes {
        write_at(path, offset, &encode(Salt::Salted(old_salt), lsn, GHOST));
        offsets.push(offset);
        offset += 300;
        lsn += 1;
    }
    offsets
}

pub(crate) fn assert_no_ghost(got: &Records, ctx: &str) {
    assert!(
        got.iter().all(|(_, p)| p != GHOST),
        "{ctx}: a ghost was delivered"
    );
}

#[test]
fn a_recycled_segment_closed_cleanly_delivers_exactly_its_new_life_and_is_appended_in_place() {
    let Recycled {
        dir,
        log,
        acked,
        id,
        path,
        old_salt,
    } = recycled_log();
    drop(log); // a clean close: a close record
    let records = walk(&path);
    let (close_at, close, _) = records.last().cloned().expect("records");
    let next_lsn = acked.last().expect("acked").0 + 1;
    assert_eq!(
        (close.kind, close.lsn),
        (KIND_CLOSE, next_lsn),
        "{records:?}"
    );
    let close_end = close_at + RECORD_HEADER_BYTES;
    // Past the close record: the earlier life's records (those it really wrote, with
    // LSNs lower than the new life's), and planted ones whose LSNs would fit.
    let ghosts = plant_ghosts(&path, close_end, old_salt, next_lsn);
    assert!(ghosts.len() >= 3);
    let files = segment_files(dir.path()).len();
    for mode in [
        RecoveryMode::TolerateTornTail,
        RecoveryMode::Strict,
        RecoveryMode::Salvage,
    ] {
        let ctx = format!("{mode:?}");
        let copy = copy_dir(dir.path());
        let (log, got) = open(copy.path(), mode).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(got, acked, "{ctx}: exactly the new life's records");
        assert_no_ghost(&got, &ctx);
        let r = log.recovery();
        assert_eq!(
            r.torn_bytes, 0,
            "{ctx}: nothing torn after a clean close: {r:?}"
        );
        assert!(r.skipped.is_empty(), "{ctx}: {r:?}");
        // Appends continue in place, where the close record was (the open zeroed it, so
        // that it cannot outlive a batch appended after it): no new segment.
        let a = log.append(1, b"after the close").expect("append");
        assert_eq!(
            (a.lsn, a.pos),
            (
                next_lsn,
                RecordPos {
                    segment_id: id,
                    offset: (close_end - RECORD_HEADER_BYTES) as u64
                }
            ),
            "{ctx}"
        );
        assert_eq!(
            segment_files(copy.path()).len(),
            files,
            "{ctx}: no segment created"
        );
        drop(log);
        let (_, again) = open(copy.path(), RecoveryMode::Strict).expect("reopen");
        let mut want = acked.clone();
        want.push((next_lsn, b"after the close".to_vec()));
        assert_eq!(again, want, "{ctx}: after reopen");
    }
    // Control: the first planted record, under the segment's own salt, would be taken.
    let copy = copy_dir(dir.path());
    let copy_path = copy.path().join(path.file_name().expect("name"));
    let own = read_header(&copy_path).salt;
    write_at(&copy_path, close_end, &encode(own, next_lsn, GHOST));
    let (_, got) = open(copy.path(), RecoveryMode::TolerateTornTail).expect("open");
    assert_eq!(got.last(), Some(&(next_lsn, GHOST.to_vec())), "control");
}

#[test]
fn a_recycled_segment_after_a_crash_delivers_exactly_its_new_life_and_is_sealed_at_open() {
    let Recycled {
        dir,
        log,
        acked,
        id,
        path,
        old_salt,
    } = recycled_log();
    // A crash: the directory as the writer leaves it, no close record.
    let crashed = copy_dir(dir.path());
    drop(log);
    let path = crashed.path().join(path.file_name().expect("name"));
    let end = data_end(&path);
    let last = walk(&path).last().cloned().expect("records").1;
    assert_ne!(last.kind, KIND_CLOSE, "the writer did not close");
    let next_lsn = acked.last().expect("acked").0 + 1;
    let ghosts = plant_ghosts(&path, end, old_salt, next_lsn);
    assert!(ghosts.len() >= 3);
    let file_bytes = std::fs::metadata(&path).expect("metadata").len();
    let torn = file_bytes - end as u64;
    let files = segment_files(crashed.path()).len();
    for mode in [RecoveryMode::TolerateTornTail, RecoveryMode::Salvage] {
        let ctx = format!("{mode:?}");
        let copy = copy_dir(crashed.path());
        let copy_path = copy.path().join(path.file_name().expect("name"));
        let (log, got) = open(copy.path(), mode).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(
            got, acked,
            "{ctx}: exactly the new life's records, none lost"
        );
        assert_no_ghost(&got, &ctx);
        let r = log.recovery();
        assert_eq!(
            r.torn_bytes, torn,
            "{ctx}: every byte past the data is torn: {r:?}"
        );
        assert!(r.skipped.is_empty(), "{ctx}: {r:?}");
        // The open sealed the segment at the end of its data; the next append goes to a
        // new segment (created by that append, not by the open).
        let records = walk(&copy_path);
        let (seal_at, seal, _) = records.last().cloned().expect("records");
        assert_eq!(
            (seal.kind, seal_at, seal.lsn),
            (KIND_SEAL, end, next_lsn),
            "{ctx}"
        );
        assert_eq!(segment_files(copy.path()).len(), files, "{ctx}");
        let a = log.append(1, b"after the crash").expect("append");
        assert_eq!((a.lsn, a.pos.segment_id), (next_lsn, id + 1), "{ctx}");
        drop(log);
        let (log, again) = open(copy.path(), RecoveryMode::Strict).expect("reopen");
        let mut want = acked.clone();
        want.push((next_lsn, b"after the crash".to_vec()));
        assert_eq!(again, want, "{ctx}: after reopen");
        assert_eq!(log.recovery().torn_bytes, 0, "{ctx}");
    }
    // Control: the first planted record, under the segment's own salt, would be taken.
    let own = read_header(&path).salt;
    write_at(&path, end, &encode(own, next_lsn, GHOST));
    let (_, got) = open(crashed.path(), RecoveryMode::TolerateTornTail).expect("open");
    assert_eq!(got.last(), Some(&(next_lsn, GHOST.to_vec())), "control");
}
