//! Decoding a checkpoint's body (the encoded state or delta it carries) as the program's
//! state type: a snapshot or a delta, written under this schema version or an older one
//! (then through `State::migrate_state` / `State::migrate_delta`, docs/store.md §6).

use std::path::Path;

use crate::error::{BodyLocation, Error, Result};
use crate::state::State;

/// A checkpoint's decoded body.
pub(crate) enum DecodedBody<S: State> {
    /// A whole state.
    Snapshot(S),
    /// A change to the state of the checkpoint before.
    Delta(S::Delta),
}

impl<S: State> DecodedBody<S> {
    /// Folds this body into `state`: a snapshot replaces it, a delta applies to it.
    pub(crate) fn fold_into(self, state: &mut S) {
        match self {
            DecodedBody::Snapshot(s) => *state = s,
            DecodedBody::Delta(d) => state.apply_owned(d),
        }
    }
}

/// Where a body is stored, borrowed (an error names it; see [`BodyLocation`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum At<'a> {
    /// A record of the local log: its segment file and offset.
    Log(&'a Path, u64),
    /// The PostgreSQL backend's `checkpoints` row of the task and seq.
    #[cfg(feature = "postgres")]
    Postgres,
}

impl At<'_> {
    fn owned(self) -> BodyLocation {
        match self {
            At::Log(segment, offset) => BodyLocation::Log {
                segment: segment.to_path_buf(),
                offset,
            },
            #[cfg(feature = "postgres")]
            At::Postgres => BodyLocation::Postgres,
        }
    }
}

/// What a backend stores beside a body, and where.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyMeta<'a> {
    pub task: &'a str,
    pub seq: u64,
    pub schema_version: u32,
    pub snapshot: bool,
    pub at: At<'a>,
}

/// Decodes `body` (as encoded: decompressed already) as `S` or `S::Delta`, migrating data
/// written under another schema version. A body that does not decode is
/// [`Error::BodyDecode`] on every backend: its record or row checked out, so it is not
/// damage but most likely another state type's.
pub(crate) fn decode_body<S: State>(meta: &BodyMeta<'_>, body: &[u8]) -> Result<DecodedBody<S>> {
    let bad = |e: postcard::Error| Error::BodyDecode {
        location: meta.at.owned(),
        task: meta.task.to_string(),
        seq: meta.seq,
        schema_version: meta.schema_version,
        reason: e.to_string(),
    };
    let version = meta.schema_version;
    Ok(match (meta.snapshot, version == S::VERSION) {
        (true, true) => DecodedBody::Snapshot(postcard::from_bytes(body).map_err(bad)?),
        (true, false) => DecodedBody::Snapshot(S::migrate_state(version, body)?),
        (false, true) => DecodedBody::Delta(postcard::from_bytes(body).map_err(bad)?),
        (false, false) => DecodedBody::Delta(S::migrate_delta(version, body)?),
    })
}
