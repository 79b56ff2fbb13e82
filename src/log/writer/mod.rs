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
//! Records appended with [`Writer::append_then`] (the async API's) wait in the queue
//! without a thread: the leader that finishes their batch runs their completions, with no
//! lock of the writer held, and a syncer thread leads the batches no blocking appender
//! leads ([`Writer::run_syncer`]).
//!
//! The leader's side is split by job: [`leader`] drives batches, finishes them and wakes
//! waiters; [`io`] writes runs of records, preallocates and syncs; [`rotation`] seals a full segment and creates the next; [`zeroing`] writes zeros
//! ahead of the data while that pays. [`batch`] is the queue appenders fill; [`salt`] hands out segment salts and store ids.

mod batch;
mod block_fill;
mod io;
mod leader;
mod rotation;
mod salt;
mod zeroing;

pub(crate) use self::salt::{SaltSource, random_store_id};

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex, MutexGuard};

use self::batch::{Batch, Pending, reserve};
use self::zeroing::ZeroingPolicy;
use super::format::*;
use super::record::{self, Internal, Salt};
use super::{AppendThen, Appended, RecordPos, SyncMode};
use crate::error::{Error, Result};
use crate::storage::{Storage, StorageFile};

/// Payloads at least this large have their CRC computed by the appender, outside the lock,
/// and combined with the header's by the leader (a fixed ~0.4 µs). Smaller ones are
/// checksummed by the leader in one pass over header and payload, which costs less than
/// the combine (about 70 ns for 2 KiB) and keeps the leader's serial work short.
pub(super) const APPENDER_CRC_MIN_BYTES: usize = 16 << 10;

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
    /// Records of `append_then` not yet done, in LSN order.
    completions: VecDeque<Completion>,
    /// Set when the log closes: the syncer thread returns.
    #[cfg(feature = "tokio")]
    syncer_stop: bool,
}

/// A queued record of `append_then` and what to tell once it is done.
struct Completion {
    appended: Appended,
    then: Box<dyn AppendThen>,
}

/// The file side, touched only by the current leader (under `Writer::io`).
///
/// Invariant: `synced_pos <= write_pos <= allocated_end`, and `write_pos <= zeroed_end`.
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
    /// Bytes of the segment written before this writer took it (by an earlier life of a
    /// recycled file, or an earlier writer): the page cache may not hold them, so writes
    /// there end on a block boundary (`block_fill.rs`).
    cold_end: u64,
    /// Bytes of the segment known durable.
    synced_pos: u64,
    /// Whether to zero ahead, from the bytes recent fdatasyncs covered.
    zeroing: ZeroingPolicy,
    segment_bytes: u64,
    /// Where the current segment ends: `segment_bytes`, or more for a segment reopened
    /// after it was written with a larger `segment_bytes` (it is sealed at the next append),
    /// or for a segment created to hold one record larger than `segment_bytes` allows.
    segment_end: u64,
    /// What the current segment's record checksums mix in.
    salt: Salt,
    /// Whether the current segment is a recycled file (a clean close then appends a close
    /// record, so the next writer may append after it).
    recycled: bool,
    /// What the current segment hands on to the next one's `prev_link` (`None`: v1).
    hand_on: Option<u32>,
    /// Hands out the salts of new segments.
    salts: Arc<SaltSource>,
    /// For seal records.
    buf: Vec<u8>,
    /// For the last block of a write and the zeros that fill it, as one `write`.
    fill_buf: Vec<u8>,
}

/// Counters for `stats()`.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub appends: AtomicU64,
    pub batches: AtomicU64,
    pub fsyncs: AtomicU64,
    pub bytes_written: AtomicU64,
    pub zero_bytes_written: AtomicU64,
    pub fill_bytes_written: AtomicU64,
    pub rotations: AtomicU64,
    pub recycled: AtomicU64,
    /// Bytes of compacted segments written (compaction's writes, not the appends').
    pub compacted_bytes: AtomicU64,
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
    /// The salt of segment `segment_id`'s records.
    pub salt: Salt,
    /// Whether segment `segment_id` is a recycled file.
    pub recycled: bool,
    /// What segment `segment_id` hands on to its successor's `prev_link` (`None`: v1).
    pub hand_on: Option<u32>,
    /// The store id every new segment carries.
    pub store_id: u128,
    /// Where the salts of new segments come from.
    pub salts: Arc<SaltSource>,
}

