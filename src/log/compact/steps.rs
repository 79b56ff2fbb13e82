//! The file steps of a compaction pass (`super` runs them in this order): rewrite the live
//! records of a prefix of sealed segments into one compacted segment that replaces the
//! last of them, then delete the rest.
//!
//! Crash safety, step by step (docs/store.md §7):
//! 0. delete the leading segments that hold nothing live, lowest id first, fsyncing the
//!    directory after each: a crash leaves a suffix of the log, which recovery accepts
//!    as it is (the first segment present starts the log). This comes before anything is
//!    written, so that a full disk gets the space the compacted segment needs.
//! 1. write `<id>.wal.compact.tmp` (header flagged COMPACTED, the live records with their
//!    original LSNs, a seal naming the next segment) and fsync it. A crash leaves a temp
//!    file that the next open deletes: nothing changed.
//! 2. exchange it with segment `<id>` (or, where the file system cannot, rename it over
//!    it) and fsync the directory. Both are atomic: a crash leaves either the old segment
//!    (nothing changed) or the compacted one, which supersedes every lower id, so recovery
//!    skips those whether or not they still exist. After an exchange the old segment's
//!    file lies under the temporary name, which the next open deletes.
//! 3. retire that file (renamed to `<id>.wal.free` for reuse, or deleted) and the
//!    superseded segments, and fsync the directory. Any subset may come back after a
//!    crash; recovery skips them all, and a `.free` file is no segment.

use std::path::{Path, PathBuf};

use crate::error::{CorruptionReason, Error, Result};
use crate::log::format::*;
use crate::log::record::{self, Internal, RecordHeader, Salt};
use crate::log::recycle;
use crate::log::segment::{
    Chain, SegmentHeader, list_segments, read_header, segment_path, sync_dir,
};
use crate::log::{Log, RecordPos};

use super::{CompactionHooks, Moved};

/// A compacted segment written and fsynced, not yet installed.
#[derive(Debug)]
pub(super) struct PreparedCompaction {
    /// The segment it replaces; all lower ids are superseded once installed.
    pub(super) through_id: u64,
    tmp: PathBuf,
    /// Old position → new place of every live record copied.
    pub(super) moved: Vec<(RecordPos, Moved)>,
    /// Bytes of the compacted segment.
    pub(super) bytes: u64,
    /// Set once the rename put it in place (even if making that durable then failed).
    installed: std::sync::atomic::AtomicBool,
    /// Set if the install swapped the replaced segment's file to `tmp` (to be retired).
    exchanged: std::sync::atomic::AtomicBool,
}

/// The live records of a prefix, encoded as a compacted segment's body (no seal yet).
struct CompactedBody {
    body: Vec<u8>,
    /// Old position → new place of every record copied, in log order.
    moved: Vec<(RecordPos, Moved)>,
    /// LSN of the first record copied.
    first_lsn: Option<u64>,
}

impl PreparedCompaction {
    /// Whether [`Log::install_compaction`] renamed it into place. After an error this
    /// tells whether the old positions are already gone (the directory fsync failed)
    /// or nothing changed (the rename failed).
    pub(super) fn is_installed(&self) -> bool {
        self.installed.load(std::sync::atomic::Ordering::Acquire)
    }
}

impl Log {
    /// Ids of the segment files on disk, ascending.
    pub fn segment_ids(&self) -> Result<Vec<u64>> {
        Ok(self
            .segment_sizes()?
            .into_iter()
            .map(|(id, _)| id)
            .collect())
    }

    /// Ids and file sizes (preallocated space included) of the segment files, ascending.
    pub fn segment_sizes(&self) -> Result<Vec<(u64, u64)>> {
        let storage = self.storage();
        list_segments(storage, self.dir())?
            .into_iter()
            .map(|(id, path)| {
                let len = storage.open(&path, false).and_then(|f| f.len());
                match len {
                    Ok(len) => Ok(Some((id, len))),
                    // Deleted meanwhile by a compaction (read-only handles race writers).
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(Error::io(
                        format!("reading the size of {}", path.display()),
                        e,
                    )),
                }
            })
            .filter_map(Result::transpose)
            .collect()
    }

    /// The retired segment files waiting to be recycled: the id each had, and its size.
    pub fn free_file_sizes(&self) -> Result<Vec<(u64, u64)>> {
        Ok(recycle::list(self.storage(), self.dir())?
            .into_iter()
            .filter_map(|f| {
                let name = f.path.file_name()?.to_str()?;
                Some((parse_free_file_name(name)?, f.file_bytes))
            })
            .collect())
    }

