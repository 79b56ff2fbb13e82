//! Record images from another segment or another store, carried in a payload and
//! exposed by a tear, never validate under the segment's salt (and in v1, without a
//! salt, they do).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use crate::common::segments::{copy_dir, read_header, walk};
use agentwal::log::record::{self, Salt};
use agentwal::log::{
    Appended, CompactionHooks, FLAG_DURABLE_BEFORE, FORMAT_VERSION_V1, Log, Moved,
    RECORD_HEADER_BYTES, RecordPos, SegmentHeader, segment_path,
};
use agentwal::{CorruptionReason, Error, RecoveryMode};

use crate::helpers::{
    Records, SEGMENT_BYTES, encode, image_of, open, options, payload, read_range, resalted,
    write_at,
};

/// Compaction hooks that keep the records at the given positions live (and follow them),
/// and with `rewrite` set, give a payload of kind 2 a new one: its first quarter.
#[derive(Default)]
pub(crate) struct KeepLive {
    pub(crate) lock: parking_lot::RwLock<()>,
    pub(crate) at: Mutex<Vec<RecordPos>>,
    pub(crate) rewrite: bool,
    /// The size of every record at its new place, as the last pass reported it.
    pub(crate) sizes: Mutex<HashMap<RecordPos, u32>>,
}

impl CompactionHooks for KeepLive {
    fn positions_lock(&self) -> &parking_lot::RwLock<()> {
        &self.lock
    }
    fn live_records(&self, sealed: &dyn Fn(RecordPos) -> bool) -> (Vec<RecordPos>, u64) {
        let at = self.at.lock().expect("lock");
        (at.iter().copied().filter(|p| sealed(*p)).collect(), 0)
    }
    fn orphan(
        &self,
        vanishes: &dyn Fn(RecordPos) -> bool,
        moved: &HashMap<RecordPos, Moved>,
    ) -> Option<RecordPos> {
        let at = self.at.lock().expect("lock");
        at.iter()
            .copied()
            .find(|p| vanishes(*p) && !moved.contains_key(p))
    }
    fn remap(&self, moved: &HashMap<RecordPos, Moved>) {
        for p in self.at.lock().expect("lock").iter_mut() {
            if let Some(new) = moved.get(p) {
                *p = new.pos;
            }
        }
        *self.sizes.lock().expect("lock") = moved.values().map(|m| (m.pos, m.bytes)).collect();
    }
    fn rewrite(&self, kind: u8, payload: &[u8]) -> Option<Vec<u8>> {
        match kind {
            2 if self.rewrite => Some(payload[..payload.len() / 4].to_vec()),
            // Longer than the record: the pass must ignore it.
            3 if self.rewrite => Some([payload, payload].concat()),
            _ => None,
        }
    }
    fn rewrites(&self) -> bool {
        self.rewrite
    }
}

/// `b` was handed out after `a` by a salt counter (which wraps after 2^32 salts).
pub(crate) fn salt_after(a: u32, b: u32) -> bool {
    let ahead = b.wrapping_sub(a);
    ahead != 0 && ahead < 1 << 31
}

// ---------------------------------------------------------------------------------------
// a. A record image embedded in a payload never validates

/// How the record carrying the image is torn.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Tear {
    /// Its last bytes (after the image) never reached the disk: the image lies inside
    /// the torn region.
    Tail,
    /// Its header (its first bytes) never reached the disk: the image starts right
    /// after the data end, past the zeros where the header was.
    Head,
}

/// The carrier's payload: the image between two short markers.
fn carrier(image: &[u8]) -> Vec<u8> {
    let mut out = b"<<".to_vec();
    out.extend_from_slice(image);
    out.extend_from_slice(b">>");
    out
}

/// Tears the record `at` (`bytes` long) of `path` as `tear` says.
pub(crate) fn tear(path: &Path, at: usize, bytes: usize, tear: Tear) {
    match tear {
        Tear::Tail => write_at(path, at + bytes - 2, &[0, 0]),
        Tear::Head => write_at(path, at, &[0u8; RECORD_HEADER_BYTES + 2]),
    }
}

