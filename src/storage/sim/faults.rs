//! Injected faults: the operation counter, and whether the operation it numbers fails
//! (an I/O error once or from then on) or finds the power already cut.

use std::io;

/// The operation counter and the faults injected at its numbers.
#[derive(Debug, Default)]
pub(super) struct Faults {
    /// Operations started so far (failed ones included).
    pub(super) ops: u64,
    /// The operation that fails, and whether every later one does too.
    pub(super) fail: Option<(u64, bool)>,
    /// The first operation after the power loss.
    pub(super) crash_at: Option<u64>,
}

impl Faults {
    /// Numbers the next operation; the error it fails with instead of taking effect, if
    /// a fault is injected there.
    pub(super) fn start(&mut self) -> Option<io::Error> {
        let n = self.ops;
        self.ops += 1;
        let crashed = self.crash_at.is_some_and(|c| n >= c);
        let failed = self
            .fail
            .is_some_and(|(f, always)| n == f || always && n > f);
        match (crashed, failed) {
            (true, _) => Some(io::Error::other(format!("simulated power loss at {n}"))),
            (false, true) => Some(io::Error::other(format!(
                "simulated I/O error at operation {n}"
            ))),
            (false, false) => None,
        }
    }
}
