//! `store_ops`: a differential target. An arbitrary sequence of store operations runs
//! against a real [`Store`] (tiny segments, so rotation happens; snapshots every 1 to 4
//! commits; sometimes `keep_checkpoints`) and against a plain in-memory model. Every
//! answer must equal the model's: the same value, or an error of the same variant and
//! fields. A delta may carry a big message (up to 8 KiB, more than a 4 KiB segment), so
//! states grow larger than a segment and their snapshots, forks and big deltas get
//! segments of their own (format v2); compaction retires segment files, which rotations
//! recycle.
//!
//! Crashes: with `SyncMode::Always` every acknowledged operation is durable, so a crash may
//! only leave bytes that were never acknowledged. `Crash` drops the store (nothing is
//! flushed by a drop that a kill would not also skip; in a recycled segment the drop
//! appends a close record, which a kill would not) and then damages only what lies past
//! the last record of the newest segment: arbitrary garbage (a torn write of an
//! unacknowledged batch), or a cut of the preallocated zeros (or, in a recycled segment,
//! of an earlier life's bytes). The reopened store must equal the model exactly; garbage
//! must be reported as torn bytes, unless it follows a close record: after one, nothing
//! of this life follows, and bytes there are taken for an earlier life's.
//!
//! After every reopen, compaction and read-only view, a sweep compares every task, seq,
//! checkpoint list and tool call with the model.
//!
//! Journal pruning (docs/store.md §4): with `keep_checkpoints` set, each compaction pass
//! prunes the calls that finished before their task's oldest retained checkpoint. The
//! writer's index then hides them at once, but their two records leave the log only
//! when a pass drops both, which depends on where segments end; the model does not
//! track segments, so it leaves that open (`maybe_dropped`) and learns which it was from
//! the first answer that tells the two apart (a `begin_call` of the id, or a reopen),
//! holding every other answer exact meanwhile.

use arbitrary::{Arbitrary, Unstructured};

mod damage;
mod model;
mod ops;
mod run;

use ops::Input;
use run::run;

const OPS_MAX: usize = 48;
const TASKS: [&str; 4] = ["a", "b", "c", "d"];
const CALLS: [&str; 3] = ["k1", "k2", "k3"];
const TOOLS: [&str; 2] = ["search", "write"];
const BLOBS: [&[u8]; 4] = [b"", b"x", b"yy", &[b'z'; 300]];
const VAR_KEYS: [&str; 3] = ["phase", "step", "n"];
const GARBAGE_BYTES_MAX: usize = 64;

/// Decodes the input and runs it; panics where the store and the model disagree.
pub fn check(data: &[u8]) {
    let u = Unstructured::new(data);
    if let Ok(input) = Input::arbitrary_take_rest(u) {
        run(&input);
    }
}
