//! Checkpoint body compression (docs/format.md §8): one zstd frame per body, its codec and
//! its length decompressed in the record's [`Body`] tag.
//!
//! Compressing never fails a write: a body that zstd cannot make at least
//! 1/[`SAVING_MIN_DIVISOR`] smaller, or that zstd fails on, is stored as encoded.
//! Decompressing is bounded: a frame is decompressed only if the length the record claims
//! is at most [`COMPRESSED_BODY_BYTES_MAX`] and the frame's own header declares exactly
//! that length, into a buffer of exactly that size; anything else is an error.

use std::borrow::Cow;

use super::codec::{self, Body, CheckpointRec, Decoded};
use super::types::{COMPRESSED_BODY_BYTES_MAX, COMPRESSION_BODY_BYTES_MIN, Compression};
use crate::error::{Error, Result};

/// A body is kept compressed only if its frame saves at least 1/this of it: less is not
/// worth a decompression on every read.
#[cfg(feature = "zstd")]
const SAVING_MIN_DIVISOR: usize = 8;

/// A checkpoint body as it is to be stored: its tag and its bytes.
#[derive(Debug, Clone)]
pub(crate) struct StoredBody<'a> {
    /// Snapshot or delta, and the codec.
    pub kind: Body,
    /// The encoded body, or its zstd frame.
    pub bytes: Cow<'a, [u8]>,
}

impl StoredBody<'_> {
    /// The body as encoded, stored as it is.
    pub fn raw(snapshot: bool, bytes: &[u8]) -> StoredBody<'_> {
        StoredBody {
            kind: Body::new(snapshot, None),
            bytes: Cow::Borrowed(bytes),
        }
    }
}

/// `raw` (an encoded snapshot or delta) as `compression` stores it when written (by a
/// commit or a fork: [`Compression::at_commit`]; by compaction: [`Compression::at_compaction`]).
pub(crate) fn compress(compression: Compression, snapshot: bool, raw: &[u8]) -> StoredBody<'_> {
    let level = match compression {
        Compression::Zstd { level, deltas } if snapshot || deltas => level,
        _ => return StoredBody::raw(snapshot, raw),
    };
    if !(COMPRESSION_BODY_BYTES_MIN..=COMPRESSED_BODY_BYTES_MAX).contains(&raw.len()) {
        return StoredBody::raw(snapshot, raw);
    }
    match zstd_frame(level, raw) {
        Some(frame) => StoredBody {
            // Fits: at most COMPRESSED_BODY_BYTES_MAX, which is below 4 GiB.
            kind: Body::new(snapshot, Some(raw.len() as u32)),
            bytes: Cow::Owned(frame),
        },
        None => StoredBody::raw(snapshot, raw),
    }
}

/// [`compress`], owning the result: the frame, or `raw` itself.
pub(crate) fn compress_owned(
    compression: Compression,
    snapshot: bool,
    raw: Vec<u8>,
) -> StoredBody<'static> {
    let (kind, frame) = {
        let stored = compress(compression, snapshot, &raw);
        let frame = match stored.bytes {
            Cow::Owned(frame) => Some(frame),
            Cow::Borrowed(_) => None,
        };
        (stored.kind, frame)
    };
    StoredBody {
        kind,
        bytes: Cow::Owned(frame.unwrap_or(raw)),
    }
}

/// A checkpoint record's payload with its body compressed as `compression` says, or
/// `None` when it stays as it is: a body stored compressed already, one `compression`
/// leaves raw or cannot shrink, a payload that does not decode (copied as it is, so that
/// a later read reports it where it lies).
pub(crate) fn compress_payload(compression: Compression, payload: &[u8]) -> Option<Vec<u8>> {
    // `compress` writes only `Zstd` frames: under any other setting a pass would decode
    // every checkpoint it copies for nothing.
    if !matches!(compression, Compression::Zstd { .. }) {
        return None;
    }
    let Ok(Decoded::Checkpoint(rec)) = codec::decode_payload(codec::KIND_CHECKPOINT, payload)
    else {
        return None;
    };
    if rec.body_kind.zstd_raw_len().is_some() {
        return None;
    }
    let stored = compress(compression, rec.body_kind.is_snapshot(), rec.body);
    let Cow::Owned(frame) = &stored.bytes else {
        return None;
    };
    let compressed = CheckpointRec {
        body_kind: stored.kind,
        body: frame,
        ..rec
    };
    codec::encode_checkpoint(&compressed).ok()
}

