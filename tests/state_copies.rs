//! What a commit costs when the caller still holds the state it loaded: the delta, not the
//! state. The deterministic proxy is the number of times the store clones the state (a
//! state whose `Clone` counts itself): a commit must never copy a state, whoever holds it,
//! and the loop load → think → commit → drop copies nothing at all. Folding the deltas a
//! commit queued (because a reader held the state) must give what the log gives.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use agentwal::{Options, State, Store};
use serde::{Deserialize, Serialize};

/// Clones of [`Notes`] so far, in this process (the tests hold `common::serial()`).
static CLONES: AtomicU64 = AtomicU64::new(0);

/// A state that counts its clones.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
struct Notes {
    notes: Vec<String>,
}

impl Clone for Notes {
    fn clone(&self) -> Self {
        CLONES.fetch_add(1, Ordering::SeqCst);
        Notes {
            notes: self.notes.clone(),
        }
    }
}

impl State for Notes {
    type Delta = String;
    fn apply(&mut self, note: &String) {
        self.notes.push(note.clone());
    }
}

fn note(i: u64) -> String {
    format!("note {i}")
}

fn expected(n: u64) -> Notes {
    Notes {
        notes: (1..=n).map(note).collect(),
    }
}

fn clones() -> u64 {
    CLONES.load(Ordering::SeqCst)
}

/// Every seq of `task` in a freshly opened store (folded from the log) equals `expected`.
fn check_log(dir: &std::path::Path, task: &str, n: u64) {
    let store: Store<Notes> = Store::open(dir).unwrap();
    for seq in 1..=n {
        let cp = store.load(task, seq).unwrap().expect("retained");
        assert_eq!(*cp.state, expected(seq), "seq {seq} folded from the log");
    }
}

#[test]
fn a_commit_while_the_caller_holds_its_checkpoint_copies_no_state() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let store: Store<Notes> = Store::open(dir.path()).unwrap();
    for i in 1..=5 {
        store.commit("t", &note(i)).unwrap();
    }
    let held = store.load_latest("t").unwrap().expect("committed");
    let before = clones();
    for i in 6..=15 {
        store.commit("t", &note(i)).unwrap();
    }
    assert_eq!(clones(), before, "commits copied the state a caller holds");
    assert_eq!(*held.state, expected(5), "the held checkpoint changed");

    // The next load folds the queued deltas: one copy, since `held` still shares it.
    let latest = store.load_latest("t").unwrap().expect("committed");
    assert_eq!(*latest.state, expected(15));
    assert!(
        clones() <= before + 1,
        "the load copied the state more than once"
    );
    assert_eq!(*held.state, expected(5));
    drop((held, latest));
    drop(store);
    check_log(dir.path(), "t", 15);
}

#[test]
fn load_think_commit_drop_copies_nothing() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let store: Store<Notes> = Store::open(dir.path()).unwrap();
    store.commit("t", &note(1)).unwrap();
    let before = clones();
    for i in 2..=60 {
        let cp = store.load_latest("t").unwrap().expect("committed");
        assert_eq!(*cp.state, expected(i - 1));
        store.commit("t", &note(i)).unwrap();
        drop(cp);
    }
    assert_eq!(clones(), before, "the agent loop copied the state");
    drop(store);
    check_log(dir.path(), "t", 60);
}

#[test]
fn snapshots_due_while_a_reader_holds_the_state_fold_the_queued_deltas() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        snapshot_every: 3,
        ..Options::default()
    };
    let store: Store<Notes> = Store::open_with(dir.path(), opts).unwrap();
    let mut held = Vec::new();
    for i in 1..=20 {
        store.commit("t", &note(i)).unwrap();
        if i % 4 == 0 {
            held.push(store.load_latest("t").unwrap().expect("committed"));
        }
        let latest = store.load_latest("t").unwrap().expect("committed");
        assert_eq!(*latest.state, expected(i));
    }
    for cp in &held {
        assert_eq!(*cp.state, expected(cp.seq), "a held checkpoint changed");
    }
    drop((held, store));
    check_log(dir.path(), "t", 20);
}

#[cfg(feature = "tokio")]
#[test]
fn an_async_commit_while_the_caller_holds_its_checkpoint_copies_no_state() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = agentwal::AsyncStore::<Notes>::open(dir.path())
            .await
            .unwrap();
        store.commit("t", &note(1)).await.unwrap();
        let held = store.load_latest("t").await.unwrap().expect("committed");
        let before = clones();
        for i in 2..=10 {
            store.commit("t", &note(i)).await.unwrap();
        }
        assert_eq!(
            clones(),
            before,
            "async commits copied the state a caller holds"
        );
        let latest = store.load_latest("t").await.unwrap().expect("committed");
        assert_eq!(*latest.state, expected(10));
        assert_eq!(*held.state, expected(1));
    });
    drop(runtime);
    check_log(dir.path(), "t", 10);
}

/// Clones of [`Token`] so far, in this process (the tests hold `common::serial()`).
static TOKEN_CLONES: AtomicU64 = AtomicU64::new(0);

/// A delta that counts its clones.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Token(u64);

impl Clone for Token {
    fn clone(&self) -> Self {
        TOKEN_CLONES.fetch_add(1, Ordering::SeqCst);
        Token(self.0)
    }
}

/// A state whose owned fold moves the token in. Copying the state (a fold while a reader
/// holds it) does not count as copying deltas.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
struct Tokens(Vec<Token>);

impl Clone for Tokens {
    fn clone(&self) -> Self {
        Tokens(self.0.iter().map(|t| Token(t.0)).collect())
    }
}

impl State for Tokens {
    type Delta = Token;
    fn apply(&mut self, token: &Token) {
        self.0.push(token.clone());
    }
    fn apply_owned(&mut self, token: Token) {
        self.0.push(token);
    }
}

fn token_clones() -> u64 {
    TOKEN_CLONES.load(Ordering::SeqCst)
}

#[test]
fn an_owned_delta_is_moved_into_the_cached_state_never_copied() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        snapshot_every: 4,
        ..Options::default()
    };
    let store: Store<Tokens> = Store::open_with(dir.path(), opts).unwrap();
    let before = token_clones();
    let mut held = Vec::new();
    for i in 1..=30_u64 {
        // Every other commit checks its expected seq; every fifth is made while a reader
        // holds the state, so its token is queued and folded later.
        let expected = i.is_multiple_of(2).then_some(i - 1);
        assert_eq!(store.commit_owned("t", expected, Token(i)).unwrap(), i);
        if i.is_multiple_of(5) {
            held.push(store.load_latest("t").unwrap().expect("committed"));
        }
    }
    let latest = store.load_latest("t").unwrap().expect("committed");
    assert_eq!(latest.state.0, (1..=30).map(Token).collect::<Vec<_>>());
    assert_eq!(
        token_clones(),
        before,
        "commit_owned or a fold copied a delta"
    );
    let conflict = store.commit_owned("t", Some(29), Token(99));
    assert!(matches!(conflict, Err(agentwal::Error::Conflict { .. })));

    // The lending API copies each delta into the cache once: what the owned one saves.
    let lent = token_clones();
    store.commit("t", &Token(31)).unwrap();
    assert_eq!(token_clones(), lent + 1, "a lent delta is copied once");
    drop((held, latest, store));

    let reopened: Store<Tokens> = Store::open(dir.path()).unwrap();
    let folded = reopened.load_latest("t").unwrap().expect("committed");
    assert_eq!(folded.state.0, (1..=31).map(Token).collect::<Vec<_>>());
}
