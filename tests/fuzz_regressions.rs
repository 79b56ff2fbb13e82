//! Replays saved fuzz inputs as ordinary tests.
//!
//! Every file under `fuzz/regressions/<target>/` (inputs that once broke a target, kept
//! after the fix) goes through the same check function the fuzz target runs: the checks
//! live once, in `fuzz/src/`, which this file includes as a module (see the comment at
//! the top of `fuzz/src/lib.rs`). A few built-in inputs run too, so each check is
//! exercised even for a target without saved inputs.
//!
//! To replay one input by hand: `AGENTWAL_FUZZ_INPUT=path cargo test --test
//! fuzz_regressions <target>`; under libFuzzer: `cargo +nightly fuzz run <target> path`.

#[path = "../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod checks;

use std::path::{Path, PathBuf};

fn inputs(target: &str) -> Vec<PathBuf> {
    if let Some(one) = std::env::var_os("AGENTWAL_FUZZ_INPUT") {
        return vec![PathBuf::from(one)];
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != "README.md"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

fn replay(target: &str, check: fn(&[u8]), builtin: &[&[u8]]) {
    for input in builtin {
        check(input);
    }
    let files = inputs(target);
    for path in &files {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        eprintln!("{target}: replaying {}", path.display());
        check(&data);
    }
    eprintln!("{target}: {} saved inputs replayed", files.len());
}

/// Inputs of all zeros, all ones and a counting pattern, in a few lengths.
fn patterns() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for len in [0usize, 1, 19, 20, 40, 64, 300, 2000] {
        out.push(vec![0; len]);
        out.push(vec![0xff; len]);
        out.push((0..len).map(|i| i as u8).collect());
    }
    out
}

#[test]
fn record_decode() {
    let patterns = patterns();
    let builtin: Vec<&[u8]> = patterns.iter().map(Vec::as_slice).collect();
    replay("record_decode", checks::record_decode::check, &builtin);
}

#[test]
fn recover_dir() {
    let patterns = patterns();
    let builtin: Vec<&[u8]> = patterns.iter().map(Vec::as_slice).collect();
    replay("recover_dir", checks::recover_dir::check, &builtin);
}

#[test]
fn store_ops() {
    let patterns = patterns();
    let builtin: Vec<&[u8]> = patterns.iter().map(Vec::as_slice).collect();
    replay("store_ops", checks::store_ops::check, &builtin);
}
