//! The writer: appends records and shares fsyncs among concurrent appenders (group commit).
//!
//! Appenders reserve an LSN and a position under a short lock and copy their payload into
//! the queue's byte buffer (room for the header is left in front of it). One of them
//! becomes the leader: it takes the whole queue, fills in the headers, writes it with one
//! `write` per segment and one fdatasync, with the lock released, then wakes the others.
//! Records queued meanwhile form the next batch. In `SyncMode::Always` a batch is written
//! only after the previous one is durable, so at most one unsynced batch exists at a time.
//!
//! Wake-ups: waiters sleep on one of two condition variables, chosen by the parity of the
//! batch that will satisfy them (the one in flight, or the next). A finishing leader wakes
//! one waiter of the next batch first, to lead it, then every waiter of its own batch, so
//! no thread wakes up only to find its record still pending.
//!
//! Preallocated space is written with zeros ahead of the data while batches are small. On
//! ext4 and XFS, space reserved by `fallocate` is an *unwritten* extent: the first write to
//! each block turns it into a written one, a metadata change every fdatasync would have to
//! write (one more device round trip per batch). Zeroing ahead, in large writes, makes that
//! change once per [`ZERO_AHEAD_MIN_BYTES`] instead of once per batch. When batches are
//! large, that round trip costs less than writing every byte twice, and the writer stops
//! zeroing (see [`super::zeroing`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::format::*;
use super::record::{self, RecordHeader};
use super::segment::{create_segment, preallocate};
use super::zeroing::ZeroingPolicy;
use super::{RecordPos, SyncMode};
use crate::error::{Error, Result};
use crate::storage::{Storage, StorageFile};

/// The writer zeroes preallocated space once fewer than this many zeroed bytes remain
/// ahead of the data...
const ZERO_AHEAD_MIN_BYTES: u64 = 512 << 10;
/// ...up to this many bytes past the data.
const ZERO_AHEAD_MAX_BYTES: u64 = 1 << 20;
/// Zeros written per `pwrite` when zeroing ahead.
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
/// Payloads at least this large have their CRC computed by the appender, outside the lock,
/// and combined with the header's by the leader (a fixed ~0.4 µs). Smaller ones are
/// checksummed by the leader in one pass over header and payload, which costs less than
/// the combine (about 70 ns for 2 KiB) and keeps the leader's serial work short.
const APPENDER_CRC_MIN_BYTES: usize = 16 << 10;
/// A batch's buffers are shrunk back to this many bytes after use (one huge batch should
/// not pin its memory for the life of the log).
const SPARE_BYTES_MAX: usize = 4 << 20;

/// A record waiting for a leader to write it. Its bytes are in [`Batch::bytes`].
struct Pending {
    lsn: u64,
    pos: RecordPos,
    kind: u8,
    /// The payload's CRC when the appender computed it (large payloads only).
    payload_crc: Option<u32>,
    payload_len: u32,
}

impl Pending {
    fn record_bytes(&self) -> usize {
        RECORD_HEADER_BYTES + self.payload_len as usize
    }
}

/// Queued records, and their encoded bytes back to back in LSN order: each record is a
/// header (zeros until the leader fills it in) followed by its payload.
#[derive(Default)]
struct Batch {
    records: Vec<Pending>,
    bytes: Vec<u8>,
}

impl Batch {
    fn push(&mut self, pending: Pending, payload: &[u8]) {
        self.bytes.extend_from_slice(&[0u8; RECORD_HEADER_BYTES]);
        self.bytes.extend_from_slice(payload);
        self.records.push(pending);
    }

    /// Empties the batch for reuse, keeping (bounded) capacity.
    fn clear(&mut self) {
        self.records.clear();
        self.records
            .shrink_to(SPARE_BYTES_MAX / std::mem::size_of::<Pending>());
        self.bytes.clear();
        self.bytes.shrink_to(SPARE_BYTES_MAX);
    }
}

