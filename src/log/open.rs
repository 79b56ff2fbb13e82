//! Opening a log for writing: checks the directory, takes its lock, removes what a crash
//! left (temporary files, segments a compaction superseded), scans it, repairs a torn
//! tail and starts the writer where the scan ended.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::RwLock;

use super::format::*;
use super::lock::DirLock;
use super::record::{self, Internal, Salt};
use super::recovery::{self, LogRecovery, Scan, SegmentState};
use super::recycle;
use super::segment::{Chain, SegmentHeader, create_segment, sync_dir};
use super::writer::{SaltSource, Writer, WriterStart, random_store_id};
use super::{Inner, Log, LogOptions, RecordRef, SyncMode};
use crate::background::Periodic;
use crate::error::{Error, NotAStoreReason, Result};
use crate::storage::{RealStorage, Storage, StorageFile};

impl Log {
    /// Opens (or creates) the log in `dir` for writing, discarding the recovered records.
    pub fn open(dir: impl AsRef<Path>, options: LogOptions) -> Result<Log> {
        Log::open_with(dir, options, |_| Ok(()))
    }

    /// Opens (or creates) the log in `dir` for writing; `visit` sees every recovered record
    /// in LSN order (complete batches only). An error from `visit` aborts the open.
    pub fn open_with(
        dir: impl AsRef<Path>,
        options: LogOptions,
        visit: impl FnMut(RecordRef<'_>) -> Result<()>,
    ) -> Result<Log> {
        Log::open_on(Arc::new(RealStorage), dir, options, visit)
    }

    /// Like [`open_with`](Self::open_with), on the given storage (tests use a simulated
    /// one to inject crashes and I/O errors).
    pub fn open_on(
        storage: Arc<dyn Storage>,
        dir: impl AsRef<Path>,
        options: LogOptions,
        mut visit: impl FnMut(RecordRef<'_>) -> Result<()>,
    ) -> Result<Log> {
        let dir = dir.as_ref().to_path_buf();
        let fs = &*storage;
        validate_options(&options)?;
        prepare_dir(fs, &dir)?;
        let lock = DirLock::acquire(fs, &dir)?;
        remove_temp_files(fs, &dir)?;
        let started = Instant::now();
        // The lock is held and the writer starts after the scan: nothing changes meanwhile.
        let scan = recovery::scan(fs, &dir, options.recovery, true, &mut visit)?;
        log_recovery(&dir, &scan.report, started);
        remove_superseded_files(fs, &dir, &scan.superseded, options.segment_bytes)?;
        recycle::drain(
            fs,
            &dir,
            Some(recycle::reusable_bytes(options.segment_bytes)),
        )?;
        let salts = Arc::new(salt_source(fs, &dir, &scan)?);
        let start = writer_start(&storage, &dir, &scan, options.segment_bytes, salts)?;
        let writer = Writer::new(start, options.sync);
        writer.prepare()?;
        let inner = Arc::new(Inner {
            storage,
            dir,
            writer: Some(writer),
            recovery: scan.report,
            options,
            maps: RwLock::new(Default::default()),
            rotations_at_last_pass: Default::default(),
            pins: None,
            _lock: Some(lock),
        });
        let flusher = match options.sync {
            SyncMode::Periodic(interval) => spawn_flusher(Arc::downgrade(&inner), interval),
            _ => None,
        };
        Ok(Log {
            #[cfg(feature = "tokio")]
            _syncer: Arc::default(),
            _flusher: Arc::new(flusher),
            inner,
        })
    }
}

fn validate_options(options: &LogOptions) -> Result<()> {
    if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&options.segment_bytes) {
        return Err(Error::InvalidArgument(format!(
            "segment_bytes {} is outside {SEGMENT_BYTES_MIN}..={SEGMENT_BYTES_MAX}",
            options.segment_bytes
        )));
    }
    if let SyncMode::Periodic(d) = options.sync
        && d.is_zero()
    {
        return Err(Error::InvalidArgument(
            "SyncMode::Periodic needs a non-zero interval; use SyncMode::Always".into(),
        ));
    }
    Ok(())
}

/// Creates `dir` if missing; refuses a non-empty directory that holds no store.
fn prepare_dir(fs: &dyn Storage, dir: &Path) -> Result<()> {
    if !fs.is_dir(dir) {
        fs.create_dir_all(dir).map_err(|e| {
            not_a_directory(fs, dir)
                .unwrap_or_else(|| Error::io(format!("creating {}", dir.display()), e))
        })?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(fs, parent)?;
        }
        return Ok(());
    }
    check_is_store(fs, dir, true)
}