    /// Id of the segment being appended to (every lower id is sealed).
    pub fn active_segment_id(&self) -> Result<u64> {
        let w = self.writer()?;
        Ok(w.active_segment.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Step 1: copies the records at `live` (positions in segments `<= through_id`, in log
    /// order) into a fsynced temporary compacted segment, each with the payload `hooks`
    /// rewrites it to, if any, sealed with `next_first_lsn` ([`first_lsn_after`](Self::first_lsn_after)).
    /// Takes no lock that appenders wait on (it may run at low priority).
    pub(super) fn prepare_compaction(
        &self,
        through_id: u64,
        next_first_lsn: u64,
        live: &[RecordPos],
        hooks: &dyn CompactionHooks,
    ) -> Result<PreparedCompaction> {
        let active = self.active_segment_id()?;
        if through_id >= active {
            return Err(Error::InvalidArgument(format!(
                "segment {through_id} is not sealed (active segment is {active})"
            )));
        }
        debug_assert!(
            live.windows(2).all(|w| w[0] < w[1]),
            "live positions must be sorted"
        );
        // It hands on what the segment it replaces did, which `through_id + 1` (made
        // already, or made later by the writer from its own record of it) links to.
        let hand_on = read_header(self.storage(), &segment_path(self.dir(), through_id))??
            .hand_on()
            .unwrap_or(0);
        // A new file, in the current format whatever the segments it replaces were
        // written in.
        let raw_salt = self.writer()?.salts.next();
        let salt = Salt::Salted(raw_salt);
        let CompactedBody {
            mut body,
            moved,
            first_lsn,
        } = self.copy_live(through_id, live, salt, hooks)?;
        let seal_offset = (SEGMENT_HEADER_BYTES + body.len()) as u64;
        // No durable-before flag: the body before it is written in the same write, not
        // fsynced first.
        let next_id = through_id + 1;
        record::encode_internal(
            &mut body,
            salt,
            Internal::Seal { next_id },
            next_first_lsn,
            false,
        );
        // The index is switched to `moved` once the file is in place: every new position
        // must be a record of it, in order, before the seal (recovery checks the records'
        // LSN order again when it reads the file).
        assert!(
            moved
                .windows(2)
                .all(|w| w[0].1.pos.offset < w[1].1.pos.offset)
                && moved.iter().all(|(_, new)| {
                    new.pos.segment_id == through_id
                        && SEGMENT_HEADER_BYTES as u64 <= new.pos.offset
                        && new.pos.offset + u64::from(new.bytes) <= seal_offset
                }),
            "moved positions lie inside the compacted segment, in order"
        );
        let header = SegmentHeader {
            id: through_id,
            first_lsn: first_lsn.unwrap_or(next_first_lsn),
            flags: SEGMENT_FLAG_COMPACTED,
            salt,
            // No predecessor: it supersedes every lower id.
            chain: Some(Chain {
                store_id: self.writer()?.store_id,
                prev_link: 0,
                next_link: hand_on,
            }),
        };
        let tmp = self.dir().join(compact_temp_file_name(through_id));
        if let Err(e) = self.write_compacted(&tmp, &header, &body) {
            // Retired files hold space that a full disk needs for this file: give them up
            // and try once more.
            if !e.is_disk_full() || recycle::drain(self.storage(), self.dir(), None)? == 0 {
                return Err(e);
            }
            self.write_compacted(&tmp, &header, &body)?;
        }
        let written = (SEGMENT_HEADER_BYTES + body.len()) as u64;
        let counters = &self.writer()?.counters;
        counters
            .compacted_bytes
            .fetch_add(written, std::sync::atomic::Ordering::Relaxed);
        Ok(PreparedCompaction {
            through_id,
            tmp,
            moved,
            bytes: (SEGMENT_HEADER_BYTES + body.len()) as u64,
            installed: Default::default(),
            exchanged: Default::default(),
        })
    }

    /// The first LSN of segment `through_id + 1`: what the compacted segment's seal hands
    /// on.
    pub(super) fn first_lsn_after(&self, through_id: u64) -> Result<u64> {
        Ok(match self.writer()?.uncreated_segment() {
            // Its header does not exist yet; its first LSN is the one the writer will
            // give it, the LSN the seal of `through_id` hands on. (If the writer creates
            // it meanwhile, the header says the same.)
            Some((id, first_lsn)) if id == through_id + 1 => first_lsn,
            // Any failure to read its header, I/O or decode, fails the compaction.
            _ => read_header(self.storage(), &segment_path(self.dir(), through_id + 1))??.first_lsn,
        })
    }

    /// Encodes the records at `live` as the body of compacted segment `through_id`, each
    /// a batch of its own with its original LSN and the payload `hooks` rewrites it to.
    fn copy_live(
        &self,
        through_id: u64,
        live: &[RecordPos],
        salt: Salt,
        hooks: &dyn CompactionHooks,
    ) -> Result<CompactedBody> {
        let mut out = CompactedBody {
            body: Vec::new(),
            moved: Vec::with_capacity(live.len()),
            first_lsn: None,
        };
        let mut last_lsn = None;
        for &pos in live {
            assert!(
                pos.segment_id <= through_id,
                "live record outside the compacted prefix"
            );
            let start = out.body.len();
            self.read_with(pos, |rec| {
                // Recovery accepts a compacted segment only with rising LSNs. Records read
                // back in log order have them, unless a salvaged log's segments overlap:
                // refuse to write a segment the next open would reject.
                if let Some(last) = last_lsn.filter(|&last| rec.lsn <= last) {
                    return Err(Error::Corruption {
                        segment: rec.segment.to_path_buf(),
                        offset: rec.offset,
                        reason: CorruptionReason::LsnGap {
                            expected: last + 1,
                            found: rec.lsn,
                        },
                    });
                }
                last_lsn = Some(rec.lsn);
                out.first_lsn.get_or_insert(rec.lsn);
                let rewritten =
                    (hooks.rewrite(rec.kind, rec.payload)).filter(|p| p.len() < rec.payload.len());
                let payload = rewritten.as_deref().unwrap_or(rec.payload);
                let header = RecordHeader {
                    // Never longer than the payload it replaces, which fitted.
                    payload_len: payload.len() as u32,
                    lsn: rec.lsn,
                    kind: rec.kind,
                    flags: FLAG_BATCH_START | FLAG_BATCH_END,
                };
                record::encode_into(
                    &mut out.body,
                    salt,
                    &header,
                    record::payload_crc(payload),
                    payload,
                );
                Ok(())
            })?;
            let moved = Moved {
                pos: RecordPos {
                    segment_id: through_id,
                    offset: (SEGMENT_HEADER_BYTES + start) as u64,
                },
                // At most the record it replaces, whose size fitted a u32.
                bytes: (out.body.len() - start) as u32,
            };
            out.moved.push((pos, moved));
        }
        Ok(out)
    }

    /// Writes and fsyncs the compacted segment `header` + `body` at `tmp`.
    fn write_compacted(&self, tmp: &Path, header: &SegmentHeader, body: &[u8]) -> Result<()> {
        let ctx = |what: &str| format!("{what} compacted segment {}", tmp.display());
        let file = self
            .storage()
            .create(tmp)
            .map_err(|e| Error::io(ctx("creating"), e))?;
        file.write_all_at(&header.encode(), 0)
            .and_then(|()| file.write_all_at(body, SEGMENT_HEADER_BYTES as u64))
            .map_err(|e| Error::io(ctx("writing"), e))?;
        file.sync_data().map_err(|e| Error::io(ctx("fsyncing"), e))
    }

    /// Step 2: atomically replaces segment `through_id` with the compacted one. The old
    /// file is swapped to the temporary name where the file system can exchange two
    /// names in one step, so that [`remove_superseded`](Self::remove_superseded) can
    /// retire it for reuse: the sealed segment a pass replaces is, in steady state, the
    /// only full-sized file it frees. From here on, old positions in segments
    /// `<= through_id` are invalid: the caller must switch to `moved` before anyone reads
    /// them again, and then make the change durable ([`sync_dir`]) before deleting
    /// anything. That holds after an error too if [`PreparedCompaction::is_installed`].
    pub(super) fn install_compaction(&self, prepared: &PreparedCompaction) -> Result<()> {
        let target = segment_path(self.dir(), prepared.through_id);
        let storage = self.storage();
        let exchanged = match storage.exchange(&prepared.tmp, &target) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                storage.rename(&prepared.tmp, &target).map(|()| false)
            }
            Err(e) => Err(e),
        };
        let exchanged = exchanged.map_err(|e| {
            Error::io(
                format!("installing compacted segment {}", target.display()),
                e,
            )
        })?;
        use std::sync::atomic::Ordering::Release;
        prepared.exchanged.store(exchanged, Release);
        prepared.installed.store(true, Release);
        self.forget_maps(prepared.through_id);
        Ok(())
    }

    /// Step 0, before anything is written: deletes the segments with ids up to
    /// `through_id`, which must hold no live record and must not include the segment a
    /// compaction will replace, so that a full disk gets space back before the compacted
    /// segment needs it. Returns the paths removed and their bytes.
    ///
    /// Crash safety: they go in ascending order, each deletion made durable (directory
    /// fsync) before the next, so a crash leaves a suffix of the log (recovery accepts
    /// any first segment) and never revives a lower segment once a higher one is gone:
    /// that would break the chain, or bring superseded segments back if the one deleted
    /// was the compacted segment that superseded them. docs/log.md §4.4.
    pub(super) fn remove_dead_prefix(
        &self,
        through_id: u64,
        pool: &recycle::Pool,
    ) -> Result<(Vec<PathBuf>, u64)> {
        let active = self.active_segment_id()?;
        if through_id >= active {
            return Err(Error::InvalidArgument(format!(
                "segment {through_id} is not sealed (active segment is {active})"
            )));
        }
        let mut removed = Vec::new();
        let mut bytes = 0;
        let storage = self.storage();
        let mut waiting = recycle::waiting(storage, self.dir())?;
        for (id, path) in list_segments(storage, self.dir())? {
            if id > through_id {
                break;
            }
            self.forget_maps(id);
            bytes += storage
                .open(&path, false)
                .and_then(|f| f.len())
                .unwrap_or(0);
            recycle::retire(storage, self.dir(), (id, &path), pool, &mut waiting)?;
            sync_dir(storage, self.dir())?;
            removed.push(path);
        }
        Ok((removed, bytes))
    }

    /// Gives up a prepared compaction (deletes its temporary file).
    pub(super) fn abandon_compaction(&self, prepared: &PreparedCompaction) {
        let _ = self.storage().remove(&prepared.tmp);
    }

    /// Step 3: retires the file the install swapped out (the old segment `through_id`,
    /// now under the temporary name) and the segments the compacted one supersedes, then
    /// fsyncs the directory; returns the segment paths removed and their bytes. The
    /// install must be durable first.
    pub(super) fn remove_superseded(
        &self,
        prepared: &PreparedCompaction,
        pool: &recycle::Pool,
    ) -> Result<(Vec<PathBuf>, u64)> {
        let through_id = prepared.through_id;
        let mut removed = Vec::new();
        let mut bytes = 0;
        let storage = self.storage();
        let swapped_out = prepared
            .exchanged
            .load(std::sync::atomic::Ordering::Acquire);
        let mut waiting = recycle::waiting(storage, self.dir())?;
        if swapped_out {
            let swapped = (through_id, prepared.tmp.as_path());
            recycle::retire(storage, self.dir(), swapped, pool, &mut waiting)?;
        }
        for (id, path) in list_segments(storage, self.dir())? {
            if id >= through_id {
                break;
            }
            bytes += storage
                .open(&path, false)
                .and_then(|f| f.len())
                .unwrap_or(0);
            recycle::retire(storage, self.dir(), (id, &path), pool, &mut waiting)?;
            removed.push(path);
        }
        // Files an earlier, busier interval left beyond what this one keeps.
        let trimmed = recycle::trim(storage, self.dir(), pool.files_max)?;
        if swapped_out || !removed.is_empty() || trimmed > 0 {
            sync_dir(storage, self.dir())?;
        }
        Ok((removed, bytes))
    }

    /// The pool a pass that is about to retire files keeps: sized by the rotations since
    /// the previous such pass ([`recycle::recycle_files_max`]), or the least pool if the
    /// pass is `forced`: whoever forces a pass wants the disk back, not the next
    /// rotations made cheap. Passes run one at a time.
    pub(super) fn pool_for_pass(&self, forced: bool) -> Result<recycle::Pool> {
        use std::sync::atomic::Ordering::Relaxed;
        let now = self.writer()?.counters.rotations.load(Relaxed);
        let before = self.inner.rotations_at_last_pass.swap(now, Relaxed);
        let rotations = if forced {
            0
        } else {
            now.saturating_sub(before)
        };
        Ok(recycle::Pool::new(
            self.inner.options.segment_bytes,
            rotations,
        ))
    }
}
