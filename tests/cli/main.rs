//! The `agentwal` binary, run as users run it.

#[path = "../common/mod.rs"]
mod common;

use agentwal::Store;
use serde_json::Value as J;

mod helpers;
mod read_commands;
mod verify;

use helpers::{agentwal, make_store, stderr};

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

#[cfg(not(feature = "postgres"))]
#[test]
fn a_postgres_url_without_the_feature_says_to_build_with_it() {
    for args in [
        vec!["tasks", "postgres://u@/db?host=/tmp"],
        vec!["history", "--pg", "host=/tmp", "t"],
        vec!["migrate", "/tmp", "postgresql://u@h/db"],
    ] {
        let out = agentwal(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains("--features postgres"), "{args:?}: {err}");
        assert!(!err.contains("not an agentwal store"), "{err}");
    }
}
