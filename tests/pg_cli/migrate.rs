//! `migrate`: retention, a second run, a store that moved on, compressed stores, and the
//! figures of bench-results/postgres-probes.md.

use std::time::Instant;

use agentwal::postgres::Imported;
use agentwal::{AgentDelta, Error, Message, Options, Store};

use crate::common;
use crate::helpers::{
    agentwal, json, make_store, migrate, migrate_json, stderr, step, url, writer,
};

#[test]
fn migrate_with_retention_writes_a_mid_chain_first_checkpoint_as_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path(), 12);
    let d = dir.path().to_str().unwrap();
    let local: Store = Store::open_read_only(dir.path()).unwrap();
    let kinds: Vec<bool> = local
        .list_checkpoints("alpha")
        .unwrap()
        .iter()
        .map(|c| c.snapshot)
        .collect();
    // Keeping 3 of 12 makes seq 10 the first retained one: it must be a delta.
    assert!(!kinds[9], "seq 10 of alpha is a delta: {kinds:?}");
    let schema = common::pg::fresh_schema("cli_keep");
    let report = migrate_json(d, &schema, &["--keep-checkpoints", "3"]);
    assert_eq!(report["verified"], true);
    assert_eq!(report["snapshots_written"][0]["task"], "alpha");
    assert_eq!(report["snapshots_written"][0]["seq"], 10);
    let url = url();
    let history = json(&["history", &url, "alpha", "--schema", &schema]);
    let cps = history["checkpoints"].as_array().unwrap();
    let seqs: Vec<u64> = cps.iter().map(|c| c["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [10, 11, 12]);
    assert_eq!(cps[0]["kind"], "snapshot");
    for seq in ["10", "11", "12"] {
        let pg = json(&["show", &url, "alpha", "--seq", seq, "--schema", &schema]);
        let here = json(&["show", d, "alpha", "--seq", seq]);
        assert_eq!(pg["state"], here["state"], "seq {seq}");
        assert_eq!(pg["created_at_ms"], here["created_at_ms"], "seq {seq}");
    }
    let verify = json(&["verify", &url, "--schema", &schema]);
    assert_eq!(verify["ok"], true);
    // Unretained seqs are not served there.
    let out = agentwal(&["show", &url, "alpha", "--seq", "9", "--schema", &schema]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    // A writer carries on from the copy, with the snapshot policy where it was, and the
    // result still verifies.
    let pg = writer(&schema);
    for i in 13..=17 {
        assert_eq!(pg.commit("alpha", &step(i)).unwrap(), i as u64);
    }
    let state = pg.load_latest("alpha").unwrap().unwrap().state;
    assert_eq!(state.messages.len(), 34);
    assert_eq!(json(&["verify", &url, "--schema", &schema])["ok"], true);
}

#[test]
fn migrate_again_skips_what_is_there_and_refuses_what_differs() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path(), 5);
    let d = dir.path().to_str().unwrap();
    let schema = common::pg::fresh_schema("cli_again");
    // An interrupted run: one task copied, the others not.
    {
        let local: Store = Store::open_read_only(dir.path()).unwrap();
        let pg = writer(&schema);
        let imported = pg.import_task(&local, "beta").unwrap();
        assert!(matches!(imported, Imported::Copied { checkpoints: 1, .. }));
        // A task cannot be imported twice.
        assert!(matches!(
            pg.import_task(&local, "beta"),
            Err(Error::TaskExists { .. })
        ));
    }
    let report = migrate_json(d, &schema, &[]);
    assert_eq!(
        (report["copied"].as_u64(), report["already_there"].as_u64()),
        (Some(3), Some(1))
    );
    assert_eq!(report["verified"], true);
    // Run twice: nothing copied, everything checked.
    let report = migrate_json(d, &schema, &[]);
    assert_eq!(
        (report["copied"].as_u64(), report["already_there"].as_u64()),
        (Some(0), Some(4))
    );
    assert_eq!(report["verified"], true);

    // The local store moved on: its tasks differ from the copies, and nothing is written.
    {
        let store: Store = Store::open(dir.path()).unwrap();
        store.commit("alpha", &step(6)).unwrap();
        store.commit("delta-task", &step(1)).unwrap();
    }
    let out = migrate(d, &schema, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("\"alpha\""), "{}", stderr(&out));
    let pg = writer(&schema);
    assert_eq!(pg.load_latest("alpha").unwrap().unwrap().seq, 5);
    assert!(pg.load_latest("delta-task").unwrap().is_none());
}

