//! The store API suite written once against `TaskStore` and run on both backends: every
//! test here runs on a local `Store` and, with the `postgres` feature, on a `PgStore` in a
//! fresh schema of the test server (`scripts/test.sh` starts one; without it the PostgreSQL
//! half fails rather than skips).

#[path = "../common/mod.rs"]
mod common;

use agentwal::{AgentDelta, AgentState, Message, State};

/// Runs test body `$name` (a generic fn) on each backend.
macro_rules! on_both {
    ($name:ident, $cfg:expr) => {
        mod $name {
            #[test]
            fn local() {
                let (_dir, store) = super::local($cfg);
                super::$name(&store);
            }
            #[cfg(feature = "postgres")]
            #[test]
            fn postgres() {
                let store = super::pg(stringify!($name), $cfg);
                super::$name(&store);
            }
        }
    };
}

mod history;
mod reads_and_input;

/// The options both backends share.
#[derive(Clone, Copy)]
struct Cfg {
    snapshot_every: u32,
    keep: Option<u32>,
}

const DEFAULT: Cfg = Cfg {
    snapshot_every: agentwal::SNAPSHOT_EVERY_DEFAULT,
    keep: None,
};

fn local(cfg: Cfg) -> (tempfile::TempDir, agentwal::Store) {
    let dir = tempfile::tempdir().unwrap();
    let options = agentwal::Options {
        snapshot_every: cfg.snapshot_every,
        keep_checkpoints: cfg.keep,
        ..agentwal::Options::default()
    };
    let store = agentwal::Store::open_with(dir.path(), options).unwrap();
    (dir, store)
}

#[cfg(feature = "postgres")]
fn pg(name: &str, cfg: Cfg) -> agentwal::postgres::PgStore {
    let options = agentwal::postgres::PgOptions {
        snapshot_every: cfg.snapshot_every,
        keep_checkpoints: cfg.keep,
        ..agentwal::postgres::PgOptions::default()
    };
    common::pg::store(name, options)
}

fn step(i: u64) -> AgentDelta {
    AgentDelta::default()
        .message(Message::assistant(format!("step {i}")).with_tool_call(
            format!("c{i}"),
            "search",
            "q",
        ))
        .message(Message::tool(format!("c{i}"), "x".repeat(200)))
        .set("step", i as i64)
        .set("phase", if i.is_multiple_of(2) { "even" } else { "odd" })
}

fn expected(n: u64) -> AgentState {
    let mut s = AgentState::default();
    for i in 1..=n {
        s.apply(&step(i));
    }
    s
}