/// What recovery of a log whose last record carries an embedded image may deliver: the
/// records before it, nothing else, with the carrier reported as a torn tail (not as
/// corruption), in `TolerateTornTail` and `Salvage` modes. The LSN the carrier had is
/// free again: the next append takes it.
fn assert_image_not_taken(dir: &Path, before: &Records, image_payload: &[u8], ctx: &str) {
    for mode in [RecoveryMode::TolerateTornTail, RecoveryMode::Salvage] {
        let copy = copy_dir(dir);
        let (log, got) =
            open(copy.path(), mode).unwrap_or_else(|e| panic!("{ctx} {mode:?}: open: {e}"));
        assert_eq!(
            &got, before,
            "{ctx} {mode:?}: exactly the records before the tear"
        );
        assert!(
            got.iter().all(|(_, p)| p != image_payload),
            "{ctx} {mode:?}: the image was delivered"
        );
        let r = log.recovery();
        assert!(r.skipped.is_empty(), "{ctx} {mode:?}: {r:?}");
        assert!(
            r.torn_bytes > 0,
            "{ctx} {mode:?}: the carrier is a torn tail: {r:?}"
        );
        let next = before.last().map_or(1, |(lsn, _)| lsn + 1);
        assert_eq!(log.append(1, b"next").expect("append").lsn, next, "{ctx}");
        drop(log);
        let (_, again) = open(copy.path(), RecoveryMode::Strict).expect("reopen");
        assert_eq!(again.len(), before.len() + 1, "{ctx} {mode:?}");
    }
}

/// The control: the same image, checksummed under the target segment's own salt, where
/// the test put it. Recovery takes it (a durable batch after a bad record is corruption;
/// salvage resumes at it and delivers it), so the position and LSN are ones that count.
fn assert_resalted_image_taken(
    dir: &Path,
    segment: &Path,
    image_at: usize,
    image: &[u8],
    ctx: &str,
) {
    let own = read_header(segment).salt;
    let copy = copy_dir(dir);
    let path = copy.path().join(segment.file_name().expect("name"));
    write_at(&path, image_at, &resalted(image, own));
    match open(copy.path(), RecoveryMode::TolerateTornTail) {
        Err(Error::Corruption {
            reason: CorruptionReason::ValidDataAfter { later_offset },
            ..
        }) => assert_eq!(later_offset, image_at as u64, "{ctx}"),
        other => panic!("{ctx}: control: {:?}", other.map(|(_, r)| r.len())),
    }
    let copy = copy_dir(dir);
    let path = copy.path().join(segment.file_name().expect("name"));
    write_at(&path, image_at, &resalted(image, own));
    let (_, got) = open(copy.path(), RecoveryMode::Salvage).expect("salvage");
    let image_payload = &image[RECORD_HEADER_BYTES..];
    assert!(
        got.iter().any(|(_, p)| p == image_payload),
        "{ctx}: control: salvage delivers the resalted image"
    );
}

/// Appends `payloads` to the log in `dir` and returns what each append said.
fn append_all(log: &Log, payloads: &[Vec<u8>]) -> Vec<Appended> {
    payloads
        .iter()
        .map(|p| log.append(1, p).expect("append"))
        .collect()
}

fn records_of(appended: &[Appended], payloads: &[Vec<u8>]) -> Records {
    appended
        .iter()
        .zip(payloads)
        .map(|(a, p)| (a.lsn, p.clone()))
        .collect()
}

