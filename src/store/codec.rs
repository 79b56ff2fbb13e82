//! The typed records the store writes into the log (postcard-encoded payloads).
//! Their field order is part of the on-disk format (docs/format.md §8).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::log::RecordRef;

/// Log kind of a checkpoint (a delta or a full snapshot).
pub(crate) const KIND_CHECKPOINT: u8 = 1;
/// Log kind of a tool call's durable intent.
pub(crate) const KIND_CALL_BEGIN: u8 = 2;
/// Log kind of a tool call's durable result.
pub(crate) const KIND_CALL_FINISH: u8 = 3;
/// Log kind of a task deletion.
pub(crate) const KIND_DELETE: u8 = 4;

/// Whether a checkpoint's body is a delta or the whole state, and how it is stored. The
/// variant index is the format (docs/format.md §8): 0 and 1 are format version 1's, bodies
/// as encoded; 2 and 3 hold one zstd frame of the encoded body, whose length uncompressed
/// follows the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Body {
    /// `S::Delta`, folded onto the previous checkpoint's state.
    Delta,
    /// `S`, the whole state at this seq.
    Snapshot,
    /// A `Delta` body compressed: one zstd frame of `raw_len` bytes decompressed.
    DeltaZstd {
        /// Bytes of the body decompressed (the encoded `S::Delta`).
        raw_len: u32,
    },
    /// A `Snapshot` body compressed: one zstd frame of `raw_len` bytes decompressed.
    SnapshotZstd {
        /// Bytes of the body decompressed (the encoded `S`).
        raw_len: u32,
    },
}

impl Body {
    /// The tag of a body that is a snapshot (else a delta), compressed with zstd from
    /// `raw_len` bytes or, with `None`, stored as encoded.
    pub fn new(snapshot: bool, zstd_raw_len: Option<u32>) -> Body {
        match (snapshot, zstd_raw_len) {
            (false, None) => Body::Delta,
            (true, None) => Body::Snapshot,
            (false, Some(raw_len)) => Body::DeltaZstd { raw_len },
            (true, Some(raw_len)) => Body::SnapshotZstd { raw_len },
        }
    }

    /// Whether the body is a whole state (else a delta), however it is stored.
    pub fn is_snapshot(self) -> bool {
        matches!(self, Body::Snapshot | Body::SnapshotZstd { .. })
    }

    /// The body's length decompressed, if it is a zstd frame.
    pub fn zstd_raw_len(self) -> Option<u32> {
        match self {
            Body::Delta | Body::Snapshot => None,
            Body::DeltaZstd { raw_len } | Body::SnapshotZstd { raw_len } => Some(raw_len),
        }
    }

    /// The codec's name, as tools show it: "raw" (as encoded) or "zstd".
    pub fn codec_name(self) -> &'static str {
        if self.zstd_raw_len().is_some() {
            "zstd"
        } else {
            "raw"
        }
    }

    /// "snapshot" or "delta".
    pub fn kind_name(self) -> &'static str {
        if self.is_snapshot() {
            "snapshot"
        } else {
            "delta"
        }
    }
}

/// Where a forked task came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Origin<'a> {
    pub task: &'a str,
    pub seq: u64,
}

/// One checkpoint of one task.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CheckpointRec<'a> {
    pub task: &'a str,
    pub seq: u64,
    pub created_at_ms: u64,
    pub schema_version: u32,
    pub body_kind: Body,
    #[serde(borrow)]
    pub origin: Option<Origin<'a>>,
    // As one byte string (same postcard bytes as a sequence of u8, encoded in one copy).
    #[serde(with = "serde_bytes")]
    pub body: &'a [u8],
}

/// A tool call about to run.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CallBeginRec<'a> {
    pub task: &'a str,
    pub call_id: &'a str,
    pub tool: &'a str,
    pub created_at_ms: u64,
    // As one byte string (same postcard bytes as a sequence of u8, encoded in one copy).
    #[serde(with = "serde_bytes")]
    pub args: &'a [u8],
}

/// A tool call's result.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CallFinishRec<'a> {
    pub task: &'a str,
    pub call_id: &'a str,
    pub created_at_ms: u64,
    // As one byte string (same postcard bytes as a sequence of u8, encoded in one copy).
    #[serde(with = "serde_bytes")]
    pub result: &'a [u8],
}

/// A task deleted.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct DeleteRec<'a> {
    pub task: &'a str,
    pub created_at_ms: u64,
}