/// Checks that `compression` can be used by this build.
pub(crate) fn validate(compression: Compression) -> Result<()> {
    match compression {
        Compression::None => Ok(()),
        Compression::Zstd { level, .. } | Compression::ZstdAtCompaction { level, .. } => {
            validate_zstd_level(level)
        }
    }
}

/// The body of checkpoint `c` as encoded: the stored bytes, or its frame decompressed.
/// The error says why a frame does not decompress (the caller names the record).
pub(crate) fn body<'a>(c: &CheckpointRec<'a>) -> std::result::Result<Cow<'a, [u8]>, String> {
    match c.body_kind.zstd_raw_len() {
        None => Ok(Cow::Borrowed(c.body)),
        Some(raw_len) => decompress_zstd(c.body, raw_len).map(Cow::Owned),
    }
}

/// The length a compressed body claims decompressed, if it is within the bound.
#[cfg(feature = "zstd")]
fn check_claim(raw_len: u32) -> std::result::Result<usize, String> {
    let raw_len = usize::try_from(raw_len).map_err(|_| "length beyond this machine".to_string())?;
    if raw_len > COMPRESSED_BODY_BYTES_MAX {
        return Err(format!(
            "compressed body claims {raw_len} bytes decompressed, more than the \
             {COMPRESSED_BODY_BYTES_MAX} a compressed body may hold"
        ));
    }
    Ok(raw_len)
}

#[cfg(feature = "zstd")]
mod zstd_codec {
    use std::cell::RefCell;

    use parking_lot::Mutex;
    use zstd::bulk::{Compressor, Decompressor};
    use zstd::zstd_safe;

    use super::{SAVING_MIN_DIVISOR, check_claim};
    use crate::error::{Error, Result};

    /// Compression contexts kept for reuse, each with its level, shared by all threads: a
    /// context costs far more to set up than a small body costs to compress, and one sized
    /// for a snapshot takes about 570 KiB (level 1, a 141 KB body). A context per thread
    /// (as before) gave 64 committing threads 64 of them, each new thread's first snapshot
    /// paying for allocating, faulting in and zeroing its own, and each compression
    /// running on a context no cache had seen since that thread's last snapshot. At most
    /// a few bodies are compressed at once, so a few contexts serve every thread.
    static COMPRESSORS: Mutex<Vec<(i32, Compressor<'static>)>> = Mutex::new(Vec::new());

    /// Contexts kept in [`COMPRESSORS`] at most; one more in use at once is made for the
    /// call and dropped after it.
    const COMPRESSORS_KEPT: usize = 4;

    thread_local! {
        /// This thread's decompression context.
        static DECOMPRESSOR: RefCell<Option<Decompressor<'static>>> =
            const { RefCell::new(None) };
    }

    /// A context at `level`: a kept one (of that level if there is one), or a new one.
    fn take_compressor(level: i32) -> Option<Compressor<'static>> {
        let kept = {
            let mut kept = COMPRESSORS.lock();
            match kept.iter().rposition(|(l, _)| *l == level) {
                Some(i) => Some(kept.swap_remove(i)),
                None => kept.pop(),
            }
        };
        match kept {
            Some((l, c)) if l == level => Some(c),
            Some((_, mut c)) => {
                c.set_compression_level(level).ok()?;
                Some(c)
            }
            None => {
                let mut c = Compressor::new(level).ok()?;
                c.set_parameter(zstd_safe::CParameter::ContentSizeFlag(true))
                    .ok()?;
                c.set_parameter(zstd_safe::CParameter::ChecksumFlag(false))
                    .ok()?;
                Some(c)
            }
        }
    }