/// The error for a store path that is no directory but opens as a file, once using it
/// as a directory failed: the OS's own error ("file exists", "not found") would not say
/// what is wrong with it. Asked only after a failure, so the probe adds no operation
/// (and no error to swallow) to an open that works.
pub(super) fn not_a_directory(fs: &dyn Storage, dir: &Path) -> Option<Error> {
    fs.open(dir, false).ok().map(|_| Error::NotAStore {
        dir: dir.to_path_buf(),
        reason: NotAStoreReason::NotADirectory,
    })
}

/// A store holds segment files. A directory without any may become one when opened for
/// writing if it is empty or holds only what the engine itself names (its lock and
/// temporary files, left by a crash before the first segment was in place); anything
/// else is someone else's directory, named in the error.
pub(super) fn check_is_store(fs: &dyn Storage, dir: &Path, may_create: bool) -> Result<()> {
    let mut names = fs
        .list(dir)
        .map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
    if names.iter().any(|n| parse_segment_file_name(n).is_some()) {
        return Ok(());
    }
    // Sorted, so the file the error names does not depend on the listing order.
    names.sort_unstable();
    let foreign = names.iter().find(|name| {
        let ours = name.as_str() == LOCK_FILE_NAME
            || is_temp_file_name(name)
            || parse_free_file_name(name).is_some();
        // A directory is never something the engine made, whatever its name.
        !ours || fs.is_dir(&dir.join(name))
    });
    let reason = match foreign {
        Some(name) => NotAStoreReason::ForeignFile(dir.join(name)),
        None if may_create => return Ok(()),
        None => NotAStoreReason::NoSegments,
    };
    Err(Error::NotAStore {
        dir: dir.to_path_buf(),
        reason,
    })
}

/// Deletes the temporary files a crash left: only names the engine writes
/// (`is_temp_file_name`), and never a directory.
fn remove_temp_files(fs: &dyn Storage, dir: &Path) -> Result<()> {
    let names = fs
        .list(dir)
        .map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
    let mut removed = false;
    for name in names.iter().filter(|n| is_temp_file_name(n)) {
        let path = dir.join(name);
        if fs.is_dir(&path) {
            continue;
        }
        fs.remove(&path)
            .map_err(|e| Error::io(format!("removing {}", path.display()), e))?;
        removed = true;
    }
    if removed {
        sync_dir(fs, dir)?;
    }
    Ok(())
}

/// Finishes a compaction a crash interrupted: the superseded segments go (retired for
/// reuse, or deleted).
fn remove_superseded_files(
    fs: &dyn Storage,
    dir: &Path,
    superseded: &[PathBuf],
    segment_bytes: u64,
) -> Result<()> {
    if superseded.is_empty() {
        return Ok(()); // the usual open: no directory listing for it
    }
    let pool = recycle::Pool::new(segment_bytes, 0);
    let mut waiting = recycle::waiting(fs, dir)?;
    for path in superseded {
        let id = path
            .file_name()
            .and_then(|n| parse_segment_file_name(&n.to_string_lossy()))
            .unwrap_or_default();
        recycle::retire(fs, dir, (id, path), &pool, &mut waiting)?;
    }
    sync_dir(fs, dir)?;
    tracing::info!(
        segments = superseded.len(),
        "removed segments superseded by compaction"
    );
    Ok(())
}

/// Salts for new segments: above every salt on disk, in segments and in retired files,
/// so a recycled file's new salt differs from each of its earlier lives' (docs/format.md §3).
fn salt_source(fs: &dyn Storage, dir: &Path, scan: &Scan) -> Result<SaltSource> {
    let in_segments = scan.segments.iter().filter_map(|s| match s.salt {
        Salt::Salted(salt) => Some(salt),
        Salt::Unsalted => None,
    });
    let in_free = recycle::list(fs, dir)?.into_iter().filter_map(|f| f.salt);
    // Salts wrap after 2^32 segment lives; "highest" is taken in the order they were
    // handed out, i.e. the one that follows all others within half the circle.
    let highest = in_segments
        .chain(in_free)
        .reduce(|a, b| if b.wrapping_sub(a) < 1 << 31 { b } else { a });
    Ok(SaltSource::after(highest))
}

