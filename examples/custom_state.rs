//! Your own state type, and a schema change without losing history.
//!
//! A research agent first stores its notes as plain strings (schema version 1). Version 2
//! gives each note a score. Reopened with version 2, the store reads every version-1
//! snapshot and delta through the migration hooks; the next commit of a task writes a
//! version-2 snapshot, so later loads need no migration.
//!
//! ```text
//! cargo run --example custom_state                 # in a temporary directory
//! cargo run --example custom_state -- --dir /tmp/research
//! ```

use std::path::PathBuf;

use agentwal::{Error, Options, Result, State, Store};
use serde::{Deserialize, Serialize};

/// Version 1: notes are strings; a step adds one.
mod v1 {
    use super::*;

    #[derive(Debug, Default, Clone, Serialize, Deserialize)]
    pub struct Research {
        pub notes: Vec<String>,
    }

    impl State for Research {
        type Delta = String;
        fn apply(&mut self, note: &String) {
            self.notes.push(note.clone());
        }
    }
}

/// Version 2: every note has a score; a step adds one or rescores one.
mod v2 {
    use super::*;

    #[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Note {
        pub text: String,
        pub score: u8,
    }

    #[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Research {
        pub notes: Vec<Note>,
    }

    #[derive(Debug, Clone, Serialize, Deserialize)]
    pub enum Step {
        Add(Note),
        Rescore { index: usize, score: u8 },
    }

    /// Version-1 data decodes with version 1's types; anything else is not ours to read.
    fn from_v1<T: serde::de::DeserializeOwned>(found: u32, bytes: &[u8]) -> Result<T> {
        if found != 1 {
            return Err(Error::SchemaMismatch {
                found,
                expected: Research::VERSION,
            });
        }
        postcard::from_bytes(bytes).map_err(|e| Error::InvalidArgument(e.to_string()))
    }

    impl State for Research {
        type Delta = Step;
        const VERSION: u32 = 2;

        fn apply(&mut self, step: &Step) {
            match step {
                Step::Add(note) => self.notes.push(note.clone()),
                Step::Rescore { index, score } => {
                    if let Some(note) = self.notes.get_mut(*index) {
                        note.score = *score;
                    }
                }
            }
        }

        fn migrate_state(found: u32, bytes: &[u8]) -> Result<Self> {
            let old: v1::Research = from_v1(found, bytes)?;
            let notes = old.notes.into_iter().map(|text| Note { text, score: 0 });
            Ok(Research {
                notes: notes.collect(),
            })
        }

        fn migrate_delta(found: u32, bytes: &[u8]) -> Result<Step> {
            let text: String = from_v1(found, bytes)?;
            Ok(Step::Add(Note { text, score: 0 }))
        }
    }
}

const TASK: &str = "literature-review";

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let temp;
    let dir: PathBuf = match std::env::args().skip_while(|a| a != "--dir").nth(1) {
        Some(dir) => dir.into(),
        None => {
            temp = tempfile::tempdir()?;
            temp.path().join("store")
        }
    };
    // A snapshot every 3 commits, so the old history holds both snapshots and deltas.
    let options = Options {
        snapshot_every: 3,
        ..Options::default()
    };

    let old: Store<v1::Research> = Store::open_with(&dir, options)?;
    for note in [
        "WAL basics",
        "group commit",
        "torn tails",
        "fsync costs",
        "salts",
    ] {
        old.commit(TASK, &note.to_string())?;
    }
    drop(old);
    println!("version 1 wrote 5 notes to {}", dir.display());

    let store: Store<v2::Research> = Store::open_with(&dir, options)?;
    let latest = store.load_latest(TASK)?.ok_or("the task is gone")?;
    println!(
        "version 2 reads seq {}: {} notes, first {:?}",
        latest.seq,
        latest.state.notes.len(),
        latest.state.notes[0]
    );
    let seq = store.commit(TASK, &v2::Step::Rescore { index: 2, score: 9 })?;
    let rescored = store.load(TASK, seq)?.ok_or("just committed")?;
    assert_eq!(rescored.state.notes[2].score, 9);
    // Every older checkpoint still loads, through the hooks.
    for seq in 1..=5 {
        let cp = store.load(TASK, seq)?.ok_or("retained")?;
        assert_eq!(cp.state.notes.len() as u64, seq);
    }
    store.verify()?;
    println!(
        "seq {seq} rescored note 2 to 9; seqs 1..=5 still load; verify ok ({} notes)",
        rescored.state.notes.len()
    );
    Ok(())
}
