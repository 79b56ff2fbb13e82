//! The writer: appends records and shares fsyncs among concurrent appenders (group commit).
//!
//! Appenders reserve an LSN and a position under a short lock and queue their record.
//! One of them becomes the leader: it takes the whole queue, writes it with one `write`
//! per segment and one fdatasync, with the lock released, then wakes the others. Records
//! queued meanwhile form the next batch. In `SyncMode::Always` a batch is written only
//! after the previous one is durable, so at most one unsynced batch exists at a time.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};

use super::format::*;
use super::record::{self, RecordHeader};
use super::segment::{create_segment, preallocate};
use super::{RecordPos, SyncMode};
use crate::error::{Error, Result};

/// A record waiting for a leader to write it.
struct Pending {
    lsn: u64,
    pos: RecordPos,
    kind: u8,
    payload_crc: u32,
    payload: Vec<u8>,
}

/// State shared by all appenders, behind one short-held lock.
struct Shared {
    queue: Vec<Pending>,
    next_lsn: u64,
    /// Where the next record will go (planned at reservation time).
    tail: RecordPos,
    /// Every LSN below this one is written to the file (page cache).
    written_lsn: u64,
    /// Every LSN below this one is durable.
    durable_lsn: u64,
    leader_active: bool,
    /// First write/fsync failure; the handle accepts nothing after it.
    poisoned: Option<String>,
}

/// The file side, touched only by the current leader.
struct Io {
    dir: PathBuf,
    file: File,
    segment_id: u64,
    write_pos: u64,
    /// Bytes of the segment that are preallocated (the file's length).
    allocated_end: u64,
    /// Bytes of the segment known durable.
    synced_pos: u64,
    segment_bytes: u64,
    buf: Vec<u8>,
}

/// Counters for `stats()`.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub appends: AtomicU64,
    pub batches: AtomicU64,
    pub fsyncs: AtomicU64,
    pub bytes_written: AtomicU64,
    pub rotations: AtomicU64,
}

/// Where the writer starts after recovery.
pub(crate) struct WriterStart {
    pub dir: PathBuf,
    pub file: File,
    pub segment_id: u64,
    pub write_pos: u64,
    pub file_bytes: u64,
    pub next_lsn: u64,
    pub segment_bytes: u64,
}

/// The group-commit writer.
pub(crate) struct Writer {
    shared: Mutex<Shared>,
    wake: Condvar,
    io: Mutex<Io>,
    sync: SyncMode,
    segment_bytes: u64,
    pub counters: Counters,
    /// Id of the segment being written (segments below it are sealed).
    pub active_segment: AtomicU64,
}

impl Writer {
    pub fn new(start: WriterStart, sync: SyncMode) -> Self {
        let tail = RecordPos {
            segment_id: start.segment_id,
            offset: start.write_pos,
        };
        Writer {
            shared: Mutex::new(Shared {
                queue: Vec::new(),
                next_lsn: start.next_lsn,
                tail,
                written_lsn: start.next_lsn,
                durable_lsn: start.next_lsn,
                leader_active: false,
                poisoned: None,
            }),
            wake: Condvar::new(),
            io: Mutex::new(Io {
                dir: start.dir,
                file: start.file,
                segment_id: start.segment_id,
                write_pos: start.write_pos,
                allocated_end: start.file_bytes,
                synced_pos: start.write_pos,
                segment_bytes: start.segment_bytes,
                buf: Vec::new(),
            }),
            sync,
            segment_bytes: start.segment_bytes,
            counters: Counters::default(),
            active_segment: AtomicU64::new(start.segment_id),
        }
    }

    /// Largest payload one record may carry with this segment size.
    pub fn payload_bytes_max(&self) -> u64 {
        max_payload_bytes(self.segment_bytes)
    }

