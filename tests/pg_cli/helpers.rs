//! Running the binary, reading its JSON, and making and migrating local stores.

use std::path::Path;
use std::process::{Command, Output};

use agentwal::postgres::{PgOptions, PgStore};
use agentwal::{AgentDelta, Message, Options, Store};
use serde_json::Value as J;

use crate::common;

pub(crate) fn agentwal(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentwal"))
        .args(args)
        .output()
        .expect("run agentwal")
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The command's JSON; it must exit 0.
pub(crate) fn json(args: &[&str]) -> J {
    let mut all = args.to_vec();
    all.push("--json");
    let out = agentwal(&all);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

/// The test server as a URL over its unix socket.
pub(crate) fn url() -> String {
    format!("postgres://postgres@/postgres?host={}", common::pg::host())
}

/// `v` without its `bytes` fields: sizes differ by design (a local record counts its
/// header, docs/postgres.md).
pub(crate) fn sans_bytes(v: &J) -> J {
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

pub(crate) fn step(i: i64) -> AgentDelta {
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
pub(crate) fn make_store(dir: &Path, commits: i64) {
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

pub(crate) fn migrate(dir: &str, schema: &str, extra: &[&str]) -> Output {
    let url = url();
    let mut args = vec!["migrate", dir, url.as_str(), "--schema", schema];
    args.extend_from_slice(extra);
    agentwal(&args)
}

pub(crate) fn migrate_json(dir: &str, schema: &str, extra: &[&str]) -> J {
    let mut all = extra.to_vec();
    all.push("--json");
    let out = migrate(dir, schema, &all);
    assert!(out.status.success(), "migrate: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

pub(crate) fn writer(schema: &str) -> PgStore {
    let options = PgOptions {
        schema: schema.to_string(),
        ..PgOptions::default()
    };
    PgStore::open(&common::pg::url(), options).unwrap()
}

/// A store holding tasks "x" and "y".
pub(crate) fn tempdir_with_task() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open(dir.path()).unwrap();
    store.commit("x", &step(1)).unwrap();
    store.commit("y", &step(1)).unwrap();
    dir
}
