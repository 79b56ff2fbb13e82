//! Model-based property test of the PostgreSQL backend: random sequences of every
//! `TaskStore` operation run on a `PgStore` and on a local `Store` side by side, and every
//! outcome must be the same. The local store is the model here: `tests/store_model/`
//! checks it against an explicit model of the rules (seqs, snapshots, retention, fork,
//! delete, the journal), and the two backends share those rules, so any difference is a
//! bug of the PostgreSQL backend. What differs by design is left out of the comparison:
//! `created_at_ms`, `bytes`, and which seqs are snapshots (the size rule counts a local
//! record's header, a PostgreSQL body alone). So is the journal's retention: the local
//! store never compacts here, so it prunes no call, and PostgreSQL prunes none.
//!
//! Cases: `PROPTEST_CASES` (default 24: each case creates a schema on the server).
#![cfg(feature = "postgres")]

mod common;

use agentwal::postgres::PgOptions;
use agentwal::{AgentDelta, AgentState, Error, Message, Options, Store, TaskStore};
use common::env::env_u64;
use proptest::prelude::*;
use proptest::sample::select;

// Ids that prefix one another, and a two-byte character: `TasksWithPrefix` ranges.
const TASKS: [&str; 3] = ["a", "ab", "\u{e9}"];
const PREFIXES: [&str; 8] = ["", "a", "ab", "abc", "b", "\u{e9}", "\u{ea}", "\u{e0}"];
const CALLS: [&str; 3] = ["c1", "c2", "c3"];
const BLOBS: [&[u8]; 3] = [b"", b"x", b"yy"];

#[derive(Debug, Clone)]
enum Op {
    Commit {
        task: &'static str,
        delta: AgentDelta,
    },
    CommitIf {
        task: &'static str,
        expected: u64,
        delta: AgentDelta,
    },
    Load {
        task: &'static str,
        seq: u64,
    },
    LoadLatest {
        task: &'static str,
    },
    LoadLatestMatching {
        task: &'static str,
        rem: usize,
    },
    Fork {
        task: &'static str,
        seq: u64,
        new_task: &'static str,
    },
    Delete {
        task: &'static str,
    },
    BeginCall {
        task: &'static str,
        call: &'static str,
        tool: &'static str,
        args: &'static [u8],
    },
    FinishCall {
        task: &'static str,
        call: &'static str,
        result: &'static [u8],
    },
    CallResult {
        task: &'static str,
        call: &'static str,
    },
    PendingCalls {
        task: &'static str,
    },
    ListCheckpoints {
        task: &'static str,
    },
    Tasks,
    TasksWithPrefix {
        prefix: &'static str,
    },
}

/// An outcome both backends must agree on: a value rendered without the fields that
/// differ by design, or an error by kind (and, for the structured ones, by fields).
fn outcome<T>(r: agentwal::Result<T>, show: impl Fn(T) -> String) -> String {
    match r {
        Ok(v) => format!("ok {}", show(v)),
        Err(
            e @ (Error::Conflict { .. }
            | Error::UnknownSeq { .. }
            | Error::TaskExists { .. }
            | Error::UnknownTask { .. }),
        ) => {
            format!("err {e:?}")
        }
        Err(Error::InvalidArgument(_)) => "err InvalidArgument".into(),
        Err(e) => panic!("an error no backend should give here: {e}"),
    }
}

fn cp(c: Option<agentwal::Checkpoint<AgentState>>) -> String {
    format!("{:?}", c.map(|c| (c.task, c.seq, c.state)))
}

fn run(store: &impl TaskStore<AgentState>, op: &Op) -> String {
    match op {
        Op::Commit { task, delta } => outcome(store.commit(task, delta), |s| s.to_string()),
        Op::CommitIf {
            task,
            expected,
            delta,
        } => outcome(store.commit_if(task, *expected, delta), |s| s.to_string()),
        Op::Load { task, seq } => outcome(store.load(task, *seq), cp),
        Op::LoadLatest { task } => outcome(store.load_latest(task), cp),
        Op::LoadLatestMatching { task, rem } => {
            let accept = |s: &AgentState| s.messages.len() % 3 == *rem;
            outcome(store.load_latest_matching(task, &accept), cp)
        }
        Op::Fork {
            task,
            seq,
            new_task,
        } => outcome(store.fork(task, *seq, new_task), |s| s.to_string()),
        Op::Delete { task } => outcome(store.delete_task(task), |_| String::new()),
        Op::BeginCall {
            task,
            call,
            tool,
            args,
        } => outcome(store.begin_call(task, call, tool, args), |_| String::new()),
        Op::FinishCall { task, call, result } => {
            outcome(store.finish_call(task, call, result), |_| String::new())
        }
        Op::CallResult { task, call } => {
            outcome(store.call_result(task, call), |r| format!("{r:?}"))
        }
        Op::PendingCalls { task } => outcome(store.pending_calls(task), |p| format!("{p:?}")),
        Op::ListCheckpoints { task } => outcome(store.list_checkpoints(task), |infos| {
            let v: Vec<_> = infos.into_iter().map(|i| (i.seq, i.forked_from)).collect();
            format!("{v:?}")
        }),
        Op::Tasks => outcome(store.tasks(), |t| format!("{t:?}")),
        Op::TasksWithPrefix { prefix } => {
            outcome(store.tasks_with_prefix(prefix), |t| format!("{t:?}"))
        }
    }
}

