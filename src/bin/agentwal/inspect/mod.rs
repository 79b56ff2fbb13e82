//! The read commands (tasks, history, show, calls, verify, dump, stats): each opens the
//! store read-only, so it works beside a live writer, and prints a table or JSON. All but
//! `dump` read a PostgreSQL store too (`open::Target`), printing the same shapes.

mod dump;
mod show;
mod stats;
mod tasks;
mod verify;

pub use dump::dump;
pub use show::{calls, show};
pub use stats::stats;
pub use tasks::{history, tasks};
pub use verify::verify;

use crate::open::Opened;
use crate::{Failure, Outcome};

/// Why a body that does not decode is not reported as damage.
const NOT_AGENT_STATE: &str = "not AgentState, the state type this CLI knows (the store was \
     most likely written with another State type)";

/// A usage error unless `store` holds `task`.
fn unknown_task(store: &Opened, task: &str) -> Outcome {
    if store.api().tasks()?.iter().any(|t| t == task) {
        Ok(())
    } else {
        Err(Failure::Usage(format!(
            "no task {task:?} in {}",
            store.name()
        )))
    }
}