/// Figures for bench-results/postgres-probes.md, run by hand: `cargo test --release --features postgres
/// --test pg_cli -- --ignored --nocapture` with a cluster; `AGENTWAL_PG_CLI_TASKS` tasks of
/// `AGENTWAL_PG_CLI_STEPS` commits each (default 50 and 200).
#[test]
#[ignore]
fn migrate_figures() {
    let tasks = common::env::env_u64("AGENTWAL_PG_CLI_TASKS").unwrap_or(50);
    let steps = common::env::env_u64("AGENTWAL_PG_CLI_STEPS").unwrap_or(200) as i64;
    let dir = tempfile::tempdir().unwrap();
    {
        let store: Store = Store::open(dir.path()).unwrap();
        for t in 0..tasks {
            for i in 1..=steps {
                store.commit(&format!("task-{t}"), &step(i)).unwrap();
            }
        }
    }
    let d = dir.path().to_str().unwrap();
    let schema = common::pg::fresh_schema("cli_figures");
    let started = Instant::now();
    let report = migrate_json(d, &schema, &[]);
    let migrate_ms = started.elapsed().as_millis();
    let started = Instant::now();
    let again = migrate_json(d, &schema, &[]);
    let again_ms = started.elapsed().as_millis();
    let started = Instant::now();
    let verify = json(&["verify", &url(), "--schema", &schema]);
    let verify_ms = started.elapsed().as_millis();
    assert_eq!(
        (report["verified"].as_bool(), verify["ok"].as_bool()),
        (Some(true), Some(true))
    );
    println!(
        "{tasks} tasks x {steps} steps: migrate {migrate_ms} ms ({} checkpoints; its own \
         report: {} ms), again {again_ms} ms, verify on PostgreSQL {verify_ms} ms",
        report["checkpoints"], again["elapsed_ms"]
    );
}

/// A local store whose snapshots and deltas are stored compressed migrates
/// with its bodies decompressed: PostgreSQL stores bodies as encoded (docs/postgres.md).
/// Every seq loads the same state on both, both verify, and the bodies PostgreSQL holds
/// are the local bodies uncompressed, byte for byte in total.
#[test]
#[cfg(feature = "zstd")]
fn migrate_decompresses_a_compressed_store() {
    let dir = tempfile::tempdir().unwrap();
    let text = |i: i64| {
        let words = [
            "agent", "searched", "the", "web", "found", "pages", "weather",
        ];
        let n = 150 + (i as usize * 37) % 200;
        (0..n)
            .map(|k| words[(k * 7 + i as usize) % words.len()])
            .collect::<Vec<_>>()
            .join(" ")
    };
    {
        let options = Options {
            snapshot_every: 4,
            // Deltas too (the default compresses snapshots only).
            compression: agentwal::Compression::Zstd {
                level: agentwal::ZSTD_LEVEL_DEFAULT,
                deltas: true,
            },
            ..Options::default()
        };
        let store: Store = Store::open_with(dir.path(), options).unwrap();
        for i in 1..=30 {
            let d = AgentDelta::default().message(Message::tool(format!("c{i}"), text(i)));
            store.commit("alpha", &d).unwrap();
        }
        store.fork("alpha", 10, "beta").unwrap();
    }
    let local: Store = Store::open_read_only(dir.path()).unwrap();
    let here = local.verify().unwrap();
    assert!(here.bodies_compressed >= 30, "{here:?}");
    assert!(here.body_bytes_stored * 2 < here.body_bytes, "{here:?}");
    let schema = common::pg::fresh_schema("cli_zstd");
    let report = migrate_json(dir.path().to_str().unwrap(), &schema, &[]);
    assert_eq!(report["verified"], true);
    let pg = writer(&schema);
    for seq in 1..=30 {
        let a = local.load("alpha", seq).unwrap().unwrap();
        let b = pg.load("alpha", seq).unwrap().unwrap();
        assert_eq!(*a.state, *b.state, "alpha@{seq}");
    }
    assert_eq!(
        *pg.load_latest("beta").unwrap().unwrap().state,
        *local.load_latest("beta").unwrap().unwrap().state
    );
    let there = pg.verify_with(agentwal::BodyCheck::Require).unwrap();
    assert!(there.problems.is_empty(), "{:?}", there.problems);
    assert_eq!(there.checked.body_bytes, here.body_bytes);
    assert_eq!(there.checked.body_bytes_stored, here.body_bytes);
    assert_eq!(there.checked.bodies_compressed, 0);
}