fn delta() -> impl Strategy<Value = AgentDelta> {
    (
        0usize..3,
        0usize..600,
        any::<bool>(),
        select(vec!["k", "phase"]),
    )
        .prop_map(|(messages, len, unset, key)| {
            let mut d = AgentDelta::default();
            for i in 0..messages {
                d = d.message(Message::user(format!("{i}{}", "m".repeat(len))));
            }
            d = d.set(key, len as i64);
            if unset {
                d = d.unset("k");
            }
            d
        })
}

fn op() -> impl Strategy<Value = Op> {
    let task = || select(&TASKS[..]);
    let call = || select(&CALLS[..]);
    let blob = || select(&BLOBS[..]);
    prop_oneof![
        8 => (task(), delta()).prop_map(|(task, delta)| Op::Commit { task, delta }),
        3 => (task(), 0u64..6, delta())
            .prop_map(|(task, expected, delta)| Op::CommitIf { task, expected, delta }),
        3 => (task(), 0u64..12).prop_map(|(task, seq)| Op::Load { task, seq }),
        2 => task().prop_map(|task| Op::LoadLatest { task }),
        1 => (task(), 0usize..3).prop_map(|(task, rem)| Op::LoadLatestMatching { task, rem }),
        2 => (task(), 0u64..8, task())
            .prop_map(|(task, seq, new_task)| Op::Fork { task, seq, new_task }),
        2 => task().prop_map(|task| Op::Delete { task }),
        3 => (task(), call(), select(vec!["search", "email"]), blob())
            .prop_map(|(task, call, tool, args)| Op::BeginCall { task, call, tool, args }),
        3 => (task(), call(), blob())
            .prop_map(|(task, call, result)| Op::FinishCall { task, call, result }),
        1 => (task(), call()).prop_map(|(task, call)| Op::CallResult { task, call }),
        1 => task().prop_map(|task| Op::PendingCalls { task }),
        2 => task().prop_map(|task| Op::ListCheckpoints { task }),
        1 => Just(Op::Tasks),
        2 => select(&PREFIXES[..]).prop_map(|prefix| Op::TasksWithPrefix { prefix }),
    ]
}

fn config() -> ProptestConfig {
    let cases = env_u64("PROPTEST_CASES").map_or(24, |c| {
        u32::try_from(c).expect("PROPTEST_CASES fits in a u32")
    });
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn pg_store_matches_the_local_store(
        snapshot_every in select(vec![1u32, 2, 3, 1024]),
        keep in prop_oneof![Just(None), (1u32..=4).prop_map(Some)],
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let dir = tempfile::tempdir().unwrap();
        // No compaction: with retention a local pass prunes old finished calls, which
        // PostgreSQL keeps (docs/postgres.md); without one both keep every call.
        let local: Store = Store::open_with(dir.path(), Options {
            snapshot_every,
            keep_checkpoints: keep,
            auto_compact: false,
            ..Options::default()
        }).unwrap();
        let pg = common::pg::store::<AgentState>("model", PgOptions {
            snapshot_every,
            keep_checkpoints: keep,
            ..PgOptions::default()
        });
        for (i, op) in ops.iter().enumerate() {
            let want = run(&local, op);
            let got = run(&pg, op);
            prop_assert_eq!(&got, &want, "op {} of {}: {:?}", i, ops.len(), op);
        }
        for task in TASKS {
            for seq in 1..=12 {
                let op = Op::Load { task, seq };
                prop_assert_eq!(run(&pg, &op), run(&local, &op), "final {:?}", op);
            }
        }
    }
}