/// Writes the carrier of `image` as the next record of the log in `dir` (closed cleanly
/// afterwards: in a fresh segment that writes nothing), tears it, and checks recovery.
fn carry_and_tear(dir: &Path, log: Log, before: &Records, image: &[u8], ctx: &str) {
    let flags = record::parse_header(image).expect("image").flags;
    assert!(
        flags & FLAG_DURABLE_BEFORE != 0,
        "{ctx}: a durable batch's image"
    );
    let carried = log.append(1, &carrier(image)).expect("append carrier");
    let fits = record::parse_header(image).expect("image").lsn >= carried.lsn;
    assert!(fits, "{ctx}: the image's LSN fits where it lies");
    let segment = segment_path(dir, carried.pos.segment_id);
    assert!(
        !read_header(&segment).is_recycled(),
        "{ctx}: a fresh segment: zeros follow the data"
    );
    drop(log);
    let at = carried.pos.offset as usize;
    for how in [Tear::Tail, Tear::Head] {
        let torn = copy_dir(dir);
        let path = torn.path().join(segment.file_name().expect("name"));
        tear(&path, at, carried.bytes as usize, how);
        let ctx = format!("{ctx}, {how:?} torn");
        assert_image_not_taken(torn.path(), before, &image[RECORD_HEADER_BYTES..], &ctx);
        assert_resalted_image_taken(
            torn.path(),
            &path,
            at + RECORD_HEADER_BYTES + 2,
            image,
            &ctx,
        );
    }
}

#[test]
fn a_record_image_from_another_store_embedded_in_a_payload_never_validates() {
    // Two stores, the same appends: the donor's record 6 has the LSN the target's sixth
    // record (the carrier) gets.
    let payloads: Vec<Vec<u8>> = (0..5).map(|i| payload("t", i, 100)).collect();
    let donor = tempfile::tempdir().expect("tempdir");
    let log = Log::open(donor.path(), options(RecoveryMode::TolerateTornTail)).expect("open");
    append_all(&log, &payloads);
    let donated = log.append(1, &payload("donor", 6, 60)).expect("append");
    let image = image_of(donor.path(), &donated);
    let donor_salt = read_header(&segment_path(donor.path(), 1)).salt;
    drop(log);

    let target = tempfile::tempdir().expect("tempdir");
    let log = Log::open(target.path(), options(RecoveryMode::TolerateTornTail)).expect("open");
    let before = records_of(&append_all(&log, &payloads), &payloads);
    let target_salt = read_header(&segment_path(target.path(), 1)).salt;
    assert_ne!(donor_salt, target_salt, "two stores' salts (random starts)");
    carry_and_tear(
        target.path(),
        log,
        &before,
        &image,
        "another store's record",
    );
}

#[test]
fn a_record_image_from_another_segment_of_the_same_store_embedded_in_a_payload_never_validates() {
    // The store, and a copy of it that went on (as a restored backup would find its
    // original did): the copy's records past this point, in a segment created after the
    // copy, carry LSNs the store has not used yet.
    let store = tempfile::tempdir().expect("tempdir");
    let log = Log::open(store.path(), options(RecoveryMode::TolerateTornTail)).expect("open");
    let payloads: Vec<Vec<u8>> = (0..8).map(|i| payload("s", i, 600)).collect();
    let appended = append_all(&log, &payloads);
    let final_id = appended.last().expect("appended").pos.segment_id;
    assert!(final_id >= 2, "the store rotated");
    let before = records_of(&appended, &payloads);
    let went_on = copy_dir(store.path());
    drop(log);
    let image = {
        let log = Log::open(went_on.path(), options(RecoveryMode::TolerateTornTail))
            .expect("open the copy");
        let later: Vec<Vec<u8>> = (8..20).map(|i| payload("later", i, 600)).collect();
        let appended = append_all(&log, &later);
        let first_in_next = appended
            .iter()
            .find(|a| a.pos.segment_id > final_id)
            .expect("the copy rotated");
        image_of(went_on.path(), first_in_next)
    };
    let own = read_header(&segment_path(store.path(), final_id)).salt;
    let theirs = read_header(&segment_path(went_on.path(), final_id + 1)).salt;
    assert_ne!(own, theirs, "another segment, another salt");
    let log = Log::open(store.path(), options(RecoveryMode::TolerateTornTail)).expect("reopen");
    carry_and_tear(
        store.path(),
        log,
        &before,
        &image,
        "another segment's record",
    );
}