    /// Appends one record; returns once it is durable (`Always`) or written (otherwise).
    pub fn append(&self, kind: u8, payload: &[u8]) -> Result<(u64, RecordPos)> {
        let limit = self.payload_bytes_max();
        if payload.len() as u64 > limit {
            return Err(Error::RecordTooLarge {
                payload_bytes: payload.len() as u64,
                limit_bytes: limit,
            });
        }
        let payload_crc = record::payload_crc(payload);
        let payload = payload.to_vec();
        let mut shared = self.shared.lock();
        if let Some(cause) = &shared.poisoned {
            return Err(Error::Poisoned {
                cause: cause.clone(),
            });
        }
        let lsn = shared.next_lsn;
        let pos = reserve(&mut shared.tail, payload.len() as u64, self.segment_bytes);
        shared.next_lsn += 1;
        shared.queue.push(Pending {
            lsn,
            pos,
            kind,
            payload_crc,
            payload,
        });
        self.counters.appends.fetch_add(1, Ordering::Relaxed);
        let durable = matches!(self.sync, SyncMode::Always);
        self.drive(shared, lsn + 1, durable)?;
        Ok((lsn, pos))
    }

    /// Makes everything appended so far durable.
    pub fn flush(&self) -> Result<()> {
        let shared = self.shared.lock();
        let target = shared.next_lsn;
        self.drive(shared, target, true)
    }

    /// Waits until every LSN below `target` is written (and durable if `durable`),
    /// leading batches while no one else does.
    fn drive<'a>(
        &'a self,
        mut shared: parking_lot::MutexGuard<'a, Shared>,
        target: u64,
        durable: bool,
    ) -> Result<()> {
        loop {
            let reached = if durable {
                shared.durable_lsn
            } else {
                shared.written_lsn
            };
            if reached >= target {
                return Ok(());
            }
            if let Some(cause) = &shared.poisoned {
                return Err(Error::Poisoned {
                    cause: cause.clone(),
                });
            }
            if shared.leader_active {
                self.wake.wait(&mut shared);
                continue;
            }
            shared.leader_active = true;
            let batch = std::mem::take(&mut shared.queue);
            let sync = durable || matches!(self.sync, SyncMode::Always);
            drop(shared);
            let outcome = self.io.lock().write_batch(&batch, sync, self);
            shared = self.shared.lock();
            shared.leader_active = false;
            match outcome {
                Ok(durable_through) => {
                    if let Some(last) = batch.last() {
                        shared.written_lsn = last.lsn + 1;
                    }
                    if durable_through {
                        shared.durable_lsn = shared.written_lsn;
                    }
                }
                Err(e) => {
                    tracing_fsync_error(&e);
                    shared.poisoned = Some(e.to_string());
                    self.wake.notify_all();
                    return Err(e);
                }
            }
            self.wake.notify_all();
        }
    }
}

fn tracing_fsync_error(e: &Error) {
    tracing::error!(error = %e, "write or fsync failed; the log handle is poisoned");
}

/// Largest payload a record may carry in a segment of `segment_bytes`.
pub(crate) fn max_payload_bytes(segment_bytes: u64) -> u64 {
    segment_bytes - (SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES + SEAL_RECORD_BYTES) as u64
}

/// Plans where a record of `payload_bytes` goes, moving `tail` past it. A record that
/// would leave no room for the seal goes to the start of the next segment.
fn reserve(tail: &mut RecordPos, payload_bytes: u64, segment_bytes: u64) -> RecordPos {
    let record_bytes = RECORD_HEADER_BYTES as u64 + payload_bytes;
    if tail.offset + record_bytes + SEAL_RECORD_BYTES as u64 > segment_bytes {
        *tail = RecordPos {
            segment_id: tail.segment_id + 1,
            offset: SEGMENT_HEADER_BYTES as u64,
        };
    }
    let pos = *tail;
    tail.offset += record_bytes;
    pos
}

impl Io {
    /// Writes `batch` (consecutive LSNs, positions planned by `reserve`); syncs if asked.
    /// Returns whether everything written so far is durable.
    fn write_batch(&mut self, batch: &[Pending], sync: bool, w: &Writer) -> Result<bool> {
        let mut rest = batch;
        while let Some(first) = rest.first() {
            if first.pos.segment_id != self.segment_id {
                self.rotate(first.pos.segment_id, first.lsn, w)?;
            }
            let run = rest
                .iter()
                .take_while(|p| p.pos.segment_id == self.segment_id)
                .count();
            self.write_run(&rest[..run], w)?;
            rest = &rest[run..];
            if sync || !rest.is_empty() {
                // Invariant (Always mode): at most one unsynced batch exists.
                self.sync(w)?;
            }
        }
        if sync && self.synced_pos < self.write_pos {
            self.sync(w)?;
        }
        Ok(self.synced_pos == self.write_pos)
    }

