//! Background threads owned by a handle: dropping the handle stops the thread and waits
//! for it, so whatever the thread was doing (an fdatasync, a compaction pass) is over, and
//! the log it used is released, before the drop returns.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// The stop flag and the condition variable the thread sleeps on.
type StopSignal = (Mutex<bool>, Condvar);

/// A thread that runs `step` every `interval` until `step` breaks or the handle drops.
pub(crate) struct Periodic {
    stop: Arc<StopSignal>,
    thread: Option<JoinHandle<()>>,
}

impl Periodic {
    /// Starts the thread; `None` (with a warning) if the OS refuses a thread.
    pub fn spawn(
        name: &str,
        interval: Duration,
        mut step: impl FnMut() -> ControlFlow<()> + Send + 'static,
    ) -> Option<Self> {
        let stop: Arc<StopSignal> = Arc::new((Mutex::new(false), Condvar::new()));
        let signal = stop.clone();
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while sleep_unless_stopped(&signal, interval) {
                    if step().is_break() {
                        return;
                    }
                }
            });
        match spawned {
            Ok(thread) => Some(Periodic {
                stop,
                thread: Some(thread),
            }),
            Err(e) => {
                tracing::warn!(thread = name, error = %e, "could not start a background thread");
                None
            }
        }
    }
}

/// Sleeps for `interval` or until stopped; returns whether to go on.
fn sleep_unless_stopped(signal: &StopSignal, interval: Duration) -> bool {
    let mut stopped = signal.0.lock();
    if !*stopped {
        signal.1.wait_for(&mut stopped, interval);
    }
    !*stopped
}

impl Drop for Periodic {
    fn drop(&mut self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        if let Some(thread) = self.thread.take() {
            // Never join from the thread itself (its step dropped the last handle).
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

/// Lowers the calling thread's scheduling priority to nice `nice` (Linux: a thread has a
/// nice value of its own). Best effort: a failure is logged and the thread runs on at the
/// priority it had.
pub(crate) fn lower_this_thread_priority(nice: i32) {
    // SAFETY: plain syscalls on the calling thread's own id; no memory is passed.
    let rc = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS as _, tid as libc::id_t, nice)
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        tracing::warn!(nice, error = %e, "could not lower a background thread's priority");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn runs_until_dropped_and_drop_waits_for_the_step() {
        let steps = Arc::new(AtomicU32::new(0));
        let seen = steps.clone();
        let thread = Periodic::spawn("test-periodic", Duration::from_millis(1), move || {
            seen.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(2));
            seen.fetch_add(1, Ordering::SeqCst);
            ControlFlow::Continue(())
        })
        .expect("spawn");
        while steps.load(Ordering::SeqCst) < 4 {
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(thread);
        let at_drop = steps.load(Ordering::SeqCst);
        assert_eq!(at_drop % 2, 0, "drop returned in the middle of a step");
        std::thread::sleep(Duration::from_millis(10));
        assert_eq!(
            steps.load(Ordering::SeqCst),
            at_drop,
            "a step ran after the drop"
        );
    }

    #[test]
    fn a_break_ends_the_thread() {
        let thread = Periodic::spawn("test-periodic", Duration::from_millis(1), || {
            ControlFlow::Break(())
        })
        .expect("spawn");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !thread.thread.as_ref().is_some_and(|t| t.is_finished()) {
            assert!(
                std::time::Instant::now() < deadline,
                "still running after 10 s"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
