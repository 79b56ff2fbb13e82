//! Running the binary, reading its JSON, and making a store to read.

use std::path::Path;
use std::process::{Command, Output};

use agentwal::{AgentDelta, Message, Options, Store};
use serde_json::Value as J;

pub(crate) fn agentwal(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentwal"))
        .args(args)
        .output()
        .expect("run agentwal")
}

pub(crate) fn json(args: &[&str]) -> J {
    let mut all = args.to_vec();
    all.push("--json");
    let out = agentwal(&all);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub(crate) fn make_store(dir: &Path) {
    let store: Store = Store::open_with(
        dir,
        Options {
            snapshot_every: 3,
            ..Options::default()
        },
    )
    .unwrap();
    for i in 1..=7i64 {
        let d = AgentDelta::default()
            .message(Message::assistant(format!("step {i}")).with_tool_call(
                format!("c{i}"),
                "lookup",
                i,
            ))
            .message(Message::tool(format!("c{i}"), "found"))
            .set("step", i);
        store.commit("alpha", &d).unwrap();
    }
    store
        .commit("beta", &AgentDelta::default().message(Message::user("hi")))
        .unwrap();
    store.fork("alpha", 4, "alpha-branch").unwrap();
    store
        .begin_call("alpha", "c8", "send_email", b"to=bob")
        .unwrap();
    store.begin_call("alpha", "c9", "charge", b"42").unwrap();
    store.finish_call("alpha", "c9", b"charged").unwrap();
}