/// Decides where the writer appends next; repairs a torn tail first.
fn writer_start(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    scan: &Scan,
    segment_bytes: u64,
    salts: Arc<SaltSource>,
) -> Result<WriterStart> {
    let fs = &**storage;
    // A writer killed before its fsync (or before its directory fsync, just after creating
    // a segment) leaves data only the page cache holds. Make it durable before new
    // batches claim that everything before them is durable.
    if let Some(last) = scan.segments.last() {
        fs.open(&last.path, false)
            .and_then(|f| f.sync_data())
            .map_err(|e| Error::io(format!("fsyncing {}", last.path.display()), e))?;
        sync_dir(fs, dir)?;
    }
    let prealloc = PREALLOCATE_BYTES.min(segment_bytes) - SEGMENT_HEADER_BYTES as u64;
    // A store with no v3 segment yet (a new one, or one written by earlier code) gets
    // its id here; its first v3 segment makes it durable.
    let store_id = scan.store_id.unwrap_or_else(random_store_id);
    let fresh = |id: u64| -> Result<WriterStart> {
        let raw_salt = salts.next();
        let salt = Salt::Salted(raw_salt);
        let header = SegmentHeader {
            id,
            first_lsn: scan.next_lsn,
            flags: 0,
            salt,
            chain: Some(Chain {
                store_id,
                prev_link: 0,
                next_link: raw_salt,
            }),
        };
        let file = create_segment(fs, dir, header, prealloc)?;
        Ok(WriterStart {
            storage: storage.clone(),
            dir: dir.to_path_buf(),
            file: Some(file),
            segment_id: id,
            write_pos: SEGMENT_HEADER_BYTES as u64,
            file_bytes: SEGMENT_HEADER_BYTES as u64 + prealloc,
            zeroed_end: SEGMENT_HEADER_BYTES as u64,
            next_lsn: scan.next_lsn,
            segment_bytes,
            salt,
            recycled: false,
            hand_on: Some(raw_salt),
            store_id,
            salts: salts.clone(),
        })
    };
    match scan.segments.last() {
        None => fresh(1),
        // The next segment is created at the first append, not here: an open must not
        // need free space, or a full disk (whose last rotation failed after the seal)
        // could never be opened to compact it. The seal is durable (fdatasynced above),
        // so the log ends there until then, exactly as after a crash during rotation.
        Some(last) if last.sealed || last.seal_at_open => {
            if !last.sealed {
                seal_at_open(fs, last, scan.next_lsn)?;
            }
            let data_end = last.data_end + u64::from(!last.sealed) * SEAL_RECORD_BYTES as u64;
            Ok(WriterStart {
                storage: storage.clone(),
                dir: dir.to_path_buf(),
                file: None,
                segment_id: last.id,
                write_pos: data_end,
                // (Past the file's old end if the seal extended it.)
                file_bytes: last.file_bytes.max(data_end),
                zeroed_end: data_end,
                next_lsn: scan.next_lsn,
                segment_bytes,
                salt: last.salt,
                recycled: last.recycled,
                hand_on: last.hand_on,
                store_id,
                salts,
            })
        }
        Some(last) => reopen_tail(
            storage,
            dir,
            last,
            scan.next_lsn,
            segment_bytes,
            (store_id, salts),
        ),
    }
}

