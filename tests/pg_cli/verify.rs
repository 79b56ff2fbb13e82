//! `verify` on PostgreSQL, and bad addresses.

use std::process::Command;
use std::time::{Duration, Instant};

use agentwal::postgres::{PgOptions, PgStore};
use serde_json::Value as J;

use crate::common;
use crate::helpers::{agentwal, json, make_store, migrate_json, stderr, step, url};

#[test]
fn verify_finds_damaged_rows() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path(), 7);
    let schema = common::pg::fresh_schema("cli_damage");
    migrate_json(dir.path().to_str().unwrap(), &schema, &[]);
    // Remove a checkpoint in the middle of alpha's history, behind agentwal's back.
    let psql = format!(
        "{}/psql",
        std::env::var("AGENTWAL_PG_BIN").expect("AGENTWAL_PG_BIN")
    );
    let sql = format!("DELETE FROM {schema}.checkpoints WHERE task = 'alpha'::bytea AND seq = 5");
    let out = Command::new(psql)
        .args([
            "-h",
            &common::pg::host(),
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-c",
            &sql,
        ])
        .output()
        .expect("run psql");
    assert!(out.status.success(), "{}", stderr(&out));
    let url = url();
    let out = agentwal(&["verify", &url, "--schema", &schema, "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let v: J = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"]["corruption"], true);
    let problems = v["problems"].as_array().unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p.as_str().unwrap().contains("\"alpha\"")),
        "{problems:?}"
    );
}

#[test]
fn bad_addresses_get_clear_errors_and_exit_2() {
    let host = common::pg::host();
    let cases: [(Vec<String>, &str); 5] = [
        (vec!["tasks".into(), "postgres://".into()], "names no host"),
        (
            vec!["tasks".into(), "postgres://u@h:notaport/db".into()],
            "cannot parse",
        ),
        (
            vec![
                "tasks".into(),
                format!("postgres://postgres@/postgres?host={host}"),
                "--schema".into(),
                "bad-name".into(),
            ],
            "schema name",
        ),
        (
            vec![
                "tasks".into(),
                "--pg".into(),
                "x".into(),
                "/some/dir".into(),
            ],
            "give the store once",
        ),
        (
            vec!["migrate".into(), "/some/dir".into()],
            "no database given",
        ),
    ];
    for (args, expected) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = agentwal(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&out).contains(expected),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    }
    // A server that is not there: an error within the deadline, not a hang.
    let gone = tempfile::tempdir().unwrap();
    let url = format!(
        "postgres://postgres@/postgres?host={}",
        gone.path().display()
    );
    let started = Instant::now();
    let out = agentwal(&["tasks", &url, "--deadline-ms", "500"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("deadline"), "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(5));
    // A password never shows in a message.
    let out = agentwal(&["dump", "postgres://me:s3cret@host/db"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!stderr(&out).contains("s3cret"), "{}", stderr(&out));
}

#[test]
fn verify_passes_on_histories_written_on_postgresql() {
    let schema = common::pg::fresh_schema("cli_native");
    let options = PgOptions {
        schema: schema.clone(),
        snapshot_every: 2,
        keep_checkpoints: Some(3),
        ..PgOptions::default()
    };
    let pg: PgStore = PgStore::open(&common::pg::url(), options).unwrap();
    for i in 1..=20 {
        for task in ["a", "b", "c"] {
            pg.commit(task, &step(i)).unwrap();
        }
    }
    pg.fork("a", 19, "a2").unwrap();
    pg.commit("a2", &step(50)).unwrap();
    pg.delete_task("b").unwrap();
    pg.begin_call("c", "k1", "tool", b"x").unwrap();
    pg.finish_call("c", "k1", b"y").unwrap();
    pg.begin_call("d", "k2", "tool", b"x").unwrap();
    let v = json(&["verify", &url(), "--schema", &schema]);
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["tasks"], 4);
    let tasks = json(&["tasks", &url(), "--schema", &schema]);
    let a = &tasks["tasks"][0];
    assert_eq!(
        (a["task"].as_str(), a["checkpoints"].as_u64()),
        (Some("a"), Some(3))
    );
    assert_eq!(tasks["tasks"][1]["forked_from"]["seq"], 19);
}
