//! Model-based property test of the typed `Store`.
//!
//! Random sequences of operations run against a real store and against a plain in-memory
//! model: per task, the state after each seq, the fork origin and the tool calls in the
//! order they began. After every operation the store's answer must equal the model's: the
//! same `Ok` value, or an error of the same variant with the same fields. The store uses
//! 4 KiB segments and a snapshot every 1 to 5 commits, and large tool-call arguments fill
//! segments, so loads fold snapshots and deltas and many cases rotate segments.
//!
//! `Reopen` drops the store and opens it again, either cleanly or after cutting the
//! newest segment file inside its last record (truncating the file or zeroing the tail).
//! A single-threaded writer puts each record in a batch of its own and the last record is
//! always in the newest segment, so that cut must lose exactly the last record: the model
//! rolls back to its state before that record, and the recovery report must count the
//! surviving records and the torn bytes exactly. `Compact` forces a compaction pass, which
//! must change no answer but the journal's retention (below) and leaves every earlier
//! record durable (no later cut may lose one); the model tracks which task incarnation each record belongs to, so record counts
//! stay exact across compactions too (background compaction is off, as its timing would
//! make them unknowable). Every reopen, compaction and read-only view is
//! followed by a sweep comparing every task, seq and call with the model.
//!
//! Retention: cases run with `keep_checkpoints` of 1 to 4 or `None`, and `Reopen` may
//! change it, as may a read-only view. The store must serve exactly the last `keep` seqs
//! of a task (the latest always): `list_checkpoints` lists only those, `load` of an older
//! seq is `Ok(None)` (seq 0 or past the latest is still `UnknownSeq`),
//! `load_latest_matching` looks only at those, and `fork` from an older one is
//! `InvalidArgument`. Compaction forgets, and drops from sealed segments, each task's
//! checkpoints before the fold base (the snapshot) of its oldest retained seq; what the
//! model knows of the log (which incarnation and seq each record holds, and which
//! checkpoints are snapshots, as the store reported when writing them) tells which
//! records survive, so record counts stay exact. With `keep` set, a pass also prunes each
//! finished call whose finish record lies before its task's oldest retained checkpoint:
//! from then on its result is `None`, it is listed nowhere, and writes of its id are
//! `InvalidArgument`. Its two records leave the log, and its id is free again, once both
//! are sealed and share one segment (the model reads which segment holds each record
//! before every pass); a reopen serves the calls still on disk again. `compact` seals the
//! active segment first, so a pass covers every record; a background pass leaves the
//! active segment alone, so a reopened store can hold a task's history from a delta in
//! the middle of a chain ("headless", `max_age_retention_across_compaction_and_reopen`);
//! a larger `keep` then still serves only from its first snapshot on. As
//! long as no compaction ran with a smaller `keep`, the model also checks the plain
//! promise (exactly the last `keep`) independently of that bookkeeping. `max_age` depends
//! on the clock, so a plain test covers it instead.
//!
//! `async_store_matches_model` (cargo feature `tokio`) runs the same operations through
//! the async API, which must give the same answers.
//!
//! The default case counts keep the file under ~30 s in a debug build; `PROPTEST_CASES`
//! overrides them. Failures are not persisted to files: a failing sequence found here
//! becomes a plain `#[test]` at the bottom of this file.

#[path = "../common/mod.rs"]
mod common;

use agentwal::SyncMode;
use proptest::prelude::*;
use proptest::sample::select;

mod checks;
mod generators;
mod harness;
mod model;
mod ops;
mod regressions;
mod segments;

use generators::{config, keep, op, options, retention_op};
use harness::Harness;

proptest! {
    #![proptest_config(config(256))]

    /// Most cases: no fsyncs, so many long sequences run quickly. A clean drop keeps every
    /// write (it reached the OS), and a cut still loses exactly the last record.
    #[test]
    fn store_matches_model(
        snapshot_every in select(vec![1u32, 2, 3, 5]),
        keep in keep(),
        // Off, a budget that holds a state or two (evictions), and the default.
        cache_bytes in select(vec![0u64, 400, agentwal::CACHE_BYTES_DEFAULT]),
        ops in prop::collection::vec(op(), 1..100),
    ) {
        Harness::new(options(SyncMode::Never, snapshot_every, keep, cache_bytes)).run(&ops);
    }
}

proptest! {
    #![proptest_config(config(32))]

    /// Durable commits: every acknowledged record survives, a cut loses only the last.
    #[test]
    fn store_matches_model_sync_always(
        keep in keep(),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let cache_bytes = agentwal::CACHE_BYTES_DEFAULT;
        Harness::new(options(SyncMode::Always, 3, keep, cache_bytes)).run(&ops);
    }
}

proptest! {
    #![proptest_config(config(64))]

    /// Retention across compactions and reopens, with `keep_checkpoints` changing.
    #[test]
    fn store_matches_model_retention(
        snapshot_every in select(vec![2u32, 3, 5]),
        keep in keep(),
        ops in prop::collection::vec(retention_op(), 1..150),
    ) {
        let cache_bytes = agentwal::CACHE_BYTES_DEFAULT;
        Harness::new(options(SyncMode::Never, snapshot_every, keep, cache_bytes)).run(&ops);
    }
}

#[cfg(feature = "tokio")]
proptest! {
    #![proptest_config(config(64))]

    /// The async API (`AsyncStore`) against the same model: its writes are deferred to
    /// the group commit's completions, its loads answered from the cache or on the
    /// blocking pool, and every answer must still be the model's.
    #[test]
    fn async_store_matches_model(
        sync in select(vec![SyncMode::Never, SyncMode::Always]),
        snapshot_every in select(vec![1u32, 3]),
        keep in keep(),
        cache_bytes in select(vec![0u64, agentwal::CACHE_BYTES_DEFAULT]),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        Harness::new(options(sync, snapshot_every, keep, cache_bytes)).via_async().run(&ops);
    }
}
