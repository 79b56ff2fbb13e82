//! A read-only handle serves the view it opened, for as long as it lives, while a writer
//! appends, rotates, compacts, deletes and forks beside it (docs/log.md §3.4): every read
//! returns the record it was indexed at, or an error, never another record's data.
//!
//! The stress tests run for `AGENTWAL_RO_STRESS_SECS` seconds (default 3 each; CI uses the
//! default, `scripts/torture.sh` a longer run).

#[path = "../common/mod.rs"]
mod common;

use agentwal::{Options, Store};
use common::env::env_u64;
use common::states::Padded;

mod acknowledged;
mod long_lived;
mod mapped;

/// A state of fixed size: records of different seqs are the same size, so a stale offset
/// lands exactly on another record.
fn padded(n: u64) -> Padded {
    Padded {
        n,
        pad: vec![7u8; 300],
    }
}

fn small_segments() -> Options {
    Options {
        segment_bytes: 4096,
        snapshot_every: 1,
        auto_compact: false,
        ..Options::default()
    }
}

fn stress_secs() -> u64 {
    env_u64("AGENTWAL_RO_STRESS_SECS").unwrap_or(3)
}

#[test]
fn checkpoints_read_after_a_compaction_are_the_ones_indexed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let writer: Store<Padded> = Store::open_with(dir.path(), small_segments()).expect("open");
    for n in 1..=120 {
        assert_eq!(writer.commit("t", &padded(n)).expect("commit"), n);
    }
    let reader: Store<Padded> = Store::open_read_only(dir.path()).expect("open read-only");
    // Deleting the task makes every segment dead: compaction rewrites and deletes them.
    writer.delete_task("t").expect("delete");
    writer.commit("u", &padded(0)).expect("commit");
    writer.compact().expect("compact");
    for n in 1..=120 {
        let loaded = reader.load("t", n).expect("a pinned view always reads");
        let state = loaded.expect("checkpoint in the view").state;
        assert_eq!(state.n, n, "load(t, {n}) returned another record's state");
    }
}

#[test]
fn checkpoints_read_after_retention_compaction_are_the_ones_indexed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options {
        keep_checkpoints: Some(2),
        ..small_segments()
    };
    let writer: Store<Padded> = Store::open_with(dir.path(), options).expect("open");
    for n in 1..=120 {
        writer.commit("t", &padded(n)).expect("commit");
    }
    let reader: Store<Padded> = Store::open_read_only(dir.path()).expect("open read-only");
    writer.compact().expect("compact");
    for n in 1..=120 {
        match reader.load("t", n).expect("a pinned view always reads") {
            Some(c) => assert_eq!(c.state.n, n, "load(t, {n}) returned another state"),
            None => assert!(n < 119, "retained checkpoint {n} missing"),
        }
    }
    let latest = reader.load_latest("t").expect("load").expect("latest");
    assert_eq!(latest.state.n, 120);
}

#[test]
fn call_results_read_after_a_compaction_are_the_ones_indexed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let writer: Store<Padded> = Store::open_with(dir.path(), small_segments()).expect("open");
    writer.commit("t", &padded(1)).expect("commit");
    for i in 100..=300 {
        let id = format!("call-{i}");
        writer.begin_call("t", &id, "tool", b"args").expect("begin");
        writer
            .finish_call("t", &id, format!("result-{i}").as_bytes())
            .expect("finish");
    }
    let reader: Store<Padded> = Store::open_read_only(dir.path()).expect("open read-only");
    writer.delete_task("t").expect("delete");
    writer.commit("u", &padded(0)).expect("commit");
    writer.compact().expect("compact");
    for i in 100..=300 {
        let id = format!("call-{i}");
        let result = reader
            .call_result("t", &id)
            .expect("a pinned view always reads");
        assert_eq!(
            result.as_deref(),
            Some(format!("result-{i}").as_bytes()),
            "call_result(t, {id}) returned another call's result"
        );
    }
}
