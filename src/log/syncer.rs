//! The syncer thread: leads the group-commit batches of records appended with
//! [`Log::append_then`](super::Log::append_then) that no blocking appender leads, so an
//! async commit waits for its batch without a thread of its own.
//!
//! Started at the first such append; stopped and joined when the last handle drops,
//! like the `Periodic` flusher (see `crate::background`).

use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use parking_lot::Mutex;

use super::Inner;
use crate::error::{Error, Result};

/// The log's syncer, once started.
#[derive(Default)]
pub(super) struct SyncerSlot {
    running: OnceLock<Syncer>,
    /// Serializes starting it.
    starting: Mutex<()>,
}

struct Syncer {
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
}

impl SyncerSlot {
    /// Starts the syncer unless it runs.
    pub fn ensure(&self, inner: &Arc<Inner>) -> Result<()> {
        if self.running.get().is_some() {
            return Ok(());
        }
        let _starting = self.starting.lock();
        if self.running.get().is_some() {
            return Ok(());
        }
        let writer_inner = inner.clone();
        let thread = std::thread::Builder::new()
            .name("agentwal-syncer".into())
            .spawn(move || {
                if let Some(writer) = &writer_inner.writer {
                    writer.run_syncer();
                }
            })
            .map_err(|e| Error::Io {
                context: "could not start the syncer thread".into(),
                source: e,
            })?;
        let syncer = Syncer {
            inner: inner.clone(),
            thread: Some(thread),
        };
        // Cannot be set already: checked under `starting`.
        let _ = self.running.set(syncer);
        Ok(())
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        if let Some(writer) = &self.inner.writer {
            writer.stop_syncer();
        }
        // Never joined from the syncer itself: a write it completed may have held the
        // last handle. It returns from its loop on its own, then drops the log.
        if let Some(thread) = self.thread.take()
            && thread.thread().id() != std::thread::current().id()
            && thread.join().is_err()
        {
            tracing::error!("the syncer thread panicked");
        }
    }
}
