//! Salt uniqueness: every segment file a distinct salt, a recycled file a higher one,
//! also across reopens.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::common::segments::{free_files, read_header, segment_files};
use agentwal::RecoveryMode;
use agentwal::log::record::Salt;
use agentwal::log::{Log, SEGMENT_HEADER_BYTES, SegmentHeader};

use crate::foreign_images::{KeepLive, salt_after};
use crate::helpers::{SEGMENT_BYTES, inode, open, options, payload, salt_of};
use crate::recycled::{Recycled, assert_no_ghost, plant_ghosts, recycled_log};

// ---------------------------------------------------------------------------------------
// c. Salt uniqueness

/// Every file's salt, by inode: each observation appends a file's salt when it changed.
#[derive(Default)]
pub(crate) struct SaltHistory {
    pub(crate) by_inode: BTreeMap<u64, Vec<u32>>,
    /// Which inode each salt was seen on.
    pub(crate) owner: HashMap<u32, u64>,
}

impl SaltHistory {
    /// Looks at every segment and retired file of `dir`: their salts are distinct, no
    /// salt ever seen on one file shows up on another, and a file's salt only moves on.
    pub(crate) fn observe(&mut self, dir: &Path, ctx: &str) {
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

    pub(crate) fn lives(&self) -> usize {
        self.by_inode.values().map(Vec::len).sum()
    }

    pub(crate) fn reused_files(&self) -> usize {
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