/// State shared by all appenders, behind one short-held lock.
struct Shared {
    queue: Batch,
    /// An empty batch with capacity, swapped in for the queue a leader takes.
    spare: Batch,
    next_lsn: u64,
    /// Where the next record will go (planned at reservation time).
    tail: RecordPos,
    /// Every LSN below this one is written to the file (page cache).
    written_lsn: u64,
    /// Every LSN below this one is durable.
    durable_lsn: u64,
    leader_active: bool,
    /// Batches taken so far; while `leader_active`, the one in flight is number `taken`.
    taken: u64,
    /// The batch in flight holds every LSN below this one not written before it.
    in_flight_end: u64,
    /// Whether the batch in flight ends with an fdatasync.
    in_flight_sync: bool,
    /// First write/fsync failure; the handle accepts nothing after it.
    poisoned: Option<String>,
}

/// The file side, touched only by the current leader.
struct Io {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    /// The segment being appended to; `None` while segment `segment_id` is sealed and
    /// its successor is not created yet (a log reopened after its final segment was
    /// sealed: the successor is created at the first append, so an open needs no space).
    file: Option<Box<dyn StorageFile>>,
    segment_id: u64,
    /// While `file` is `None`: the LSN the seal of `segment_id` hands on.
    sealed_next_lsn: u64,
    write_pos: u64,
    /// Bytes of the segment that are preallocated (the file's length).
    allocated_end: u64,
    /// Bytes of the segment written at least once (data or zeros): no unwritten extents.
    zeroed_end: u64,
    /// Bytes of the segment known durable.
    synced_pos: u64,
    /// Whether to zero ahead, from the bytes recent fdatasyncs covered.
    zeroing: ZeroingPolicy,
    segment_bytes: u64,
    /// Where the current segment ends: `segment_bytes`, or more for a segment reopened
    /// after it was written with a larger `segment_bytes` (it is sealed at the next append).
    segment_end: u64,
    /// For seal records.
    buf: Vec<u8>,
}

/// Counters for `stats()`.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub appends: AtomicU64,
    pub batches: AtomicU64,
    pub fsyncs: AtomicU64,
    pub bytes_written: AtomicU64,
    pub zero_bytes_written: AtomicU64,
    pub rotations: AtomicU64,
}

/// Where the writer starts after recovery.
pub(crate) struct WriterStart {
    pub storage: Arc<dyn Storage>,
    pub dir: PathBuf,
    /// `None`: segment `segment_id` is sealed (and durable); the first append creates
    /// `segment_id + 1` with first LSN `next_lsn`.
    pub file: Option<Box<dyn StorageFile>>,
    pub segment_id: u64,
    pub write_pos: u64,
    pub file_bytes: u64,
    /// Bytes of the segment known written (data or zeros) at open: no unwritten extents
    /// below, so no need to zero them again.
    pub zeroed_end: u64,
    pub next_lsn: u64,
    pub segment_bytes: u64,
}

/// The group-commit writer.
pub(crate) struct Writer {
    shared: Mutex<Shared>,
    /// Waiters for batch number `n` sleep on `wake[n % 2]`.
    wake: [Condvar; 2],
    io: Mutex<Io>,
    sync: SyncMode,
    segment_bytes: u64,
    pub counters: Counters,
    /// Id of the segment being written (segments below it are sealed).
    pub active_segment: AtomicU64,
}

impl Writer {
    pub fn new(start: WriterStart, sync: SyncMode) -> Self {
        let sealed = start.file.is_none();
        let tail = RecordPos {
            segment_id: start.segment_id,
            // A sealed segment takes no more records: the first one goes to the next.
            offset: match sealed {
                true => start.segment_bytes,
                false => start.write_pos,
            },
        };
        Writer {
            shared: Mutex::new(Shared {
                queue: Batch::default(),
                spare: Batch::default(),
                next_lsn: start.next_lsn,
                tail,
                written_lsn: start.next_lsn,
                durable_lsn: start.next_lsn,
                leader_active: false,
                taken: 0,
                in_flight_end: start.next_lsn,
                in_flight_sync: false,
                poisoned: None,
            }),
            wake: [Condvar::new(), Condvar::new()],
            io: Mutex::new(Io {
                storage: start.storage,
                dir: start.dir,
                file: start.file,
                segment_id: start.segment_id,
                sealed_next_lsn: start.next_lsn,
                write_pos: start.write_pos,
                allocated_end: start.file_bytes,
                zeroed_end: start.zeroed_end.min(start.file_bytes).max(start.write_pos),
                synced_pos: start.write_pos,
                zeroing: ZeroingPolicy::default(),
                segment_bytes: start.segment_bytes,
                segment_end: start
                    .segment_bytes
                    .max(start.write_pos + SEAL_RECORD_BYTES as u64),
                buf: Vec::new(),
            }),
            sync,
            segment_bytes: start.segment_bytes,
            counters: Counters::default(),
            // Everything up to a sealed segment is sealed: compaction may take it.
            active_segment: AtomicU64::new(start.segment_id + u64::from(sealed)),
        }
    }

