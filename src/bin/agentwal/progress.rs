//! Progress on stderr for the slow commands: a spinner or a bar, drawn only on a terminal.

use indicatif::{ProgressBar, ProgressStyle};

/// A spinner showing `msg` until it is finished.
pub fn spinner(msg: &'static str) -> ProgressBar {
    // indicatif draws nothing when stderr is not a terminal (piped output stays clean).
    let bar = ProgressBar::new_spinner().with_message(msg);
    bar.enable_steady_tick(std::time::Duration::from_millis(100));
    bar
}

/// A bar counting up to `len`, labelled `msg`.
pub fn bar(len: u64, msg: &'static str) -> ProgressBar {
    let bar = ProgressBar::new(len).with_message(msg);
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len}") {
        bar.set_style(style);
    }
    bar
}