    /// Writes records of one segment as one batch with one `write`.
    fn write_run(&mut self, run: &[Pending], w: &Writer) -> Result<()> {
        self.buf.clear();
        let durable_before = self.synced_pos == self.write_pos;
        for (i, p) in run.iter().enumerate() {
            // Invariant: the leader writes exactly where reservation planned.
            assert_eq!(
                p.pos.offset,
                self.write_pos + self.buf.len() as u64,
                "planned position drifted"
            );
            let mut flags = 0;
            if i == 0 {
                flags |= FLAG_BATCH_START;
                if durable_before {
                    flags |= FLAG_DURABLE_BEFORE;
                }
            }
            if i + 1 == run.len() {
                flags |= FLAG_BATCH_END;
            }
            let header = RecordHeader {
                payload_len: p.payload.len() as u32,
                lsn: p.lsn,
                kind: p.kind,
                flags,
            };
            record::encode_into(&mut self.buf, &header, p.payload_crc, &p.payload);
        }
        self.write_buf(w)?;
        w.counters.batches.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn write_buf(&mut self, w: &Writer) -> Result<()> {
        let end = self.write_pos + self.buf.len() as u64;
        assert!(end <= self.segment_bytes, "write past the segment's end");
        if end > self.allocated_end {
            let grow_to = (self.allocated_end + PREALLOCATE_BYTES)
                .max(end)
                .min(self.segment_bytes);
            preallocate(&self.file, self.allocated_end, grow_to - self.allocated_end)
                .map_err(|e| self.err("preallocating", e))?;
            self.allocated_end = grow_to;
        }
        self.file
            .write_all_at(&self.buf, self.write_pos)
            .map_err(|e| self.err("writing", e))?;
        self.write_pos = end;
        w.counters
            .bytes_written
            .fetch_add(self.buf.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn sync(&mut self, w: &Writer) -> Result<()> {
        self.file.sync_data().map_err(|e| self.err("fsyncing", e))?;
        w.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.synced_pos = self.write_pos;
        Ok(())
    }

    /// Seals the current segment (seal record + fsync), then creates `next_id`.
    fn rotate(&mut self, next_id: u64, next_lsn: u64, w: &Writer) -> Result<()> {
        assert_eq!(
            next_id,
            self.segment_id + 1,
            "segments are created in order"
        );
        self.buf.clear();
        let mut flags = FLAG_BATCH_START | FLAG_BATCH_END;
        if self.synced_pos == self.write_pos {
            flags |= FLAG_DURABLE_BEFORE;
        }
        let header = RecordHeader {
            payload_len: SEAL_PAYLOAD_BYTES as u32,
            lsn: next_lsn,
            kind: KIND_SEAL,
            flags,
        };
        let payload = next_id.to_le_bytes();
        record::encode_into(
            &mut self.buf,
            &header,
            record::payload_crc(&payload),
            &payload,
        );
        self.write_buf(w)?;
        self.sync(w)?;
        let prealloc = PREALLOCATE_BYTES.min(self.segment_bytes) - SEGMENT_HEADER_BYTES as u64;
        self.file = create_segment(&self.dir, next_id, next_lsn, prealloc)?;
        self.segment_id = next_id;
        self.write_pos = SEGMENT_HEADER_BYTES as u64;
        self.synced_pos = self.write_pos;
        self.allocated_end = SEGMENT_HEADER_BYTES as u64 + prealloc;
        w.active_segment.store(next_id, Ordering::Release);
        w.counters.rotations.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            segment = next_id,
            first_lsn = next_lsn,
            "rotated to a new segment"
        );
        Ok(())
    }

    fn err(&self, what: &str, e: std::io::Error) -> Error {
        Error::io(
            format!(
                "{what} segment {}",
                super::segment::segment_path(&self.dir, self.segment_id).display()
            ),
            e,
        )
    }
}
