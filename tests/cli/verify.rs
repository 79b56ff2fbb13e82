//! `verify`, `show` and `dump`: exit codes for damage and I/O errors, other schema
//! versions, compressed bodies.

use crate::common::states::Padded;
use agentwal::{AgentDelta, Message, State, Store};
use serde::{Deserialize, Serialize};
use serde_json::Value as J;

use crate::helpers::{agentwal, json, make_store, stderr};

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
fn verify_exits_2_on_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path());
    let d = dir.path().to_str().unwrap();
    // A directory where a segment file should be: reading it fails with EISDIR, an I/O
    // error (the tests run as root, so taking permissions away would not stop a read).
    let seg = dir.path().join(format!("{:020}.wal", 1));
    std::fs::remove_file(&seg).unwrap();
    std::fs::create_dir(&seg).unwrap();
    let out = agentwal(&["verify", d]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("I/O error"), "{}", stderr(&out));
    let out = agentwal(&["verify", d, "--json"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// `Padded` under a newer schema version than the CLI's `AgentState` (1).
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PaddedV2(pub(crate) Padded);

impl State for PaddedV2 {
    type Delta = PaddedV2;
    const VERSION: u32 = 2;
    fn apply(&mut self, delta: &PaddedV2) {
        *self = delta.clone();
    }
}

#[test]
fn verify_and_show_do_not_call_another_schema_version_corruption() {
    // AgentState refuses a body of schema version 2 with SchemaMismatch, an error that is
    // not corruption: verify must not exit 1 on it.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let store: Store<PaddedV2> = Store::open(dir.path()).unwrap();
    for n in 1..=3 {
        let state = PaddedV2(Padded { n, pad: vec![1; 8] });
        store.commit("v2", &state).unwrap();
    }
    drop(store);
    let out = agentwal(&["verify", d]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(
        text.contains("3 checkpoint bodies not decoded (schema version 2)"),
        "{text}"
    );
    let show = json(&["show", d, "v2"]);
    assert_eq!(
        (&show["seq"], &show["schema_version"]),
        (&J::from(3), &J::from(2))
    );
    assert!(show["state"].is_null());
}

/// `dump` and `verify` say how bodies are stored: the codec and both sizes of each
/// compressed checkpoint body, and how many are compressed; `show` reads through them.
#[test]
#[cfg(feature = "zstd")]
fn dump_and_verify_show_compressed_bodies() {
    let dir = tempfile::tempdir().unwrap();
    {
        // Compressed at commit, deltas too (the default leaves bodies to compaction).
        let options = agentwal::Options {
            compression: agentwal::Compression::Zstd {
                level: agentwal::ZSTD_LEVEL_DEFAULT,
                deltas: true,
            },
            ..agentwal::Options::default()
        };
        let store: Store = Store::open_with(dir.path(), options).unwrap();
        for i in 1..=6i64 {
            let text =
                format!("step {i}: the agent found three pages about the weather; ").repeat(20);
            let d = AgentDelta::default().message(Message::tool(format!("c{i}"), text));
            store.commit("zeta", &d).unwrap();
        }
    }
    let d = dir.path().to_str().unwrap();
    let dump = json(&["dump", d]);
    let records = dump["records"].as_array().unwrap();
    assert_eq!(records.len(), 6);
    for r in records {
        let body = &r["body"];
        assert_eq!(body["codec"], "zstd", "{r}");
        assert!(
            body["stored_bytes"].as_u64() < body["bytes"].as_u64(),
            "{r}"
        );
        assert_eq!(body["error"], J::Null, "{r}");
        let detail = r["detail"].as_str().unwrap();
        assert!(detail.starts_with("zstd "), "{detail}");
    }
    let text = agentwal(&["dump", d]);
    assert!(String::from_utf8_lossy(&text.stdout).contains(" B of "));
    let verify = json(&["verify", d]);
    assert_eq!(verify["ok"], true);
    assert_eq!(verify["bodies_compressed"], 6);
    assert!(verify["body_bytes_stored"].as_u64() < verify["body_bytes"].as_u64());
    let out = agentwal(&["verify", d]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("6 of 6 checkpoint bodies stored compressed (zstd)"),
        "{stdout}"
    );
    let show = json(&["show", d, "zeta"]);
    let messages = show["state"]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 6);
}
