//! Checkpoint body compression (`Options::compression`, docs/format.md §8): compressed
//! snapshots and deltas round-trip through commit, load, fork, compaction and reopen, and
//! the async path; stores written uncompressed (format version 1) and compressed mix; the
//! snapshot policy and the size limit do not move with compression; a body compression
//! would not shrink is stored as encoded; a compressed record made by hand from the bytes
//! docs/format.md documents loads, and damaged ones are errors (never a panic, never a state).

#[path = "../common/mod.rs"]
mod common;

mod compaction;
mod format;
mod helpers;
mod policy;
mod round_trips;