    /// Gives a context back for reuse (dropped if enough are kept).
    fn put_compressor(level: i32, c: Compressor<'static>) {
        let mut kept = COMPRESSORS.lock();
        if kept.len() < COMPRESSORS_KEPT {
            kept.push((level, c));
        }
    }

    /// A standard frame of `raw` at `level`, with its content size in the header and no
    /// checksum (the record's CRC covers the stored bytes); `None` if it would not be at
    /// least 1/`SAVING_MIN_DIVISOR` smaller (zstd stops as soon as it overruns that), or
    /// if zstd fails.
    pub fn zstd_frame(level: i32, raw: &[u8]) -> Option<Vec<u8>> {
        let capacity = raw.len() - raw.len() / SAVING_MIN_DIVISOR;
        let mut out = Vec::with_capacity(capacity);
        let mut c = take_compressor(level)?;
        // Each call starts a new frame (`ZSTD_compress2` resets the session first), so a
        // context is reusable after a failed call too, such as a body that did not fit.
        let done = c.compress_to_buffer(raw, &mut out);
        put_compressor(level, c);
        done.ok()?;
        Some(out)
    }

    /// `frame` decompressed, which must give exactly `raw_len` bytes. Before allocating,
    /// checks that `raw_len` is within the bound and that the body is one whole zstd
    /// frame declaring that length.
    pub fn decompress_zstd(frame: &[u8], raw_len: u32) -> std::result::Result<Vec<u8>, String> {
        let raw_len = check_claim(raw_len)?;
        match zstd_safe::get_frame_content_size(frame) {
            Ok(Some(n)) if n == raw_len as u64 => {}
            Ok(Some(n)) => {
                return Err(format!(
                    "the zstd frame declares {n} bytes decompressed, the record {raw_len}"
                ));
            }
            Ok(None) => return Err("the zstd frame does not declare its size".into()),
            Err(_) => return Err("the body is not a zstd frame".into()),
        }
        match zstd_safe::find_frame_compressed_size(frame) {
            Ok(n) if n == frame.len() => {}
            Ok(n) => {
                return Err(format!(
                    "{} bytes follow the {n}-byte zstd frame",
                    frame.len() - n
                ));
            }
            Err(code) => {
                return Err(format!(
                    "the zstd frame is damaged: {}",
                    zstd_safe::get_error_name(code)
                ));
            }
        }
        let mut out = Vec::new();
        out.try_reserve_exact(raw_len)
            .map_err(|e| format!("cannot allocate {raw_len} bytes to decompress into: {e}"))?;
        DECOMPRESSOR.with(|cell| {
            let mut fresh = None;
            let mut slot = cell.try_borrow_mut();
            let d = match slot.as_deref_mut() {
                Ok(Some(d)) => d,
                Ok(empty) => empty.insert(Decompressor::new().map_err(|e| e.to_string())?),
                Err(_) => fresh.insert(Decompressor::new().map_err(|e| e.to_string())?),
            };
            d.decompress_to_buffer(frame, &mut out)
                .map_err(|e| format!("the zstd frame does not decompress: {e}"))
        })?;
        if out.len() != raw_len {
            return Err(format!(
                "the zstd frame decompressed to {} bytes, the record says {raw_len}",
                out.len()
            ));
        }
        Ok(out)
    }

    pub fn validate_zstd_level(level: i32) -> Result<()> {
        let (min, max) = (zstd_safe::min_c_level(), zstd_safe::max_c_level());
        if (min..=max).contains(&level) {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "zstd level {level} is outside zstd's range {min}..={max}"
            )))
        }
    }
}

#[cfg(not(feature = "zstd"))]
mod zstd_codec {
    use crate::error::{Error, Result};