/// Writes a format-v1 log by hand: segment 1 (v1 header, unsalted records of kind 1,
/// LSNs from 1, each a durable batch of its own), zero-filled to `SEGMENT_BYTES`. Returns
/// each record's offset and length.
fn write_v1_log(dir: &Path, payloads: &[Vec<u8>]) -> Vec<(usize, usize)> {
    let header = SegmentHeader {
        id: 1,
        first_lsn: 1,
        flags: 0,
        salt: Salt::Unsalted,
        chain: None,
    };
    let mut bytes = header.encode().to_vec();
    assert_eq!(
        u32::from_le_bytes(bytes[8..12].try_into().unwrap()),
        FORMAT_VERSION_V1
    );
    let mut at = Vec::new();
    for (i, p) in payloads.iter().enumerate() {
        let start = bytes.len();
        bytes.extend_from_slice(&encode(Salt::Unsalted, i as u64 + 1, p));
        at.push((start, bytes.len() - start));
    }
    bytes.resize(SEGMENT_BYTES as usize, 0);
    std::fs::write(segment_path(dir, 1), bytes).expect("write v1 segment");
    at
}

#[test]
fn in_a_v1_segment_a_record_image_from_another_v1_store_is_taken() {
    // The limit format v2 removes (format v1 limit, DESIGN.md §3.2): without a salt, a byte-exact
    // record of another v1 store whose LSN fits validates here. Recovery then calls the
    // torn carrier corruption (a durable batch after it), and salvage delivers the image
    // as a record the store never wrote.
    let payloads: Vec<Vec<u8>> = (0..5).map(|i| payload("t", i, 100)).collect();
    let donor = tempfile::tempdir().expect("tempdir");
    let mut donor_payloads = payloads.clone();
    donor_payloads.push(payload("donor", 6, 60));
    let at = write_v1_log(donor.path(), &donor_payloads);
    let (start, len) = at[5];
    let image = read_range(&segment_path(donor.path(), 1), start, len);
    let image_payload = image[RECORD_HEADER_BYTES..].to_vec();

    let target = tempfile::tempdir().expect("tempdir");
    write_v1_log(target.path(), &payloads);
    let (log, got) = open(target.path(), RecoveryMode::Strict).expect("open v1");
    assert_eq!(got.len(), 5);
    let carried = log.append(1, &carrier(&image)).expect("append");
    // Appended to the v1 final segment, as a v1 (unsalted) record.
    assert_eq!((carried.lsn, carried.pos.segment_id), (6, 1));
    let path = segment_path(target.path(), 1);
    assert_eq!(read_header(&path).salt, Salt::Unsalted);
    assert_eq!(walk(&path).len(), 6, "the carrier validates unsalted");
    drop(log);
    tear(
        &path,
        carried.pos.offset as usize,
        carried.bytes as usize,
        Tear::Tail,
    );

    let copy = copy_dir(target.path());
    match open(copy.path(), RecoveryMode::TolerateTornTail) {
        Err(Error::Corruption {
            reason: CorruptionReason::ValidDataAfter { later_offset },
            ..
        }) => assert_eq!(
            later_offset,
            carried.pos.offset + RECORD_HEADER_BYTES as u64 + 2
        ),
        other => panic!(
            "v1: the image is taken for a durable batch: {:?}",
            other.map(|_| ())
        ),
    }
    let (_, got) = open(target.path(), RecoveryMode::Salvage).expect("salvage");
    assert_eq!(
        got.len(),
        6,
        "v1: salvage delivers the five records and the image"
    );
    assert_eq!(
        got[5],
        (6, image_payload),
        "v1: the image, delivered as record 6"
    );
}