    /// The segment the first append will create, and its first LSN, while it does not
    /// exist yet (the log was reopened with its final segment sealed).
    pub fn uncreated_segment(&self) -> Option<(u64, u64)> {
        let io = self.io.lock();
        io.file
            .is_none()
            .then_some((io.segment_id + 1, io.sealed_next_lsn))
    }

    /// Zeroes the space ahead of the tail, unless a previous writer did, and makes it
    /// durable, so that the first batches after an open do not carry the zeros (and the
    /// extent conversion) in their fsync.
    pub fn prepare(&self) -> Result<()> {
        let mut io = self.io.lock();
        // Only within the space the segment holds already: an open must not need free
        // space (a full disk is recovered by opening and compacting). Appends zero the
        // rest when they get there.
        let allocated = io.allocated_end;
        // Nothing to sync otherwise: the open fdatasynced the segment before it trusted
        // the recovered bytes (`writer_start`), and a torn-tail repair synced its zeros.
        if io.zero_ahead_within(allocated, self)? > 0 {
            io.sync(self)?;
        }
        Ok(())
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
        let payload_crc =
            (payload.len() >= APPENDER_CRC_MIN_BYTES).then(|| record::payload_crc(payload));
        let mut shared = self.shared.lock();
        if let Some(cause) = &shared.poisoned {
            return Err(Error::Poisoned {
                cause: cause.clone(),
            });
        }
        let lsn = shared.next_lsn;
        let pos = reserve(&mut shared.tail, payload.len() as u64, self.segment_bytes);
        shared.next_lsn += 1;
        shared.queue.push(
            Pending {
                lsn,
                pos,
                kind,
                payload_crc,
                // Fits: payloads are at most SEGMENT_BYTES_MAX (2^31) bytes.
                payload_len: payload.len() as u32,
            },
            payload,
        );
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
        mut shared: MutexGuard<'a, Shared>,
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
                // Everything queued now goes into the next batch; the one in flight
                // suffices if it holds `target - 1` and syncs when durability is wanted.
                let in_flight_suffices =
                    target <= shared.in_flight_end && (!durable || shared.in_flight_sync);
                let batch_no = shared.taken + u64::from(!in_flight_suffices);
                self.wake[parity(batch_no)].wait(&mut shared);
                continue;
            }
            shared.leader_active = true;
            shared.taken += 1;
            let batch_no = shared.taken;
            let sync = durable || matches!(self.sync, SyncMode::Always);
            shared.in_flight_end = shared.next_lsn;
            shared.in_flight_sync = sync;
            let spare = std::mem::take(&mut shared.spare);
            let mut batch = std::mem::replace(&mut shared.queue, spare);
            drop(shared);
            let outcome = self.io.lock().write_batch(&mut batch, sync, self);
            shared = self.shared.lock();
            shared.leader_active = false;
            match outcome {
                Ok(durable_through) => {
                    if let Some(last) = batch.records.last() {
                        shared.written_lsn = last.lsn + 1;
                    }
                    if durable_through {
                        shared.durable_lsn = shared.written_lsn;
                    }
                    batch.clear();
                    shared.spare = batch;
                }
                Err(e) => {
                    tracing_fsync_error(&e);
                    shared.poisoned = Some(e.to_string());
                    for cv in &self.wake {
                        cv.notify_all();
                    }
                    return Err(e);
                }
            }
            // First the next leader, so the disk gets the next batch without delay; then
            // the waiters this batch satisfied.
            let next = &self.wake[parity(batch_no + 1)];
            if matches!(self.sync, SyncMode::Always) {
                // Every batch syncs, so no waiter of the next batch is satisfied by this
                // one: the thread woken leads, or finds a leader that will wake it.
                next.notify_one();
            } else {
                // A waiter of the next batch may be satisfied by this one (a flush whose
                // records this unsynced batch made durable by rotating) and leave without
                // leading; wake them all so that someone takes the queue.
                next.notify_all();
            }
            self.wake[parity(batch_no)].notify_all();
        }
    }
}