/// The group-commit writer.
///
/// Locks, in the order they may be taken (the log's full list is in `super::Inner`):
/// 1. `shared`: every appender, briefly, to reserve its LSN and position and queue its
///    bytes; waiters sleep on `wake` with it. Never held across I/O.
/// 2. `io`: the leader, for the whole write and fdatasync of a batch, taken only after
///    it released `shared` (and released before it takes `shared` again); also taken
///    alone by `prepare` and `uncreated_segment`. Under it only the storage's own locks
///    are taken. The two are never held together, so neither order can deadlock.
pub(crate) struct Writer {
    shared: Mutex<Shared>,
    /// Waiters for batch number `n` sleep on `wake[n % 2]`, with `shared` (their mutex).
    wake: [Condvar; 2],
    /// The syncer thread sleeps on it (with `shared`) while no `append_then` record waits.
    async_work: Condvar,
    io: Mutex<Io>,
    sync: SyncMode,
    segment_bytes: u64,
    /// Shared with compaction, which salts the segments it writes from the same source.
    pub salts: Arc<SaltSource>,
    /// The store id of every segment this writer and compaction make.
    pub store_id: u128,
    pub counters: Counters,
    /// Id of the segment being written (segments below it are sealed).
    pub active_segment: AtomicU64,
}

