//! One-segment logs written sequentially and by concurrent appenders, and their layout
//! (where each batch and record lies).

use std::path::Path;
use std::sync::Mutex;

use agentwal::log::SegmentHeader;
use agentwal::log::record::{self, DecodeError, Salt};
use agentwal::log::{FLAG_BATCH_END, FLAG_BATCH_START, FLAG_DURABLE_BEFORE, segment_file_name};
use agentwal::log::{Log, LogOptions, SyncMode};

use crate::helpers::{HEADER, Rec, kind, payload, scratch, sweep_options};

/// A log held in one segment, as its writer left it.
pub(crate) struct OneSegment {
    pub(crate) what: &'static str,
    /// The options it was written with.
    pub(crate) opts: LogOptions,
    pub(crate) records: Vec<Rec>,
    /// The whole segment file (header, records, preallocated zeros).
    pub(crate) bytes: Vec<u8>,
    /// End offset of each batch, in order.
    pub(crate) batch_ends: Vec<u64>,
    pub(crate) data_end: u64,
}

/// One batch as found on disk.
pub(crate) struct Batch {
    pub(crate) records: usize,
    pub(crate) end: u64,
    pub(crate) durable_before: bool,
}

/// Reads the batch layout of a segment back and checks it against what was appended:
/// same LSNs, offsets, kinds and payloads, consecutive, no gaps, then unwritten space.
/// The salt of the segment whose bytes start at `bytes[0]`.
pub(crate) fn salt(bytes: &[u8]) -> Salt {
    SegmentHeader::decode(bytes, Path::new("segment"))
        .expect("segment header")
        .salt
}

fn layout(bytes: &[u8], records: &[Rec]) -> Vec<Batch> {
    let mut batches = Vec::new();
    let mut pos = HEADER;
    let mut in_batch = 0;
    let mut durable_before = false;
    for rec in records {
        assert_eq!(rec.offset, pos, "records are not back to back");
        let (h, p) =
            record::decode(&bytes[pos as usize..], salt(bytes)).expect("written record decodes");
        assert_eq!((h.lsn, h.kind, p), (rec.lsn, rec.kind, &rec.payload[..]));
        if in_batch == 0 {
            assert_ne!(h.flags & FLAG_BATCH_START, 0, "batch start flag");
            durable_before = h.flags & FLAG_DURABLE_BEFORE != 0;
        }
        in_batch += 1;
        pos = rec.end();
        if h.flags & FLAG_BATCH_END != 0 {
            batches.push(Batch {
                records: in_batch,
                end: pos,
                durable_before,
            });
            in_batch = 0;
        }
    }
    assert_eq!(in_batch, 0, "the last batch is complete");
    assert_eq!(
        record::decode(&bytes[pos as usize..], salt(bytes)).unwrap_err(),
        DecodeError::Unwritten,
        "nothing follows the last record"
    );
    batches
}

fn one_segment(what: &'static str, opts: LogOptions, dir: &Path, records: Vec<Rec>) -> OneSegment {
    let files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".wal"))
        .collect();
    assert_eq!(files.len(), 1, "{what}: expected one segment");
    let bytes = std::fs::read(dir.join(segment_file_name(1))).expect("read segment");
    assert!(records.iter().all(|r| r.segment_id == 1));
    let batches = layout(&bytes, &records);
    OneSegment {
        what,
        opts,
        data_end: records.last().map_or(HEADER, Rec::end),
        batch_ends: batches.iter().map(|b| b.end).collect(),
        records,
        bytes,
    }
}

/// `n` sequential appends. Every append is a batch of its own; `flush_every` flushes
/// after that many appends (for `SyncMode::Never`, whose batches carry
/// `FLAG_DURABLE_BEFORE` only right after a flush).
pub(crate) fn build_sequential(
    what: &'static str,
    opts: LogOptions,
    n: u64,
    flush_every: Option<u64>,
) -> OneSegment {
    let dir = scratch();
    let log = Log::open(dir.path(), opts).expect("open");
    let mut records = Vec::new();
    for i in 0..n {
        let p = payload(i);
        let a = log.append(kind(i), &p).expect("append");
        records.push(Rec {
            lsn: a.lsn,
            segment_id: a.pos.segment_id,
            offset: a.pos.offset,
            kind: kind(i),
            payload: p,
        });
        if flush_every.is_some_and(|k| (i + 1).is_multiple_of(k)) {
            log.flush().expect("flush");
        }
    }
    log.flush().expect("flush");
    drop(log);
    let built = one_segment(what, opts, dir.path(), records);
    let batches = layout(&built.bytes, &built.records);
    assert!(
        batches.iter().all(|b| b.records == 1),
        "{what}: one record per batch"
    );
    for (i, b) in batches.iter().enumerate() {
        let durable_before = flush_every.is_none_or(|k| (i as u64).is_multiple_of(k));
        assert_eq!(b.durable_before, durable_before, "{what}: batch {i}");
    }
    built
}

/// Appends from 8 threads under `SyncMode::Always`, so records queued during a leader's
/// fsync share a batch. Built on the real temporary directory (a real fsync takes long
/// enough for batches to form) and retried until some batch holds several records.
pub(crate) fn build_concurrent() -> OneSegment {
    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 6;
    for _attempt in 0..10 {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path(), sweep_options(SyncMode::Always)).expect("open");
        let records = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (log, records) = (&log, &records);
                s.spawn(move || {
                    for i in 0..PER_THREAD {
                        let p = payload(t * PER_THREAD + i);
                        let k = kind(t);
                        let a = log.append(k, &p).expect("append");
                        records.lock().unwrap().push(Rec {
                            lsn: a.lsn,
                            segment_id: a.pos.segment_id,
                            offset: a.pos.offset,
                            kind: k,
                            payload: p,
                        });
                    }
                });
            }
        });
        drop(log);
        let mut records = records.into_inner().unwrap();
        records.sort_by_key(|r| r.lsn);
        let built = one_segment(
            "concurrent batches",
            sweep_options(SyncMode::Always),
            dir.path(),
            records,
        );
        let batches = layout(&built.bytes, &built.records);
        assert!(batches.iter().all(|b| b.durable_before));
        if batches.iter().any(|b| b.records > 1) {
            return built;
        }
    }
    panic!("no batch of several records formed in 10 attempts");
}
