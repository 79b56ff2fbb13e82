//! The rules both backends (the local store in `store` and PostgreSQL in `postgres`) obey,
//! as pure functions: argument checks and the tool-call journal's state machine
//! (`journal`), checkpoint body decoding (`body`), and which checkpoints retention serves
//! and a fold starts from (`retention`). A rule changes here, once, and both backends
//! follow: neither keeps a copy of a check, an error message or a decoding.

pub(crate) mod body;
pub(crate) mod journal;
pub(crate) mod retention;

pub(crate) use body::{BodyMeta, DecodedBody, decode_body};
pub(crate) use journal::{now_ms, validate_id};