    /// What a build without zstd says of a compressed body or setting.
    const NO_ZSTD: &str = "this build of agentwal has no zstd support (cargo feature `zstd`)";

    pub fn zstd_frame(_level: i32, _raw: &[u8]) -> Option<Vec<u8>> {
        None
    }

    pub fn decompress_zstd(_frame: &[u8], _raw_len: u32) -> std::result::Result<Vec<u8>, String> {
        Err(format!("the body is compressed with zstd, and {NO_ZSTD}"))
    }

    pub fn validate_zstd_level(_level: i32) -> Result<()> {
        Err(Error::InvalidArgument(format!(
            "Compression::Zstd: {NO_ZSTD}"
        )))
    }
}

use zstd_codec::{decompress_zstd, validate_zstd_level, zstd_frame};

/// Fails with [`Error::RecordTooLarge`] if a checkpoint payload of `stored_bytes`, as
/// `c`, would exceed `limit_bytes` with its body uncompressed: the limit counts
/// uncompressed bytes, so compression never decides whether a commit fits.
pub(crate) fn check_uncompressed_size(
    c: &CheckpointRec<'_>,
    stored_bytes: usize,
    limit_bytes: u64,
) -> Result<()> {
    let payload_bytes = c.uncompressed_bytes(stored_bytes as u64);
    if payload_bytes > limit_bytes {
        return Err(Error::RecordTooLarge {
            payload_bytes,
            limit_bytes,
        });
    }
    Ok(())
}

#[cfg(all(test, feature = "zstd"))]
mod tests {
    use super::*;

    fn text(n: usize) -> Vec<u8> {
        let words = ["agent", "tool", "state", "delta", "search", "result"];
        let mut out = Vec::new();
        let mut i = 0usize;
        while out.len() < n {
            out.extend_from_slice(words[(i * 7 + i / 3) % words.len()].as_bytes());
            out.push(b' ');
            i += 1;
        }
        out.truncate(n);
        out
    }