/// Seals a recycled final segment at the end of its data, and makes the seal durable:
/// what lies past the data may be a torn batch of this life, of unknown extent, which
/// zeroing could not bound; nothing past a seal is ever read (§5.3). The log then ends
/// there, as after a crash during a rotation, and the first append makes the next
/// segment.
fn seal_at_open(fs: &dyn Storage, last: &SegmentState, next_lsn: u64) -> Result<()> {
    let mut seal = Vec::with_capacity(SEAL_RECORD_BYTES);
    let next_id = last.id + 1;
    // Everything before it was fdatasynced by this open.
    record::encode_internal(
        &mut seal,
        last.salt,
        Internal::Seal { next_id },
        next_lsn,
        true,
    );
    // The writer always left room for a seal, but a file cut short (a recycled file's
    // length is its earlier life's: no crash shortens it, but a copy or damage may) ends
    // sooner: the seal then extends it, as an append extends a fresh segment.
    fs.open(&last.path, true)
        .and_then(|f| {
            f.write_all_at(&seal, last.data_end)
                .and_then(|()| f.sync_data())
        })
        .map_err(|e| Error::io(format!("sealing {}", last.path.display()), e))?;
    tracing::warn!(segment = %last.path.display(), offset = last.data_end,
        "sealed a recycled segment a writer did not close cleanly");
    Ok(())
}

fn reopen_tail(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    last: &SegmentState,
    next_lsn: u64,
    segment_bytes: u64,
    (store_id, salts): (u128, Arc<SaltSource>),
) -> Result<WriterStart> {
    let file = storage
        .open(&last.path, true)
        .map_err(|e| Error::io(format!("opening {}", last.path.display()), e))?;
    if last.dirty_end > last.data_end {
        // Zero the torn bytes before appending: a stale record left past new data could
        // otherwise validate later with a reused LSN.
        let zeros = vec![0u8; (last.dirty_end - last.data_end) as usize];
        file.write_all_at(&zeros, last.data_end)
            .and_then(|()| file.sync_data())
            .map_err(|e| {
                Error::io(
                    format!("zeroing the torn tail of {}", last.path.display()),
                    e,
                )
            })?;
        tracing::warn!(segment = %last.path.display(), offset = last.data_end,
            bytes = last.dirty_end - last.data_end, "discarded a torn tail");
    }
    let write_pos = match last.recycled && last.closed {
        true => reopen_after_close(&*file, last)?,
        false => last.data_end,
    };
    // Space a previous writer zeroed ahead is written already; zeroing it again at every
    // open would cost a megabyte of writes and an fdatasync per open.
    let zeroed_end = file.written_end(write_pos);
    Ok(WriterStart {
        storage: storage.clone(),
        dir: dir.to_path_buf(),
        file: Some(file),
        segment_id: last.id,
        write_pos,
        // A segment written under a larger segment_bytes stays valid; the writer seals it
        // at the next append and new segments take the current segment_bytes.
        file_bytes: last.file_bytes,
        zeroed_end,
        next_lsn,
        segment_bytes,
        salt: last.salt,
        recycled: last.recycled,
        hand_on: last.hand_on,
        store_id,
        salts,
    })
}

/// A recycled segment its last writer closed cleanly: the close record says that nothing
/// of this life follows it, which stays true only while nobody appends. So it is zeroed,
/// and made durable so, before this writer appends in its place: were a batch appended
/// after it and torn by a crash, with a later batch intact (a torn first record in
/// `Periodic` mode, say), a surviving close record would let the next open take the torn
/// region for the end of the data and append over it, and a later scan could then line
/// up on the intact batch beyond (§5.3). Returns where to append: the close record's
/// offset.
fn reopen_after_close(file: &dyn StorageFile, last: &SegmentState) -> Result<u64> {
    let at = last.data_end - RECORD_HEADER_BYTES as u64;
    file.write_all_at(&[0u8; RECORD_HEADER_BYTES], at)
        .and_then(|()| file.sync_data())
        .map_err(|e| Error::io(format!("reopening {}", last.path.display()), e))?;
    Ok(at)
}

pub(super) fn log_recovery(dir: &Path, r: &LogRecovery, started: Instant) {
    tracing::info!(
        dir = %dir.display(),
        segments = r.segments,
        records = r.records,
        bytes = r.bytes,
        torn_bytes = r.torn_bytes,
        skipped_ranges = r.skipped.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "log recovered"
    );
}

fn spawn_flusher(inner: Weak<Inner>, interval: Duration) -> Option<Periodic> {
    Periodic::spawn("agentwal-flusher", interval, move || {
        let Some(inner) = inner.upgrade() else {
            return ControlFlow::Break(());
        };
        match &inner.writer {
            // Poisoned: appends report it.
            Some(w) if w.flush().is_err() => ControlFlow::Break(()),
            _ => ControlFlow::Continue(()),
        }
    })
}
