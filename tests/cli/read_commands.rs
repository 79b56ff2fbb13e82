//! Read commands: their JSON, beside another process's commits or a compacting writer,
//! and on stores of another state type.

use std::path::Path;
use std::process::Command;

use crate::common::env::env_u64;
use crate::common::states::Padded;
use agentwal::{AgentDelta, Message, Options, Store};
use serde_json::Value as J;

use crate::helpers::{agentwal, json, make_store, stderr};

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

/// Task "counter": 5 commits of `Padded` (snapshots and deltas) and one finished call.
fn make_custom_store(dir: &Path) {
    let store: Store<Padded> = Store::open_with(
        dir,
        Options {
            snapshot_every: 2,
            ..Options::default()
        },
    )
    .unwrap();
    for n in 1..=5 {
        let state = Padded {
            n,
            pad: vec![0xee; 64],
        };
        store.commit("counter", &state).unwrap();
    }
    store.begin_call("counter", "c1", "fetch", b"url").unwrap();
    store.finish_call("counter", "c1", b"200").unwrap();
}

#[test]
fn read_commands_work_on_a_store_of_another_state_type() {
    let dir = tempfile::tempdir().unwrap();
    make_custom_store(dir.path());
    let d = dir.path().to_str().unwrap();

    let out = agentwal(&["verify", d]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(
        text.contains("5 checkpoint bodies not decoded")
            && text.contains("schema version 1")
            && text.contains("AgentState")
            && text.trim_end().ends_with("ok"),
        "{text}"
    );
    let verify = json(&["verify", d]);
    assert_eq!(verify["ok"], true);
    assert_eq!(
        (&verify["tasks"], &verify["checkpoints"], &verify["calls"]),
        (&J::from(1), &J::from(5), &J::from(1))
    );
    assert_eq!(verify["bodies_decoded"], 0);
    let skipped = verify["bodies_not_decoded"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{verify}");
    assert_eq!(
        (&skipped[0]["schema_version"], &skipped[0]["count"]),
        (&J::from(1), &J::from(5))
    );

    let out = agentwal(&["show", d, "counter"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(
        text.contains("task counter @ seq 5")
            && text.contains("not decoded")
            && text.contains("AgentState"),
        "{text}"
    );
    let show = json(&["show", d, "counter", "--seq", "3"]);
    assert_eq!(
        (&show["task"], &show["seq"]),
        (&J::from("counter"), &J::from(3))
    );
    assert!(show["created_at_ms"].as_u64().unwrap() > 0);
    assert!(show["bytes"].as_u64().unwrap() > 64);
    assert_eq!(show["schema_version"], 1);
    assert!(show["state"].is_null());
    assert!(show["state_error"].as_str().unwrap().contains("AgentState"));

    let tasks = json(&["tasks", d]);
    assert_eq!(tasks["tasks"][0]["task"], "counter");
    assert_eq!(tasks["tasks"][0]["latest_seq"], 5);
    assert_eq!(tasks["tasks"][0]["calls"], 1);
    let calls = json(&["calls", d, "counter"]);
    assert_eq!(calls["calls"][0]["call_id"], "c1");
    assert_eq!(calls["calls"][0]["result"], "200");
    assert_eq!(
        json(&["history", d, "counter"])["checkpoints"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
    for args in [
        vec!["tasks", d],
        vec!["calls", d, "counter"],
        vec!["history", d, "counter"],
        vec!["stats", d],
        vec!["dump", d],
    ] {
        let out = agentwal(&args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    }

    // Compaction moves records without decoding them either.
    let other = tempfile::tempdir().unwrap();
    make_custom_store(other.path());
    let o = other.path().to_str().unwrap();
    assert!(json(&["compact", o])["segments_deleted"].is_u64());
    assert_eq!(json(&["verify", o])["checkpoints"], 5);
    assert_eq!(json(&["calls", o, "counter"])["calls"][0]["result"], "200");

    // Not decoding the bodies does not mean not checking them: a flipped byte in one is
    // still corruption.
    let seg = dir.path().join(format!("{:020}.wal", 1));
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = bytes.windows(8).position(|w| w == [0xee; 8]).unwrap();
    bytes[at] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();
    let out = agentwal(&["verify", d]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("corruption in segment"),
        "{}",
        stderr(&out)
    );
}

/// Seconds the CLI-beside-a-writer loop runs (`AGENTWAL_CLI_STRESS_SECS`, default 4; the
/// long run in `scripts/torture.sh` sets more).
fn cli_stress_secs() -> u64 {
    env_u64("AGENTWAL_CLI_STRESS_SECS").unwrap_or(4)
}

/// `verify`, `show`, `calls` and `tasks`, run again and again beside a writer that commits,
/// journals calls, rotates 4 KiB segments and compacts: every run exits 0 with an answer
/// that is right for some acknowledged point of the writer's history.
#[test]
fn read_commands_beside_a_compacting_writer_answer_correctly_every_time() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    let options = Options {
        segment_bytes: 4096,
        keep_checkpoints: Some(2),
        ..Options::default()
    };
    let writer: Store = Store::open_with(dir.path(), options).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..2).map(|_| AtomicU64::new(0)).collect());
    // Each step of task-N: one message "step <seq>", var i = seq, and call-<seq> begun and
    // finished with "result-<seq>"; every 20 steps a compaction.
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let (writer, stop, acked) = (writer.clone(), stop.clone(), acked.clone());
            std::thread::spawn(move || {
                let task = format!("task-{t}");
                let mut seq = 0;
                while !stop.load(Ordering::Relaxed) {
                    let next = seq + 1;
                    let delta = AgentDelta::default()
                        .message(Message::assistant(format!("step {next}")))
                        .set("i", next as i64);
                    seq = writer.commit(&task, &delta).unwrap();
                    assert_eq!(seq, next);
                    let call = format!("call-{seq}");
                    writer.begin_call(&task, &call, "tool", b"args").unwrap();
                    writer
                        .finish_call(&task, &call, format!("result-{seq}").as_bytes())
                        .unwrap();
                    acked[t].store(seq, Ordering::Release);
                    if seq.is_multiple_of(20) {
                        writer.compact().unwrap();
                    }
                }
            })
        })
        .collect();
    while acked.iter().any(|a| a.load(Ordering::Acquire) == 0) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(cli_stress_secs());
    let mut runs = 0;
    while std::time::Instant::now() < deadline {
        let verify = json(&["verify", &path]);
        assert_eq!(verify["ok"], true, "verify: {verify}");
        let tasks = json(&["tasks", &path]);
        let names: Vec<&str> = tasks["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["task"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["task-0", "task-1"], "tasks: {tasks}");
        for t in 0..2 {
            let task = format!("task-{t}");
            let before = acked[t].load(Ordering::Acquire);
            let show = json(&["show", &path, &task]);
            let seq = show["seq"].as_u64().unwrap();
            // The view may include the commit a writer has made durable and not yet
            // returned from, so one past what the test saw acknowledged.
            assert!(
                seq >= before && seq <= acked[t].load(Ordering::Acquire) + 1,
                "{show}"
            );
            let state = &show["state"];
            assert_eq!(state["vars"]["i"], seq, "show {task}: {show}");
            let messages = state["messages"].as_array().unwrap();
            assert_eq!(messages.len() as u64, seq, "show {task}: {show}");
            assert_eq!(messages.last().unwrap()["content"], format!("step {seq}"));
            let calls = json(&["calls", &path, &task]);
            for c in calls["calls"].as_array().unwrap() {
                let n = c["call_id"].as_str().unwrap().trim_start_matches("call-");
                if c["status"] == "finished" {
                    assert_eq!(c["result"], format!("result-{n}"), "calls {task}: {c}");
                }
            }
        }
        runs += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    eprintln!("{runs} rounds of verify, tasks, show and calls; all right, all exit 0");
    assert!(runs > 0);
}
