//! Format v2: what the segment salt buys (every record checksum mixes in its segment's
//! salt, so a record image from another segment, another store or an earlier life of a
//! recycled file never validates), recycled segment files (old bytes past the data,
//! close records, the seal an open writes after a crash), and salt uniqueness.
//!
//! Record images are byte-exact copies of records another log wrote; bytes of "an earlier
//! life" are encoded with the salt that life's header carried (read from the `.free`
//! file before it was reused). Each test that relies on a planted image also shows, as a
//! control, that the same image under the segment's own salt would have been taken: the
//! image lies where it would count.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use agentwal::log::record::{self, RecordHeader, Salt};
use agentwal::log::{
    Appended, CompactionHooks, FLAG_BATCH_END, FLAG_BATCH_START, FLAG_DURABLE_BEFORE,
    FORMAT_VERSION, FORMAT_VERSION_V1, KIND_CLOSE, KIND_SEAL, Log, LogOptions, Moved,
    RECORD_HEADER_BYTES, RECYCLE_FILES_MAX, RecordPos, SEGMENT_HEADER_BYTES, SegmentHeader,
    segment_path,
};
use agentwal::{CorruptionReason, Error, RecoveryMode, SyncMode};
use common::hooks::NothingLive;
use common::segments::{copy_dir, free_files, read_header, segment_files, walk};
use tempfile::TempDir;

const SEGMENT_BYTES: u64 = 4096;

fn options(recovery: RecoveryMode) -> LogOptions {
    LogOptions {
        sync: SyncMode::Always,
        segment_bytes: SEGMENT_BYTES,
        recovery,
    }
}

/// Payload `i` of a run tagged `tag`: `len` bytes, different for every (tag, i).
fn payload(tag: &str, i: u64, len: usize) -> Vec<u8> {
    let unit = format!("{tag}-{i:06}|");
    unit.bytes().cycle().take(len).collect()
}

/// (lsn, payload) of the records a log holds, in order.
type Records = Vec<(u64, Vec<u8>)>;

/// Opens the log in `dir` for writing, collecting the records recovery delivers.
fn open(dir: &Path, mode: RecoveryMode) -> agentwal::Result<(Log, Records)> {
    let mut got = Vec::new();
    let log = Log::open_with(dir, options(mode), |r| {
        got.push((r.lsn, r.payload.to_vec()));
        Ok(())
    })?;
    Ok((log, got))
}

fn salt_of(header: &SegmentHeader) -> u32 {
    match header.salt {
        Salt::Salted(salt) => salt,
        Salt::Unsalted => panic!("segment {} is format v1", header.id),
    }
}

/// End of the last record `walk` finds.
fn data_end(path: &Path) -> usize {
    walk(path)
        .last()
        .map_or(SEGMENT_HEADER_BYTES, |(at, h, _)| {
            at + h.record_bytes() as usize
        })
}

fn inode(path: &Path) -> u64 {
    std::fs::metadata(path).expect("metadata").ino()
}

/// Bytes `[at, at + len)` of file `path`.
fn read_range(path: &Path, at: usize, len: usize) -> Vec<u8> {
    std::fs::read(path).expect("read")[at..at + len].to_vec()
}

fn write_at(path: &Path, at: usize, bytes: &[u8]) {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open for writing");
    file.write_all_at(bytes, at as u64).expect("write");
}

/// The image of the record `appended` describes, exactly as it lies in its segment.
fn image_of(dir: &Path, appended: &Appended) -> Vec<u8> {
    let path = segment_path(dir, appended.pos.segment_id);
    read_range(&path, appended.pos.offset as usize, appended.bytes as usize)
}

/// A single-record batch written after everything before it was durable, encoded under
/// `salt`.
fn encode(salt: Salt, lsn: u64, payload: &[u8]) -> Vec<u8> {
    let header = RecordHeader {
        payload_len: payload.len() as u32,
        lsn,
        kind: 1,
        flags: FLAG_BATCH_START | FLAG_BATCH_END | FLAG_DURABLE_BEFORE,
    };
    let mut out = Vec::new();
    record::encode_into(
        &mut out,
        salt,
        &header,
        record::payload_crc(payload),
        payload,
    );
    out
}

/// The same record (header and payload) checksummed under `salt` instead.
fn resalted(image: &[u8], salt: Salt) -> Vec<u8> {
    let header = record::parse_header(image).expect("a record image");
    let payload = &image[RECORD_HEADER_BYTES..];
    let mut out = Vec::new();
    record::encode_into(
        &mut out,
        salt,
        &header,
        record::payload_crc(payload),
        payload,
    );
    out
}

