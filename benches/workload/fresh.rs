//! The fresh-process mode (`AGENTWAL_BENCH_PROCESS=fresh`): the parent re-executes this
//! binary once per (backend, T, round) and collects each child's measurement.
//!
//! In one process, a backend runs after the others have grown the heap, spawned and
//! joined hundreds of threads and left glibc's per-thread arenas behind; an independent
//! harness that started one process per run measured ratios this bench did not. A child
//! does exactly what one in-process run does (`crate::run_one`: a fresh temporary
//! directory under the same base, the disk probe, `Backend::run` with the same generator
//! and options), with the parent's environment and so the same `Config`, and prints its
//! `Measurement` as one JSON line after [`RESULT_PREFIX`]; its progress line goes to the
//! inherited stderr.

use std::process::{Command, Stdio};

use crate::backends::Backend;
use crate::config::{self, Config};
use crate::measurement::Measurement;

/// Set in a child's environment: `<backend>:<T>:<round>`, the one run it makes.
pub const CHILD_ENV: &str = "AGENTWAL_BENCH_CHILD_RUN";

/// Marks the child's result line on its stdout.
const RESULT_PREFIX: &str = "agentwal-bench-measurement ";

/// One run in a fresh child process.
pub fn run_in_child(b: &dyn Backend, t: usize, round: usize) -> Measurement {
    let exe = std::env::current_exe().expect("the bench executable");
    let out = Command::new(exe)
        // What `cargo bench` passes; `main` returns early on `--test` and `--list` only.
        .arg("--bench")
        .env(CHILD_ENV, format!("{}:{t}:{round}", b.name()))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run a fresh-process child");
    assert!(
        out.status.success(),
        "the child for {} at T={t}, round {} failed ({})",
        b.name(),
        round + 1,
        out.status
    );
    let text = String::from_utf8(out.stdout).expect("the child's output is UTF-8");
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(RESULT_PREFIX))
        .unwrap_or_else(|| panic!("the child printed no measurement: {text}"));
    serde_json::from_str(line).expect("parse the child's measurement")
}

/// The child's side: makes the one run `spec` names and prints its measurement.
pub fn child(spec: &str) {
    let mut parts = spec.split(':');
    let (Some(name), Some(t), Some(round), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        panic!("{CHILD_ENV}={spec:?}: <backend>:<T>:<round>");
    };
    let t: usize = t.parse().expect("T is a number");
    let round: usize = round.parse().expect("the round is a number");
    let b = config::known()
        .into_iter()
        .find(|b| b.name() == name)
        .unwrap_or_else(|| panic!("unknown backend {name:?}"));
    let cfg = Config::from_env();
    crate::metering::count_device_of(&cfg.base);
    let m = crate::run_one(&cfg, b, t, round);
    println!(
        "{RESULT_PREFIX}{}",
        serde_json::to_string(&m).expect("encode the measurement")
    );
}
