//! The `agentwal` binary, run as users run it.

use std::path::Path;
use std::process::{Command, Output};

use agentwal::{AgentDelta, Message, Options, Store};
use serde_json::Value as J;

fn agentwal(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentwal"))
        .args(args)
        .output()
        .expect("run agentwal")
}

fn json(args: &[&str]) -> J {
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

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn make_store(dir: &Path) {
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

#[test]
fn read_commands_json_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path());
    let d = dir.path().to_str().unwrap();

    let tasks = json(&["tasks", d]);
    let list = tasks["tasks"].as_array().unwrap();
    assert_eq!(list.len(), 3);
    assert_eq!(list[0]["task"], "alpha");
    assert_eq!(list[0]["latest_seq"], 7);
    assert_eq!(list[1]["forked_from"]["seq"], 4);

    let history = json(&["history", d, "alpha"]);
    let cps = history["checkpoints"].as_array().unwrap();
    assert_eq!(cps.len(), 7);
    assert!(cps.iter().any(|c| c["kind"] == "snapshot"));
    assert_eq!(
        json(&["history", d, "alpha-branch"])["checkpoints"][0]["forked_from"]["task"],
        "alpha"
    );

    let show = json(&["show", d, "alpha", "--seq", "2"]);
    assert_eq!(show["seq"], 2);
    assert_eq!(show["state"]["messages"].as_array().unwrap().len(), 4);
    assert_eq!(
        show["state"]["messages"][0]["tool_calls"][0]["name"],
        "lookup"
    );
    assert_eq!(show["state"]["vars"]["step"], 2);

    let calls = json(&["calls", d, "alpha"]);
    let calls = calls["calls"].as_array().unwrap();
    assert_eq!(
        (calls[0]["call_id"].as_str(), calls[0]["status"].as_str()),
        (Some("c8"), Some("pending"))
    );
    assert_eq!(
        (calls[1]["status"].as_str(), calls[1]["result"].as_str()),
        (Some("finished"), Some("charged"))
    );

    let verify = json(&["verify", d]);
    assert_eq!(verify["ok"], true);
    assert_eq!(verify["tasks"], 3);

    let dump = json(&["dump", d]);
    let records = dump["records"].as_array().unwrap();
    assert!(
        records
            .iter()
            .any(|r| r["kind"] == "call-finish" && r["task"] == "alpha")
    );
    assert_eq!(records[0]["lsn"], 1);

    let stats = json(&["stats", d]);
    assert_eq!(stats["tasks"], 3);
    assert!(stats["live_bytes"].as_u64().unwrap() > 0);

    // Human output works too, and reading never wrote anything.
    let before: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    for args in [
        vec!["tasks", d],
        vec!["show", d, "alpha"],
        vec!["history", d, "beta"],
        vec!["calls", d, "alpha"],
        vec!["stats", d],
        vec!["dump", d],
    ] {
        let out = agentwal(&args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert!(!out.stdout.is_empty());
    }
    let after: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(before, after);

    let compact = json(&["compact", d]);
    assert!(compact["segments_deleted"].is_u64());
    assert_eq!(json(&["show", d, "alpha"])["seq"], 7);
}

#[test]
fn verify_exits_1_naming_the_segment_of_a_flipped_bit() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path());
    let seg = dir.path().join(format!("{:020}.wal", 1));
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[200] ^= 0x01; // inside an early, acknowledged record
    std::fs::write(&seg, &bytes).unwrap();
    let out = agentwal(&["verify", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("00000000000000000001.wal"),
        "{}",
        stderr(&out)
    );
    let out = agentwal(&["verify", dir.path().to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let report: J = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ok"], false);
    assert!(
        report["error"]["segment"]
            .as_str()
            .unwrap()
            .ends_with("00000000000000000001.wal")
    );
    assert!(report["error"]["offset"].as_u64().unwrap() <= 200);
    // Other read commands fail with the location, without a panic.
    let out = agentwal(&["tasks", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("00000000000000000001.wal") && !stderr(&out).contains("panicked")
    );
}

#[test]
fn bad_input_gets_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path());
    let d = dir.path().to_str().unwrap();
    let missing = dir.path().join("missing");
    let not_store = tempfile::tempdir().unwrap();
    std::fs::write(not_store.path().join("notes.txt"), b"x").unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["tasks", missing.to_str().unwrap()],
        vec!["tasks", not_store.path().to_str().unwrap()],
        vec!["compact", missing.to_str().unwrap()],
        vec!["show", d, "nope"],
        vec!["show", d, "alpha", "--seq", "99"],
        vec!["history", d, "nope"],
        vec!["show", d],
    ];
    for args in cases {
        let out = agentwal(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        if args.len() > 2 {
            assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        }
    }
    assert!(!missing.exists(), "compact must not create a store");
    // compact while a writer holds the lock says so.
    let _writer: Store = Store::open(dir.path()).unwrap();
    let out = agentwal(&["compact", d]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("running writer"), "{}", stderr(&out));
}

#[test]
fn read_commands_work_while_another_process_commits() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let mut writer = Command::new(env!("CARGO_BIN_EXE_agentwal"))
        .args(["demo-child", "--dir", d, "--steps", "100000"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the first commit.
    while !dir.path().join(format!("{:020}.wal", 1)).exists() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    let mut last = 0;
    for _ in 0..15 {
        let tasks = json(&["tasks", d]);
        let seq = tasks["tasks"][0]["latest_seq"].as_u64().unwrap_or(0);
        assert!(seq >= last, "latest seq went back from {last} to {seq}");
        last = seq;
        let show = json(&["show", d, "demo-agent"]);
        assert_eq!(
            show["state"]["messages"].as_array().unwrap().len() as u64,
            2 * show["seq"].as_u64().unwrap()
        );
        assert_eq!(json(&["verify", d])["ok"], true);
    }
    writer.kill().unwrap();
    writer.wait().unwrap();
    assert!(last > 0);
}

#[test]
fn demo_resumes_after_sigkill_with_side_effects_exactly_once() {
    let out = agentwal(&["demo", "--steps", "10", "--crash-at", "4", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r: J = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["checkpoint_after_crash"], 4);
    assert_eq!(r["resumed_at_step"], 5);
    assert_eq!(r["messages_intact_after_crash"], true);
    assert_eq!(r["final_seq"], 10);
    assert_eq!(r["duplicate_side_effects"], 0);
    assert_eq!(r["exactly_once"], true);
    assert_eq!(r["emails_sent"], r["emails_expected"]);
}