/// Any store record, decoded without copying.
#[derive(Debug)]
pub(crate) enum Decoded<'a> {
    Checkpoint(CheckpointRec<'a>),
    CallBegin(CallBeginRec<'a>),
    CallFinish(CallFinishRec<'a>),
    Delete(DeleteRec<'a>),
}

impl<'a> Decoded<'a> {
    /// The task the record belongs to.
    pub fn task(&self) -> &'a str {
        match self {
            Decoded::Checkpoint(r) => r.task,
            Decoded::CallBegin(r) => r.task,
            Decoded::CallFinish(r) => r.task,
            Decoded::Delete(r) => r.task,
        }
    }
}

impl CheckpointRec<'_> {
    /// Bytes of the body uncompressed: the encoded state or delta.
    pub fn raw_body_bytes(&self) -> u64 {
        self.body_kind
            .zstd_raw_len()
            .map_or(self.body.len() as u64, u64::from)
    }

    /// What this record's payload (or the whole record), `stored_bytes` long as written,
    /// would take with its body uncompressed: the size the snapshot policy, the
    /// latest-state cache and the record size limit count, so that compression moves none
    /// of them. Exact: the tag of a compressed body holds its length decompressed (the
    /// varint a raw body's length takes) and its length prefix is the compressed length's.
    pub fn uncompressed_bytes(&self, stored_bytes: u64) -> u64 {
        match self.body_kind.zstd_raw_len() {
            None => stored_bytes,
            Some(raw_len) => {
                let stored_body = self.body.len() as u64 + varint_bytes(self.body.len() as u64);
                (stored_bytes + u64::from(raw_len)).saturating_sub(stored_body)
            }
        }
    }
}

/// Bytes of `n` as a postcard varint.
pub(crate) fn varint_bytes(n: u64) -> u64 {
    u64::from((64 - n.leading_zeros()).max(1).div_ceil(7))
}

/// The leading fields of a checkpoint record, decodable even when the body is damaged
/// (salvage uses it to say which checkpoint a corrupt record held).
#[derive(Debug, Deserialize)]
pub(crate) struct CheckpointHead<'a> {
    pub task: &'a str,
    pub seq: u64,
}

/// Decodes a store record read from the log.
pub(crate) fn decode<'a>(rec: &RecordRef<'a>) -> Result<Decoded<'a>> {
    decode_payload(rec.kind, rec.payload).map_err(|reason| decode_error(rec, reason))
}

/// Decodes a store record's payload of `kind`; the error says why it does not decode.
pub(crate) fn decode_payload(kind: u8, p: &[u8]) -> std::result::Result<Decoded<'_>, String> {
    let decoded = match kind {
        KIND_CHECKPOINT => postcard::from_bytes(p).map(Decoded::Checkpoint),
        KIND_CALL_BEGIN => postcard::from_bytes(p).map(Decoded::CallBegin),
        KIND_CALL_FINISH => postcard::from_bytes(p).map(Decoded::CallFinish),
        KIND_DELETE => postcard::from_bytes(p).map(Decoded::Delete),
        other => return Err(format!("unknown store record kind {other}")),
    };
    decoded.map_err(|e| e.to_string())
}

/// Encodes a record payload.
pub(crate) fn encode<T: Serialize + ?Sized>(rec: &T) -> Result<Vec<u8>> {
    encode_into(rec, Vec::new())
}

/// Encodes `rec` into a buffer of `capacity` bytes to start with (an estimate of its
/// encoded size: a good one saves the copies of growing the buffer).
pub(crate) fn encode_with_capacity<T: Serialize>(rec: &T, capacity: usize) -> Result<Vec<u8>> {
    encode_into(rec, Vec::with_capacity(capacity))
}

/// Encodes `rec`, appending to `buf` (its capacity is used before the buffer grows).
fn encode_into<T: Serialize + ?Sized>(rec: &T, buf: Vec<u8>) -> Result<Vec<u8>> {
    postcard::serialize_with_flavor(rec, VecFlavor(buf))
        .map_err(|e| Error::InvalidArgument(format!("cannot encode record: {e}")))
}

/// Postcard's output into a `Vec` it appends to, byte strings copied whole
/// (`extend_from_slice`; `postcard::to_extend` extends from a byte iterator, which costs
/// more per byte on a commit's kilobytes of text).
struct VecFlavor(Vec<u8>);

impl postcard::ser_flavors::Flavor for VecFlavor {
    type Output = Vec<u8>;

    #[inline(always)]
    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.push(data);
        Ok(())
    }

    #[inline(always)]
    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(data);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<Vec<u8>> {
        Ok(self.0)
    }
}

/// Bytes a checkpoint record's payload may take beyond its task id, origin task id and
/// body: the varints (lengths, seqs, time, schema version) and the enum tags.
pub(crate) const CHECKPOINT_FIXED_BYTES_MAX: usize = 64;
/// Slack a snapshot keeps below the log's payload limit beyond its own fields, so that a
/// state near the limit is left to deltas rather than refused as a record that is too large.
pub(crate) const SNAPSHOT_MARGIN_BYTES: u64 = 40;

/// Encodes a checkpoint record into a buffer sized for it up front: a snapshot body can be
/// megabytes, and growing a buffer by doubling would copy it about twice more.
pub(crate) fn encode_checkpoint(rec: &CheckpointRec<'_>) -> Result<Vec<u8>> {
    encode_into(rec, Vec::with_capacity(checkpoint_estimate(rec)))
}

