//! Read commands on a URL answer as on the migrated store; read-only handles never
//! write.

use std::time::Duration;

use agentwal::postgres::{PgOptions, PgStore};
use agentwal::{AgentState, Error, Store};
use serde_json::Value as J;

use crate::common;
use crate::helpers::{
    agentwal, json, make_store, migrate_json, sans_bytes, stderr, step, tempdir_with_task, url,
    writer,
};

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
