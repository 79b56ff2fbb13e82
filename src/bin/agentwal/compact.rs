//! `agentwal compact`: compacts an existing store now, under the writer lock, with the
//! retention given on the command line.

use std::path::Path;

use agentwal::{AgentState, Error, Options, Store};
use serde_json::json;

use crate::open::open;
use crate::progress::spinner;
use crate::render::{self, print_json};
use crate::{Failure, Outcome};

/// Runs `agentwal compact`.
pub fn compact(
    dir: &Path,
    keep_checkpoints: Option<u32>,
    max_age_secs: Option<u64>,
    json: bool,
) -> Outcome {
    let options = Options {
        auto_compact: false,
        keep_checkpoints,
        max_age: max_age_secs.map(std::time::Duration::from_secs),
        ..Options::default()
    };
    // Refuse anything but an existing store: compact must never create one.
    drop(open(dir)?);
    let store = match Store::<AgentState>::open_with(dir, options) {
        Err(Error::Locked { dir }) => {
            return Err(Failure::Usage(format!(
                "{} is in use by a running writer (it holds the lock); its background compaction \
                 runs on its own, or stop it and run compact again",
                dir.display()
            )));
        }
        other => other?,
    };
    let spin = spinner("compacting");
    let report = store.compact()?;
    spin.finish_and_clear();
    if json {
        print_json(&json!({
            "segments_deleted": report.segments_deleted, "records_rewritten": report.records_rewritten,
            "bytes_reclaimed": report.bytes_reclaimed, "elapsed_ms": report.elapsed_ms,
        }));
    } else {
        println!(
            "compacted: {} segment(s) deleted, {} record(s) rewritten, {} reclaimed in {} ms",
            report.segments_deleted,
            report.records_rewritten,
            render::size(report.bytes_reclaimed),
            report.elapsed_ms
        );
    }
    Ok(())
}