impl Writer {
    pub fn new(start: WriterStart, sync: SyncMode) -> Self {
        // Recovery's `data_end <= file_bytes` (asserted where it is computed), again where
        // the writer takes it on: `write_pos` never passes the file's end.
        assert!(
            SEGMENT_HEADER_BYTES_V2 as u64 <= start.write_pos
                && start.write_pos <= start.file_bytes,
            "writer starts inside its segment"
        );
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
                completions: VecDeque::new(),
                #[cfg(feature = "tokio")]
                syncer_stop: false,
            }),
            wake: [Condvar::new(), Condvar::new()],
            async_work: Condvar::new(),
            io: Mutex::new(Io {
                storage: start.storage,
                dir: start.dir,
                file: start.file,
                segment_id: start.segment_id,
                sealed_next_lsn: start.next_lsn,
                write_pos: start.write_pos,
                allocated_end: start.file_bytes,
                zeroed_end: start.zeroed_end.min(start.file_bytes).max(start.write_pos),
                cold_end: start.zeroed_end.min(start.file_bytes),
                synced_pos: start.write_pos,
                zeroing: ZeroingPolicy::default(),
                segment_bytes: start.segment_bytes,
                segment_end: start
                    .segment_bytes
                    .max(start.write_pos + SEAL_RECORD_BYTES as u64),
                salt: start.salt,
                recycled: start.recycled,
                hand_on: start.hand_on,
                salts: start.salts.clone(),
                buf: Vec::new(),
                fill_buf: Vec::new(),
            }),
            sync,
            segment_bytes: start.segment_bytes,
            salts: start.salts,
            store_id: start.store_id,
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

    /// Largest payload one record may carry: a record larger than a segment allows gets a
    /// segment of its own, so only the format's own limit applies.
    pub fn payload_bytes_max(&self) -> u64 {
        RECORD_PAYLOAD_BYTES_MAX
    }

    /// A clean close, once every handle is gone: in a recycled segment, appends a close
    /// record (synced unless `Never`), so that the next writer may append after it rather
    /// than seal the segment (§5.3), or a seal where no room is left for a close record.
    /// Nothing to do elsewhere: past a fresh segment's data there are only zeros.
    pub fn close(&self) -> Result<()> {
        let next_lsn = {
            let shared = self.shared.lock();
            // A poisoned handle writes nothing more; an unwritten record (impossible with
            // no handle left) would be overtaken by the close record.
            if shared.poisoned.is_some() || shared.written_lsn != shared.next_lsn {
                return Ok(());
            }
            shared.next_lsn
        };
        let mut io = self.io.lock();
        if io.file.is_none() || !io.recycled {
            return Ok(());
        }
        let room = (RECORD_HEADER_BYTES + SEAL_RECORD_BYTES) as u64;
        if io.write_pos + room <= io.segment_end {
            io.write_internal(Internal::Close, next_lsn, self)?;
        } else {
            // No room for a close record and the seal a later writer must still be able
            // to write after it: seal the segment instead (there is always room for a
            // seal). The next writer's first append makes the next segment, as after a
            // crash during a rotation; without either record the next open would take
            // the earlier life's bytes for a torn tail.
            let next_id = io.segment_id + 1;
            io.write_internal(Internal::Seal { next_id }, next_lsn, self)?;
        }
        if self.sync != SyncMode::Never {
            io.sync(self)?;
        }
        Ok(())
    }

    /// Appends one record; returns once it is durable (`Always`) or written (otherwise).
    pub fn append(&self, kind: u8, payload: &[u8]) -> Result<(u64, RecordPos)> {
        let (shared, lsn, pos) = self.queue(kind, payload)?;
        let durable = matches!(self.sync, SyncMode::Always);
        self.drive(shared, lsn + 1, durable)?;
        Ok((lsn, pos))
    }

    /// Queues one record without waiting: `then` is told once it is durable (`Always`)
    /// or written (otherwise), or that it failed, by the thread that finishes its batch
    /// (the syncer, or a blocking appender leading). The caller must make sure a syncer
    /// runs ([`run_syncer`](Self::run_syncer)).
    #[cfg(feature = "tokio")]
    pub fn append_then(&self, kind: u8, then: Box<dyn AppendThen>) {
        let payload = then.payload();
        let payload_bytes = payload.len();
        match self.queue(kind, payload) {
            Ok((mut shared, lsn, pos)) => {
                // Within a segment: `queue` checked the size.
                let bytes = super::record_bytes(payload_bytes);
                let appended = Appended { lsn, pos, bytes };
                shared.completions.push_back(Completion { appended, then });
                self.async_work.notify_one();
            }
            Err(e) => then.done(Err(e)),
        }
    }

    /// What both appends do first: checks the size, checksums a large payload outside
    /// the lock, then under `shared` (returned, still held) refuses a poisoned handle,
    /// reserves the record's LSN and position and queues its bytes.
    fn queue(&self, kind: u8, payload: &[u8]) -> Result<(MutexGuard<'_, Shared>, u64, RecordPos)> {
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
                // Fits: payloads are at most RECORD_PAYLOAD_BYTES_MAX (< 2^31) bytes.
                payload_len: payload.len() as u32,
            },
            payload,
        );
        self.counters.appends.fetch_add(1, Ordering::Relaxed);
        Ok((shared, lsn, pos))
    }

    /// The syncer: leads batches while `append_then` records wait and no blocking
    /// appender leads them; returns once [`stop_syncer`](Self::stop_syncer) was called.
    #[cfg(feature = "tokio")]
    pub fn run_syncer(&self) {
        let durable = matches!(self.sync, SyncMode::Always);
        let mut shared = self.shared.lock();
        loop {
            if shared.syncer_stop {
                return;
            }
            let Some(last) = shared.completions.back() else {
                self.async_work.wait(&mut shared);
                continue;
            };
            let target = last.appended.lsn + 1;
            // A failure is reported to every completion (and poisons the handle, which
            // then queues nothing more), so there is nothing left to do with it here.
            let _ = self.drive(shared, target, durable);
            shared = self.shared.lock();
        }
    }

    /// Makes [`run_syncer`](Self::run_syncer) return.
    #[cfg(feature = "tokio")]
    pub fn stop_syncer(&self) {
        self.shared.lock().syncer_stop = true;
        self.async_work.notify_all();
    }

    /// Makes everything appended so far durable.
    pub fn flush(&self) -> Result<()> {
        let shared = self.shared.lock();
        let target = shared.next_lsn;
        self.drive(shared, target, true)
    }
}
