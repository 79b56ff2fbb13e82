//! Opening a store read-only for a command, again while a live writer's compaction keeps
//! changing it under the scan.

use std::path::Path;

use agentwal::{AgentState, Error, Store};

use crate::Failure;

/// Read-only opens tried when a store keeps changing under the scan (a writer compacting
/// hard): each open already rescans several times before it reports `StoreChanged`.
const OPEN_ATTEMPTS: usize = 5;

/// Runs a read-only `open` again while it reports that the store changed under it, so a
/// read command beside a live, compacting writer answers from a consistent view.
pub fn reopening<T>(mut open: impl FnMut() -> agentwal::Result<T>) -> agentwal::Result<T> {
    let mut attempt = 1;
    loop {
        match open() {
            Err(Error::StoreChanged { .. }) if attempt < OPEN_ATTEMPTS => attempt += 1,
            other => return other,
        }
    }
}

/// Opens the store in `dir` read-only, as [`AgentState`].
pub fn open(dir: &Path) -> Result<Store, Failure> {
    Ok(reopening(|| Store::<AgentState>::open_read_only(dir))?)
}
