//! Shared fixtures: options, payloads, opening a log, salts, data ends, reading and
//! writing raw bytes, record images and their re-salted copies.

use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use crate::common::segments::walk;
use agentwal::log::record::{self, RecordHeader, Salt};
use agentwal::log::{
    Appended, FLAG_BATCH_END, FLAG_BATCH_START, FLAG_DURABLE_BEFORE, Log, LogOptions,
    RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, SegmentHeader, segment_path,
};
use agentwal::{RecoveryMode, SyncMode};

pub(crate) const SEGMENT_BYTES: u64 = 4096;

pub(crate) fn options(recovery: RecoveryMode) -> LogOptions {
    LogOptions {
        sync: SyncMode::Always,
        segment_bytes: SEGMENT_BYTES,
        recovery,
    }
}

/// Payload `i` of a run tagged `tag`: `len` bytes, different for every (tag, i).
pub(crate) fn payload(tag: &str, i: u64, len: usize) -> Vec<u8> {
    let unit = format!("{tag}-{i:06}|");
    unit.bytes().cycle().take(len).collect()
}

/// (lsn, payload) of the records a log holds, in order.
pub(crate) type Records = Vec<(u64, Vec<u8>)>;

/// Opens the log in `dir` for writing, collecting the records recovery delivers.
pub(crate) fn open(dir: &Path, mode: RecoveryMode) -> agentwal::Result<(Log, Records)> {
    let mut got = Vec::new();
    let log = Log::open_with(dir, options(mode), |r| {
        got.push((r.lsn, r.payload.to_vec()));
        Ok(())
    })?;
    Ok((log, got))
}

pub(crate) fn salt_of(header: &SegmentHeader) -> u32 {
    match header.salt {
        Salt::Salted(salt) => salt,
        Salt::Unsalted => panic!("segment {} is format v1", header.id),
    }
}

/// End of the last record `walk` finds.
pub(crate) fn data_end(path: &Path) -> usize {
    walk(path)
        .last()
        .map_or(SEGMENT_HEADER_BYTES, |(at, h, _)| {
            at + h.record_bytes() as usize
        })
}

pub(crate) fn inode(path: &Path) -> u64 {
    std::fs::metadata(path).expect("metadata").ino()
}

/// Bytes `[at, at + len)` of file `path`.
pub(crate) fn read_range(path: &Path, at: usize, len: usize) -> Vec<u8> {
    std::fs::read(path).expect("read")[at..at + len].to_vec()
}

pub(crate) fn write_at(path: &Path, at: usize, bytes: &[u8]) {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open for writing");
    file.write_all_at(bytes, at as u64).expect("write");
}

/// The image of the record `appended` describes, exactly as it lies in its segment.
pub(crate) fn image_of(dir: &Path, appended: &Appended) -> Vec<u8> {
    let path = segment_path(dir, appended.pos.segment_id);
    read_range(&path, appended.pos.offset as usize, appended.bytes as usize)
}

/// A single-record batch written after everything before it was durable, encoded under
/// `salt`.
pub(crate) fn encode(salt: Salt, lsn: u64, payload: &[u8]) -> Vec<u8> {
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
pub(crate) fn resalted(image: &[u8], salt: Salt) -> Vec<u8> {
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