/// At least the bytes a checkpoint record's payload takes.
fn checkpoint_estimate(rec: &CheckpointRec<'_>) -> usize {
    let origin = rec.origin.as_ref().map_or(0, |o| o.task.len());
    rec.task.len() + origin + rec.body.len() + CHECKPOINT_FIXED_BYTES_MAX
}

/// Largest buffer a thread keeps for [`with_encoded`]; a larger one is freed after use.
const SCRATCH_BYTES_MAX: usize = 64 << 10;

thread_local! {
    /// Reused by [`with_encoded`], so that encoding a delta allocates nothing once warm.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Reused by [`with_checkpoint_encoded`] (a blocking commit encodes its delta into
    /// `SCRATCH`, then the record around it into this one).
    static RECORD_SCRATCH: std::cell::RefCell<Vec<u8>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Encodes a checkpoint record into this thread's record scratch buffer (sized for it up
/// front, as [`encode_checkpoint`]) and runs `f` on the bytes; a fresh buffer if the
/// scratch one is in use.
pub(crate) fn with_checkpoint_encoded<R>(
    rec: &CheckpointRec<'_>,
    f: impl FnOnce(&[u8]) -> Result<R>,
) -> Result<R> {
    RECORD_SCRATCH.with(|scratch| {
        let Ok(mut buf) = scratch.try_borrow_mut() else {
            return f(&encode_checkpoint(rec)?);
        };
        buf.clear();
        buf.reserve(checkpoint_estimate(rec));
        *buf = encode_into(rec, std::mem::take(&mut *buf))?;
        let out = f(&buf);
        if buf.capacity() > SCRATCH_BYTES_MAX {
            *buf = Vec::new();
        }
        out
    })
}

/// Encodes `value` into this thread's scratch buffer and runs `f` on it and the bytes
/// (`value` is handed on, so an owned value can move on after being encoded). Falls back
/// to a fresh buffer if the scratch one is in use (`f` encoding again on this thread).
pub(crate) fn with_encoded<V, R>(value: V, f: impl FnOnce(V, &[u8]) -> Result<R>) -> Result<R>
where
    V: std::ops::Deref,
    V::Target: Serialize,
{
    SCRATCH.with(|scratch| {
        let Ok(mut buf) = scratch.try_borrow_mut() else {
            let bytes = encode(&*value)?;
            return f(value, &bytes);
        };
        buf.clear();
        *buf = encode_into(&*value, std::mem::take(&mut *buf))?;
        let out = f(value, &buf);
        if buf.capacity() > SCRATCH_BYTES_MAX {
            *buf = Vec::new();
        }
        out
    })
}

/// An undecodable payload at `rec`'s position.
pub(crate) fn decode_error(rec: &RecordRef<'_>, reason: String) -> Error {
    Error::Decode {
        segment: rec.segment.to_path_buf(),
        offset: rec.offset,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_fields_keep_the_postcard_bytes_of_a_u8_sequence() {
        // serde_bytes only speeds encoding up: the bytes on disk are those of the format.
        #[derive(Serialize)]
        struct AsSeq<'a> {
            task: &'a str,
            body: Vec<u8>,
        }
        #[derive(Serialize)]
        struct AsBytes<'a> {
            task: &'a str,
            #[serde(with = "serde_bytes")]
            body: &'a [u8],
        }
        let body: Vec<u8> = (0..300u16).map(|i| (i % 251) as u8).collect();
        let seq = postcard::to_allocvec(&AsSeq {
            task: "t",
            body: body.clone(),
        })
        .unwrap();
        let bytes = postcard::to_allocvec(&AsBytes {
            task: "t",
            body: &body,
        })
        .unwrap();
        assert_eq!(seq, bytes);
    }

    #[test]
    fn checkpoint_round_trip() {
        let rec = CheckpointRec {
            task: "t",
            seq: 3,
            created_at_ms: 9,
            schema_version: 1,
            body_kind: Body::Snapshot,
            origin: Some(Origin { task: "s", seq: 2 }),
            body: b"abc",
        };
        let bytes = encode(&rec).unwrap();
        let back: CheckpointRec<'_> = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(
            (back.task, back.seq, back.body, back.origin),
            ("t", 3, &b"abc"[..], rec.origin)
        );
    }

    #[test]
    fn encoding_appends_the_bytes_postcard_itself_writes() {
        let delta = crate::AgentDelta::default()
            .message(crate::Message::assistant("é".repeat(300)).with_tool_call("c", "t", 7))
            .set("phase", "plan")
            .set("n", 1_i64 << 40);
        let rec = CheckpointRec {
            task: "task",
            seq: 1 << 20,
            created_at_ms: u64::MAX,
            schema_version: 2,
            body_kind: Body::Delta,
            origin: None,
            body: &postcard::to_allocvec(&delta).unwrap(),
        };
        let mut expected = b"prefix".to_vec();
        expected.extend(postcard::to_allocvec(&rec).unwrap());
        assert_eq!(encode_into(&rec, b"prefix".to_vec()).unwrap(), expected);
        assert_eq!(
            encode(&delta).unwrap(),
            postcard::to_allocvec(&delta).unwrap()
        );
    }
}
