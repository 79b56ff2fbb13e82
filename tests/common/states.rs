//! `State` types that more than one test binary stores.

use agentwal::{Error, State};
use serde::{Deserialize, Serialize};

/// Schema version 1 of a counter, for the schema-version tests ...
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterV1 {
    pub total: i64,
}
impl State for CounterV1 {
    type Delta = i64;
    fn apply(&mut self, d: &i64) {
        self.total += d;
    }
}

/// ... version 2, which changed the delta's encoding and has no migration hooks ...
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterV2 {
    pub total: i64,
    pub label: String,
}
impl State for CounterV2 {
    type Delta = (i64, String);
    const VERSION: u32 = 2;
    fn apply(&mut self, d: &(i64, String)) {
        self.total += d.0;
        self.label = d.1.clone();
    }
}

/// ... and version 2 with a hook that reads version 1 deltas.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterV2Migrating(pub CounterV2);
impl State for CounterV2Migrating {
    type Delta = (i64, String);
    const VERSION: u32 = 2;
    fn apply(&mut self, d: &(i64, String)) {
        self.0.apply(d);
    }
    fn migrate_delta(found: u32, bytes: &[u8]) -> agentwal::Result<(i64, String)> {
        assert_eq!(found, 1);
        let v: i64 =
            postcard::from_bytes(bytes).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        Ok((v, "migrated".into()))
    }
}

/// A state that is not `AgentState` (its bodies do not decode as one, which the CLI
/// tests need) and whose size the caller fixes with `pad` (so records of different seqs
/// can be the same size, which the read-only view tests need).
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Padded {
    pub n: u64,
    pub pad: Vec<u8>,
}

impl State for Padded {
    type Delta = Padded;
    fn apply(&mut self, delta: &Padded) {
        *self = delta.clone();
    }
}