/// Compaction hooks that keep the records at the given positions live (and follow them),
/// and with `rewrite` set, give a payload of kind 2 a new one: its first quarter.
#[derive(Default)]
struct KeepLive {
    lock: parking_lot::RwLock<()>,
    at: Mutex<Vec<RecordPos>>,
    rewrite: bool,
    /// The size of every record at its new place, as the last pass reported it.
    sizes: Mutex<HashMap<RecordPos, u32>>,
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
fn salt_after(a: u32, b: u32) -> bool {
    let ahead = b.wrapping_sub(a);
    ahead != 0 && ahead < 1 << 31
}

// ---------------------------------------------------------------------------------------
// a. A record image embedded in a payload never validates

/// How the record carrying the image is torn.
#[derive(Debug, Clone, Copy)]
enum Tear {
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
fn tear(path: &Path, at: usize, bytes: usize, tear: Tear) {
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

// ---------------------------------------------------------------------------------------
// b. A segment file from a previous life never validates

/// A log whose active segment is a recycled file, with records in it.
struct Recycled {
    dir: TempDir,
    log: Log,
    /// Every record the log holds (all acknowledged), in order.
    acked: Records,
    /// The recycled segment: its id and path.
    id: u64,
    path: PathBuf,
    /// The salt of the file's previous life.
    old_salt: u32,
}

/// Fills four segments, compacts with nothing live (the sealed segments are retired to
/// `.free` files), then appends until the writer rotates into a recycled file, and a few
/// records more there.
fn recycled_log() -> Recycled {
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
    assert!(
        !free.is_empty() && free.len() <= RECYCLE_FILES_MAX,
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
fn plant_ghosts(path: &Path, at: usize, old_salt: u32, next_lsn: u64) -> Vec<usize> {
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

fn assert_no_ghost(got: &Records, ctx: &str) {
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

// ---------------------------------------------------------------------------------------
// c. Salt uniqueness

/// Every file's salt, by inode: each observation appends a file's salt when it changed.
#[derive(Default)]
struct SaltHistory {
    by_inode: BTreeMap<u64, Vec<u32>>,
    /// Which inode each salt was seen on.
    owner: HashMap<u32, u64>,
}

impl SaltHistory {
    /// Looks at every segment and retired file of `dir`: their salts are distinct, no
    /// salt ever seen on one file shows up on another, and a file's salt only moves on.
    fn observe(&mut self, dir: &Path, ctx: &str) {
        let mut files: Vec<PathBuf> = segment_files(dir).into_iter().map(|(_, p)| p).collect();
        files.extend(free_files(dir));
        let mut now = HashMap::new();
        for f in &files {
            let salt = salt_of(&read_header(f));
            if let Some(other) = now.insert(salt, f.clone()) {
                panic!(
                    "{ctx}: salt {salt:#x} on {} and {}",
                    f.display(),
                    other.display()
                );
            }
            let ino = inode(f);
            let owner = *self.owner.entry(salt).or_insert(ino);
            assert_eq!(owner, ino, "{ctx}: salt {salt:#x} seen on two files");
            let history = self.by_inode.entry(ino).or_default();
            match history.last() {
                Some(&last) if last == salt => {}
                Some(&last) => {
                    assert!(
                        salt_after(last, salt),
                        "{ctx}: {}: salt {salt:#x} after {last:#x}",
                        f.display()
                    );
                    history.push(salt);
                }
                None => history.push(salt),
            }
        }
    }

    fn lives(&self) -> usize {
        self.by_inode.values().map(Vec::len).sum()
    }

    fn reused_files(&self) -> usize {
        self.by_inode.values().filter(|h| h.len() > 1).count()
    }
}

#[test]
fn every_segment_file_has_a_distinct_salt_and_a_recycled_file_a_higher_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut history = SaltHistory::default();
    let mut log = Log::open(dir.path(), options(RecoveryMode::TolerateTornTail)).expect("open");
    // Every fifth record stays live, so compaction writes compacted segments too.
    let hooks = KeepLive::default();
    let mut recycled = 0;
    let mut compacted = 0;
    let mut appended = BTreeMap::new();
    let mut live = Vec::new();
    for round in 0..12u64 {
        for i in 0..30 {
            let n = round * 100 + i;
            let p = payload("r", n, 300);
            let a = log.append(1, &p).expect("append");
            appended.insert(a.lsn, p);
            if n % 5 == 0 {
                hooks.at.lock().expect("lock").push(a.pos);
                live.push(a.lsn);
            }
            history.observe(dir.path(), &format!("round {round}, append {i}"));
        }
        if log.compact(true, &hooks).expect("compact").is_some() {
            compacted += 1;
        }
        history.observe(dir.path(), &format!("round {round}, compaction"));
        if round % 3 == 2 {
            recycled += log.stats().segments_recycled;
            drop(log);
            log = Log::open(dir.path(), options(RecoveryMode::Strict)).expect("reopen");
            history.observe(dir.path(), &format!("round {round}, reopen"));
        }
    }
    recycled += log.stats().segments_recycled;
    drop(log);
    // Every live record is there, and every record there is one that was appended.
    let (_, got) = open(dir.path(), RecoveryMode::Strict).expect("reopen");
    for (lsn, p) in &got {
        assert_eq!(appended.get(lsn), Some(p), "record {lsn}");
    }
    let delivered: std::collections::HashSet<u64> = got.iter().map(|(lsn, _)| *lsn).collect();
    assert!(
        live.iter().all(|lsn| delivered.contains(lsn)),
        "live records kept"
    );
    let compacted_headers = segment_files(dir.path())
        .iter()
        .filter(|(_, p)| read_header(p).is_compacted())
        .count();
    assert!(
        compacted > 5 && compacted_headers == 1,
        "{compacted} passes"
    );
    assert!(recycled > 5, "{recycled} recycled rotations");
    assert!(history.reused_files() > 2, "files lived several lives");
    assert!(history.lives() > 30, "{} segment lives", history.lives());
}

#[test]
fn a_reopened_writer_salts_new_segments_above_its_retired_files() {
    // Salts start above every salt on disk, retired files' included. In normal operation
    // the highest is a live segment's (the newest, or the compacted one); here a retired
    // file holds it (as after segments were removed by hand): recycled, it must not get
    // its old salt back, or its old records, LSNs fitting, would validate again.
    let Recycled {
        dir, log, acked, ..
    } = recycled_log();
    drop(log);
    let mut history = SaltHistory::default();
    history.observe(dir.path(), "before");
    let top = segment_files(dir.path())
        .iter()
        .map(|(_, p)| salt_of(&read_header(p)))
        .chain(
            free_files(dir.path())
                .iter()
                .map(|p| salt_of(&read_header(p))),
        )
        .reduce(|a, b| if salt_after(a, b) { b } else { a })
        .expect("salts");
    for f in free_files(dir.path()) {
        std::fs::remove_file(f).expect("remove");
    }
    // A retired file whose salt is the highest on disk, holding records of that life
    // with the LSNs the next appends get.
    let planted_salt = top.wrapping_add(7);
    let planted = dir.path().join("00000000000000000000.wal.free");
    let h = SegmentHeader {
        id: 0,
        first_lsn: 1,
        flags: 0,
        salt: Salt::Salted(planted_salt),
        // A v2 file: retired by earlier code, recycled as a v3 segment.
        chain: None,
    };
    let mut bytes = h.encode().to_vec();
    bytes.resize(SEGMENT_BYTES as usize, 0);
    std::fs::write(&planted, bytes).expect("write");
    let next_lsn = acked.last().expect("acked").0 + 1;
    // Where the next segment's first records will lie, LSNs from the seal's on (the
    // segment is filled with ghosts from its header on).
    plant_ghosts(&planted, SEGMENT_HEADER_BYTES, planted_salt, next_lsn);
    history.observe(dir.path(), "planted");
    let (log, _) = open(dir.path(), RecoveryMode::Strict).expect("reopen");
    let ino = inode(&planted);
    let mut appended = Vec::new();
    while log.stats().segments_recycled == 0 {
        let p = payload("n", appended.len() as u64, 300);
        appended.push((log.append(1, &p).expect("append").lsn, p));
        history.observe(dir.path(), "append");
    }
    let (id, path) = segment_files(dir.path()).pop().expect("segments");
    assert_eq!(inode(&path), ino, "segment {id} is the planted file");
    assert!(salt_after(planted_salt, salt_of(&read_header(&path))));
    drop(log);
    let (_, got) = open(dir.path(), RecoveryMode::Strict).expect("reopen");
    let mut want = acked.clone();
    want.extend(appended);
    assert_eq!(got, want);
    assert_no_ghost(&got, "after recycling the planted file");
}

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
