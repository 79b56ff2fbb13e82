//! A store directory's files as the tests look at them from outside: its segment and
//! retired files, their headers and the records that validate in them, and copies of it.

use std::path::{Path, PathBuf};

use agentwal::log::record::{self, RecordHeader, Salt};
use agentwal::log::{
    KIND_SEAL, SEGMENT_HEADER_BYTES, SegmentHeader, parse_free_file_name, parse_segment_file_name,
};
use tempfile::TempDir;

/// The files of `dir` whose names `parse` accepts, with what it made of each name,
/// sorted.
fn files_named<T: Ord>(dir: &Path, parse: impl Fn(&str) -> Option<T>) -> Vec<(T, PathBuf)> {
    let mut out: Vec<(T, PathBuf)> = std::fs::read_dir(dir)
        .expect("read store dir")
        .filter_map(|e| {
            let e = e.ok()?;
            Some((parse(&e.file_name().to_string_lossy())?, e.path()))
        })
        .collect();
    out.sort();
    out
}

/// The segment files (`.wal`) of store directory `dir`, by id.
pub fn segment_files(dir: &Path) -> Vec<(u64, PathBuf)> {
    files_named(dir, parse_segment_file_name)
}

/// The retired files (`.wal.free`) of store directory `dir`, by the id they had.
pub fn free_files(dir: &Path) -> Vec<PathBuf> {
    let free = files_named(dir, parse_free_file_name);
    free.into_iter().map(|(_, path)| path).collect()
}

/// The decoded header of the segment (or retired) file at `path`.
pub fn read_header(path: &Path) -> SegmentHeader {
    let bytes = std::fs::read(path).expect("read segment");
    SegmentHeader::decode(&bytes, path).expect("segment header")
}

/// The records of segment file `path` that validate under `salt`, up to the first
/// position that does not (seals and close records included, a seal last):
/// (offset, header, payload).
pub fn walk_salted(path: &Path, salt: Salt) -> Vec<(usize, RecordHeader, Vec<u8>)> {
    let buf = std::fs::read(path).expect("read segment");
    let mut at =
        SegmentHeader::decode(&buf, path).map_or(SEGMENT_HEADER_BYTES, |h| h.data_start() as usize);
    let mut out = Vec::new();
    while let Ok((h, p)) = record::decode(&buf[at..], salt) {
        out.push((at, h, p.to_vec()));
        at += h.record_bytes() as usize;
        if h.kind == KIND_SEAL {
            break;
        }
    }
    out
}

/// [`walk_salted`] under the salt the segment's own header gives.
pub fn walk(path: &Path) -> Vec<(usize, RecordHeader, Vec<u8>)> {
    walk_salted(path, read_header(path).salt)
}

/// A copy of the files of directory `dir` (taken while a writer has a store open, it is
/// what a crash at that moment leaves of a `SyncMode::Always` log: every acknowledged
/// byte, and no close record).
pub fn copy_dir(dir: &Path) -> TempDir {
    let copy = tempfile::tempdir().expect("tempdir");
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), copy.path().join(entry.file_name())).expect("copy");
    }
    copy
}