fn parity(batch_no: u64) -> usize {
    (batch_no % 2) as usize
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

/// Writes the encoded header of a record into `record` (its header bytes, then its
/// payload), exactly as [`record::encode_into`] lays it out. Without the payload's CRC at
/// hand, the checksum is computed over the record's bytes as they lie.
fn put_header(record: &mut [u8], header: &RecordHeader, payload_crc: Option<u32>) {
    debug_assert_eq!(record.len() as u64, header.record_bytes());
    record[REC_LEN_OFFSET..][..4].copy_from_slice(&header.payload_len.to_le_bytes());
    record[REC_LSN_OFFSET..][..8].copy_from_slice(&header.lsn.to_le_bytes());
    record[REC_KIND_OFFSET] = header.kind;
    record[REC_FLAGS_OFFSET] = header.flags;
    record[REC_RESERVED_OFFSET..RECORD_HEADER_BYTES].fill(0);
    let crc = match payload_crc {
        Some(payload_crc) => header.checksum(payload_crc, u64::from(header.payload_len)),
        // The checksum covers the header after its CRC field, then the payload: here
        // contiguous.
        None => mask_crc(crc32fast::hash(&record[REC_LEN_OFFSET..])),
    };
    record[REC_CRC_OFFSET..][..4].copy_from_slice(&crc.to_le_bytes());
}

impl Io {
    /// Writes `batch` (consecutive LSNs, positions planned by `reserve`); syncs if asked.
    /// Returns whether everything written so far is durable.
    fn write_batch(&mut self, batch: &mut Batch, sync: bool, w: &Writer) -> Result<bool> {
        let mut rest = &batch.records[..];
        let mut bytes = &mut batch.bytes[..];
        while let Some(first) = rest.first() {
            if first.pos.segment_id != self.segment_id {
                self.rotate(first.pos.segment_id, first.lsn, w)?;
            }
            let run = rest
                .iter()
                .take_while(|p| p.pos.segment_id == self.segment_id)
                .count();
            let run_bytes = rest[..run].iter().map(Pending::record_bytes).sum();
            let (these, others) = std::mem::take(&mut bytes).split_at_mut(run_bytes);
            self.write_run(&rest[..run], these, w)?;
            rest = &rest[run..];
            bytes = others;
            if sync || !rest.is_empty() {
                // Invariant (Always mode): at most one unsynced batch exists.
                self.sync_batch(w)?;
            }
        }
        if sync && self.synced_pos < self.write_pos {
            self.sync_batch(w)?;
        }
        Ok(self.synced_pos == self.write_pos)
    }

    /// Writes records of one segment (`bytes`: their encoded bytes, headers still to be
    /// filled in) as one batch with one `write`.
    fn write_run(&mut self, run: &[Pending], bytes: &mut [u8], w: &Writer) -> Result<()> {
        let durable_before = self.synced_pos == self.write_pos;
        let mut at = 0usize;
        for (i, p) in run.iter().enumerate() {
            // Invariant: the leader writes exactly where reservation planned.
            assert_eq!(
                p.pos.offset,
                self.write_pos + at as u64,
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
                payload_len: p.payload_len,
                lsn: p.lsn,
                kind: p.kind,
                flags,
            };
            let end = at + p.record_bytes();
            put_header(&mut bytes[at..end], &header, p.payload_crc);
            at = end;
        }
        debug_assert_eq!(at, bytes.len(), "run bytes match its records");
        self.write_at_end(bytes, true, w)?;
        w.counters.batches.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Writes `bytes` at `write_pos`, then zeroes ahead if asked and it is time to.
    fn write_at_end(&mut self, bytes: &[u8], zero_ahead: bool, w: &Writer) -> Result<()> {
        let end = self.write_pos + bytes.len() as u64;
        assert!(end <= self.segment_end, "write past the segment's end");
        self.allocate_through(end)?;
        self.file()?
            .write_all_at(bytes, self.write_pos)
            .map_err(|e| self.err("writing", e))?;
        self.write_pos = end;
        self.zeroed_end = self.zeroed_end.max(end);
        w.counters
            .bytes_written
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        if zero_ahead {
            self.zero_ahead(w)?;
        }
        Ok(())
    }

    /// Makes sure the file is preallocated through `end` (a multiple of
    /// `PREALLOCATE_BYTES` past the current length, within the segment).
    fn allocate_through(&mut self, end: u64) -> Result<()> {
        if end <= self.allocated_end {
            return Ok(());
        }
        let grow_to = (self.allocated_end + PREALLOCATE_BYTES)
            .max(end)
            .min(self.segment_end);
        preallocate(
            self.file()?,
            self.allocated_end,
            grow_to - self.allocated_end,
        )
        .map_err(|e| self.err("preallocating", e))?;
        self.allocated_end = grow_to;
        Ok(())
    }

    /// Writes zeros past the data when fewer than `ZERO_AHEAD_MIN_BYTES` are zeroed, so
    /// later batches land on written (not unwritten) extents, unless the policy says batches
    /// are large enough not to bother. The zeros go only past `write_pos` and within the
    /// segment; the next fdatasync makes them durable. Returns the bytes of zeros written.
    fn zero_ahead(&mut self, w: &Writer) -> Result<u64> {
        self.zero_ahead_within(self.segment_end, w)
    }

    /// [`zero_ahead`](Self::zero_ahead), but not past `limit`.
    fn zero_ahead_within(&mut self, limit: u64, w: &Writer) -> Result<u64> {
        // Sealed, successor not created yet: nothing to write ahead of.
        if !self.zeroing.zero_ahead() || self.file.is_none() {
            return Ok(0);
        }
        let from = self.zeroed_end.max(self.write_pos);
        let to = (self.write_pos + ZERO_AHEAD_MAX_BYTES)
            .min(self.segment_end)
            .min(limit);
        if from >= to || from >= self.write_pos + ZERO_AHEAD_MIN_BYTES {
            return Ok(0);
        }
        self.allocate_through(to)?;
        let mut at = from;
        while at < to {
            let n = (to - at).min(ZEROS.len() as u64) as usize;
            self.file()?
                .write_all_at(&ZEROS[..n], at)
                .map_err(|e| self.err("zeroing preallocated space in", e))?;
            at += n as u64;
        }
        w.counters
            .zero_bytes_written
            .fetch_add(to - from, Ordering::Relaxed);
        self.zeroed_end = to;
        Ok(to - from)
    }

    /// Syncs the data of a batch, and tells the zeroing policy how much it was.
    fn sync_batch(&mut self, w: &Writer) -> Result<()> {
        let bytes = self.write_pos - self.synced_pos;
        self.sync(w)?;
        self.zeroing.observe_sync(bytes);
        Ok(())
    }

    fn sync(&mut self, w: &Writer) -> Result<()> {
        self.file()?
            .sync_data()
            .map_err(|e| self.err("fsyncing", e))?;
        w.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.synced_pos = self.write_pos;
        Ok(())
    }

    /// Seals the current segment (seal record + fsync), unless it is sealed already, then
    /// creates `next_id`.
    fn rotate(&mut self, next_id: u64, next_lsn: u64, w: &Writer) -> Result<()> {
        assert_eq!(
            next_id,
            self.segment_id + 1,
            "segments are created in order"
        );
        if self.file.is_some() {
            self.seal(next_id, next_lsn, w)?;
        } else {
            // Sealed by an earlier writer, and made durable by this one's open.
            debug_assert_eq!(next_lsn, self.sealed_next_lsn, "the seal's LSN comes next");
        }
        let prealloc = PREALLOCATE_BYTES.min(self.segment_bytes) - SEGMENT_HEADER_BYTES as u64;
        let file = create_segment(&*self.storage, &self.dir, next_id, next_lsn, prealloc)?;
        self.file = Some(file);
        self.segment_id = next_id;
        self.segment_end = self.segment_bytes;
        self.write_pos = SEGMENT_HEADER_BYTES as u64;
        self.synced_pos = self.write_pos;
        self.zeroed_end = self.write_pos;
        self.allocated_end = SEGMENT_HEADER_BYTES as u64 + prealloc;
        // Zeros for the first batches of the new segment, durable before they come (as
        // at open): the rotating batch pays for them, not the next ones.
        self.zero_ahead(w)?;
        self.sync(w)?;
        w.active_segment.store(next_id, Ordering::Release);
        w.counters.rotations.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            segment = next_id,
            first_lsn = next_lsn,
            "rotated to a new segment"
        );
        Ok(())
    }

    /// Writes the seal record handing on `next_lsn` to `next_id`, and fdatasyncs it.
    fn seal(&mut self, next_id: u64, next_lsn: u64, w: &Writer) -> Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
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
        record::encode_into(&mut buf, &header, record::payload_crc(&payload), &payload);
        // Nothing follows a seal: no zeroing ahead (nor preallocating for it).
        let written = self.write_at_end(&buf, false, w);
        self.buf = buf;
        written?;
        self.sync(w)
    }

    /// The segment being appended to. Absent only while the final segment is sealed and
    /// its successor not yet created; nothing writes then until `rotate` creates it.
    fn file(&self) -> Result<&dyn StorageFile> {
        self.file.as_deref().ok_or_else(|| {
            self.err(
                "writing after the sealed",
                std::io::Error::other("internal error: the next segment is not created"),
            )
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_header_matches_encode_into() {
        for (payload, lsn, kind, flags) in [
            (
                &b""[..],
                1,
                1,
                FLAG_BATCH_START | FLAG_BATCH_END | FLAG_DURABLE_BEFORE,
            ),
            (&b"hello"[..], u64::MAX - 1, KIND_USER_MAX, FLAG_BATCH_START),
            (&[0xA5u8; 300][..], 1 << 40, KIND_SEAL, FLAG_BATCH_END),
            (&[0u8; 4096][..], 7, 3, 0),
            (
                &[0x5Au8; APPENDER_CRC_MIN_BYTES + 1][..],
                9,
                2,
                FLAG_BATCH_END,
            ),
        ] {
            let header = RecordHeader {
                payload_len: payload.len() as u32,
                lsn,
                kind,
                flags,
            };
            let crc = record::payload_crc(payload);
            let mut expected = Vec::new();
            record::encode_into(&mut expected, &header, crc, payload);
            // Both ways: with the payload's CRC from the appender, and computed in place.
            for given in [Some(crc), None] {
                let mut got = vec![0xFFu8; RECORD_HEADER_BYTES];
                got.extend_from_slice(payload);
                put_header(&mut got, &header, given);
                assert_eq!(got, expected, "payload CRC given: {}", given.is_some());
            }
        }
    }

    #[test]
    fn batch_bytes_are_records_back_to_back() {
        let mut b = Batch::default();
        for (lsn, payload) in [(1u64, &b"ab"[..]), (2, &b""[..]), (3, &b"xyz"[..])] {
            let pos = RecordPos {
                segment_id: 1,
                offset: 0,
            };
            let pending = Pending {
                lsn,
                pos,
                kind: 1,
                payload_crc: None,
                payload_len: payload.len() as u32,
            };
            b.push(pending, payload);
        }
        let total: usize = b.records.iter().map(Pending::record_bytes).sum();
        assert_eq!(total, b.bytes.len());
        assert_eq!(&b.bytes[RECORD_HEADER_BYTES..][..2], b"ab");
        b.clear();
        assert!(b.records.is_empty() && b.bytes.is_empty());
    }
}
