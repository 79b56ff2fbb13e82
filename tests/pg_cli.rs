//! The `agentwal` binary on PostgreSQL: the read commands on a URL against the local store
//! it was migrated from, `migrate` (forks, retention with a mid-chain first checkpoint,
//! pending and finished calls, a second run, an interrupted one, a conflict), read-only
//! handles that cannot write, damage found by `verify`, and bad addresses.
#![cfg(feature = "postgres")]

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use agentwal::postgres::{Imported, PgOptions, PgStore};
use agentwal::{AgentDelta, AgentState, Error, Message, Options, Store};
use serde_json::Value as J;

fn agentwal(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentwal"))
        .args(args)
        .output()
        .expect("run agentwal")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The command's JSON; it must exit 0.
fn json(args: &[&str]) -> J {
    let mut all = args.to_vec();
    all.push("--json");
    let out = agentwal(&all);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

/// The test server as a URL over its unix socket.
fn url() -> String {
    format!("postgres://postgres@/postgres?host={}", common::pg::host())
}

/// `v` without its `bytes` fields: sizes differ by design (a local record counts its
/// header, docs/postgres.md).
fn sans_bytes(v: &J) -> J {
    match v {
        J::Object(m) => J::Object(
            m.iter()
                .filter(|(k, _)| k.as_str() != "bytes")
                .map(|(k, v)| (k.clone(), sans_bytes(v)))
                .collect(),
        ),
        J::Array(a) => J::Array(a.iter().map(sans_bytes).collect()),
        other => other.clone(),
    }
}

fn step(i: i64) -> AgentDelta {
    AgentDelta::default()
        .message(Message::assistant(format!("step {i}")).with_tool_call(
            format!("c{i}"),
            "lookup",
            i,
        ))
        .message(Message::tool(format!("c{i}"), "found"))
        .set("step", i)
}

/// A store with snapshots and deltas, a fork, a task of calls only, and pending and
/// finished calls.
fn make_store(dir: &Path, commits: i64) {
    let options = Options {
        snapshot_every: 3,
        ..Options::default()
    };
    let store: Store = Store::open_with(dir, options).unwrap();
    for i in 1..=commits {
        store.commit("alpha", &step(i)).unwrap();
    }
    store
        .commit("beta", &AgentDelta::default().message(Message::user("hi")))
        .unwrap();
    store.fork("alpha", 4, "alpha-branch").unwrap();
    store.commit("alpha-branch", &step(100)).unwrap();
    store
        .begin_call("alpha", "c8", "send_email", b"to=bob")
        .unwrap();
    store.begin_call("alpha", "c9", "charge", b"42").unwrap();
    store.finish_call("alpha", "c9", b"charged").unwrap();
    store
        .begin_call("gamma", "g1", "search", b"\xff\x00")
        .unwrap();
    store.finish_call("gamma", "g1", b"\x00\x01").unwrap();
    store.begin_call("gamma", "g2", "search", b"q").unwrap();
}

fn migrate(dir: &str, schema: &str, extra: &[&str]) -> Output {
    let url = url();
    let mut args = vec!["migrate", dir, url.as_str(), "--schema", schema];
    args.extend_from_slice(extra);
    agentwal(&args)
}

fn migrate_json(dir: &str, schema: &str, extra: &[&str]) -> J {
    let mut all = extra.to_vec();
    all.push("--json");
    let out = migrate(dir, schema, &all);
    assert!(out.status.success(), "migrate: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

fn writer(schema: &str) -> PgStore {
    let options = PgOptions {
        schema: schema.to_string(),
        ..PgOptions::default()
    };
    PgStore::open(&common::pg::url(), options).unwrap()
}

#[test]
fn read_commands_on_a_url_answer_as_on_the_store_it_was_migrated_from() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path(), 7);
    let d = dir.path().to_str().unwrap();
    let schema = common::pg::fresh_schema("cli_same");
    let report = migrate_json(d, &schema, &[]);
    assert_eq!(report["tasks"], 4);
    assert_eq!(report["copied"], 4);
    assert_eq!(report["checkpoints"], 7 + 1 + 2);
    assert_eq!(report["calls"], 4);
    assert_eq!(report["verified"], true);
    let url = url();
    // A URL as STORE, or --pg with libpq words: the same answers.
    let pg_words = common::pg::url();
    let on_pg = |args: &[&str]| {
        let mut a = args.to_vec();
        a.splice(1..1, [url.as_str()]);
        a.extend(["--schema", schema.as_str()]);
        let by_url = json(&a);
        let mut b = args.to_vec();
        b.extend(["--pg", pg_words.as_str(), "--schema", schema.as_str()]);
        assert_eq!(json(&b), by_url, "{args:?} by --pg");
        by_url
    };
    let local = |args: &[&str]| {
        let mut a = args.to_vec();
        a.insert(1, d);
        json(&a)
    };

    let tasks = local(&["tasks"]);
    assert_eq!(sans_bytes(&on_pg(&["tasks"])), sans_bytes(&tasks));
    assert_eq!(tasks["tasks"].as_array().unwrap().len(), 4);
    for task in ["alpha", "alpha-branch", "beta", "gamma"] {
        let history = local(&["history", task]);
        assert_eq!(sans_bytes(&on_pg(&["history", task])), sans_bytes(&history));
        // Bodies are copied byte for byte, so even which checkpoints are snapshots agrees.
        for cp in history["checkpoints"].as_array().unwrap() {
            let seq = cp["seq"].to_string();
            let args = ["show", task, "--seq", seq.as_str()];
            assert_eq!(sans_bytes(&on_pg(&args)), sans_bytes(&local(&args)));
        }
        assert_eq!(on_pg(&["calls", task]), local(&["calls", task]));
    }
    assert_eq!(
        sans_bytes(&on_pg(&["show", "alpha"])),
        sans_bytes(&local(&["show", "alpha"]))
    );
    assert_eq!(
        on_pg(&["history", "alpha-branch"])["checkpoints"][0]["forked_from"]["task"],
        "alpha"
    );
    let calls = on_pg(&["calls", "alpha"]);
    assert_eq!(calls["calls"][0]["status"], "pending");
    assert_eq!(calls["calls"][1]["result"], "charged");

    let (v_pg, v_local) = (on_pg(&["verify"]), local(&["verify"]));
    for key in [
        "ok",
        "tasks",
        "checkpoints",
        "calls",
        "bodies_decoded",
        "error",
    ] {
        assert_eq!(v_pg[key], v_local[key], "verify {key}");
    }
    assert_eq!(v_pg["problems"], J::Array(vec![]));
    let (s_pg, s_local) = (on_pg(&["stats"]), local(&["stats"]));
    for key in ["tasks", "checkpoints", "snapshots", "deltas"] {
        assert_eq!(s_pg[key], s_local[key], "stats {key}");
    }
    assert!(s_pg["disk_bytes"].as_u64().unwrap() > 0);
    let biggest = |s: &J| {
        let mut v: Vec<(String, u64)> = s["biggest_tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["task"].as_str().unwrap().into(),
                    t["latest_seq"].as_u64().unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(biggest(&s_pg), biggest(&s_local));

    // The text forms work too, and `dump` and `compact` say they are for directories.
    for args in [
        vec!["tasks"],
        vec!["history", "alpha"],
        vec!["verify"],
        vec!["stats"],
    ] {
        let mut a = args.clone();
        a.insert(1, url.as_str());
        a.extend(["--schema", schema.as_str()]);
        let out = agentwal(&a);
        assert!(out.status.success(), "{a:?}: {}", stderr(&out));
    }
    for cmd in ["dump", "compact"] {
        let out = agentwal(&[cmd, url.as_str()]);
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        assert!(
            stderr(&out).contains("store directory only"),
            "{}",
            stderr(&out)
        );
    }
}

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

#[test]
fn read_only_handles_and_read_commands_never_write() {
    let schema = common::pg::fresh_schema("cli_ro");
    let options = PgOptions {
        schema: schema.clone(),
        ..PgOptions::default()
    };
    // An unmigrated schema: a clear error, and nothing is created (a second open fails alike).
    for _ in 0..2 {
        let err =
            PgStore::<AgentState>::open_read_only(&common::pg::url(), options.clone()).unwrap_err();
        assert!(err.to_string().contains("no agentwal tables"), "{err}");
    }
    let out = agentwal(&["tasks", &url(), "--schema", &schema]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no agentwal tables"),
        "{}",
        stderr(&out)
    );

    let w = writer(&schema);
    w.commit("t", &step(1)).unwrap();
    w.begin_call("t", "c", "tool", b"a").unwrap();
    let ro = PgStore::<AgentState>::open_read_only(&common::pg::url(), options).unwrap();
    assert!(ro.is_read_only());
    let read_only = |r: agentwal::Result<()>| matches!(r, Err(Error::ReadOnly));
    assert!(read_only(ro.commit("t", &step(2)).map(drop)));
    assert!(read_only(ro.commit_if("t", 1, &step(2)).map(drop)));
    assert!(read_only(ro.fork("t", 1, "u").map(drop)));
    assert!(read_only(ro.delete_task("t")));
    assert!(read_only(ro.begin_call("t", "d", "tool", b"")));
    assert!(read_only(ro.finish_call("t", "c", b"r")));
    assert!(read_only(
        ro.acquire("t", "me", Duration::from_secs(5)).map(drop)
    ));
    assert!(read_only(ro.resolve("0123").map(drop)));
    let t = w.import_task(
        &Store::open_read_only(tempdir_with_task().path()).unwrap(),
        "x",
    );
    assert!(t.is_ok());
    assert!(read_only(
        ro.import_task(
            &Store::open_read_only(tempdir_with_task().path()).unwrap(),
            "y"
        )
        .map(drop)
    ));
    // Reads work, and saw nothing change.
    assert_eq!(ro.load_latest("t").unwrap().unwrap().seq, 1);
    assert_eq!(ro.pending_calls("t").unwrap().len(), 1);
    assert_eq!(ro.tasks().unwrap(), ["t", "x"]);
}

/// A store holding tasks "x" and "y".
fn tempdir_with_task() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open(dir.path()).unwrap();
    store.commit("x", &step(1)).unwrap();
    store.commit("y", &step(1)).unwrap();
    dir
}

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