    fn rec<'a>(body_kind: Body, body: &'a [u8]) -> CheckpointRec<'a> {
        CheckpointRec {
            task: "t",
            seq: 1,
            created_at_ms: 0,
            schema_version: 1,
            body_kind,
            origin: None,
            body,
        }
    }

    const ZSTD_1: Compression = Compression::Zstd {
        level: 1,
        deltas: true,
    };

    #[test]
    fn a_compressed_body_round_trips() {
        let raw = text(4000);
        let stored = compress(ZSTD_1, true, &raw);
        assert_eq!(stored.kind, Body::SnapshotZstd { raw_len: 4000 });
        assert!(stored.bytes.len() < raw.len() / 2);
        let back = body(&rec(stored.kind, &stored.bytes)).unwrap();
        assert_eq!(&back[..], &raw[..]);
    }

    #[test]
    fn small_incompressible_and_excluded_bodies_stay_raw() {
        let small = text(COMPRESSION_BODY_BYTES_MIN - 1);
        assert_eq!(compress(ZSTD_1, false, &small).kind, Body::Delta);
        // xorshift bytes: zstd cannot save 1/8 of them.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let stored = compress(ZSTD_1, true, &noise);
        assert_eq!(stored.kind, Body::Snapshot);
        assert!(matches!(stored.bytes, Cow::Borrowed(_)));
        let snapshots_only = Compression::Zstd {
            level: 1,
            deltas: false,
        };
        let raw = text(4000);
        assert_eq!(compress(snapshots_only, false, &raw).kind, Body::Delta);
        assert!(
            compress(snapshots_only, true, &raw)
                .kind
                .zstd_raw_len()
                .is_some()
        );
        assert_eq!(compress(Compression::None, true, &raw).kind, Body::Snapshot);
    }

    #[test]
    fn a_bad_frame_or_claim_is_an_error() {
        let raw = text(4000);
        let stored = compress(ZSTD_1, false, &raw);
        let frame = stored.bytes.to_vec();
        let err = |kind, bytes: &[u8]| body(&rec(kind, bytes)).unwrap_err();
        // The claimed length disagrees with the frame's.
        assert!(err(Body::DeltaZstd { raw_len: 3999 }, &frame).contains("declares 4000"));
        // A claim beyond the bound is refused before anything is allocated.
        let huge = COMPRESSED_BODY_BYTES_MAX as u32 + 1;
        assert!(err(Body::DeltaZstd { raw_len: huge }, &frame).contains("more than"));
        // Not a frame; a truncated frame; trailing bytes; a damaged block.
        assert!(err(Body::DeltaZstd { raw_len: 4000 }, &raw).contains("not a zstd frame"));
        let cut = &frame[..frame.len() - 3];
        assert!(body(&rec(Body::DeltaZstd { raw_len: 4000 }, cut)).is_err());
        let mut longer = frame.clone();
        longer.push(0);
        assert!(err(Body::DeltaZstd { raw_len: 4000 }, &longer).contains("follow"));
        for i in 6..frame.len() {
            let mut flipped = frame.clone();
            flipped[i] ^= 0x5a;
            // Either an error or exactly 4000 bytes: never a panic.
            if let Ok(out) = body(&rec(Body::DeltaZstd { raw_len: 4000 }, &flipped)) {
                assert_eq!(out.len(), 4000);
            }
        }
    }

    #[test]
    fn uncompressed_bytes_are_those_of_the_raw_record() {
        let raw = text(3000);
        let stored = compress(ZSTD_1, false, &raw);
        let compressed = rec(stored.kind, &stored.bytes);
        let plain = rec(Body::Delta, &raw);
        let a = super::super::codec::encode(&compressed).unwrap();
        let b = super::super::codec::encode(&plain).unwrap();
        assert!(a.len() < b.len());
        assert_eq!(
            compressed.uncompressed_bytes(a.len() as u64),
            b.len() as u64
        );
        assert_eq!(plain.uncompressed_bytes(b.len() as u64), b.len() as u64);
        assert_eq!(compressed.raw_body_bytes(), 3000);
    }

    #[test]
    fn the_size_limit_counts_the_record_uncompressed() {
        let raw = text(3000);
        let stored = compress(ZSTD_1, false, &raw);
        let compressed = rec(stored.kind, &stored.bytes);
        let payload = super::super::codec::encode(&compressed).unwrap().len();
        let uncompressed = compressed.uncompressed_bytes(payload as u64);
        assert!(payload < 1500 && uncompressed > 3000);
        // A limit the stored payload fits but the uncompressed one does not: refused, as
        // the same record stored raw would be.
        let limit = uncompressed - 1;
        assert!(matches!(
            check_uncompressed_size(&compressed, payload, limit),
            Err(Error::RecordTooLarge { payload_bytes, limit_bytes })
                if payload_bytes == uncompressed && limit_bytes == limit
        ));
        assert!(check_uncompressed_size(&compressed, payload, uncompressed).is_ok());
        let plain = rec(Body::Delta, &raw);
        let plain_payload = super::super::codec::encode(&plain).unwrap().len();
        assert_eq!(plain_payload as u64, uncompressed);
        assert!(check_uncompressed_size(&plain, plain_payload, limit).is_err());
    }

    #[test]
    fn levels_are_checked_and_a_context_changes_level() {
        assert!(
            validate(Compression::Zstd {
                level: 99,
                deltas: true
            })
            .is_err()
        );
        assert!(validate(ZSTD_1).is_ok());
        let raw = text(4000);
        for level in [1, 3, 1, -1] {
            let c = Compression::Zstd {
                level,
                deltas: true,
            };
            let stored = compress(c, true, &raw);
            assert_eq!(
                &body(&rec(stored.kind, &stored.bytes)).unwrap()[..],
                &raw[..]
            );
        }
    }
}
