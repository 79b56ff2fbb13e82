//! The leader's loop: driving batches until an appender's record is written (and durable
//! if asked), finishing a batch (or poisoning the handle when it failed), waking the next
//! leader and the waiters, and running the completions of `append_then` records.

use parking_lot::MutexGuard;

use super::{Batch, Completion, Shared, Writer};
use crate::error::{Error, Result};
use crate::log::SyncMode;

impl Writer {
    /// Waits until every LSN below `target` is written (and durable if `durable`),
    /// leading batches while no one else does.
    pub(super) fn drive<'a>(
        &'a self,
        mut shared: MutexGuard<'a, Shared>,
        target: u64,
        durable: bool,
    ) -> Result<()> {
        loop {
            let reached = if durable {
                shared.durable_lsn
            } else {
                shared.written_lsn
            };
            if reached >= target {
                return Ok(());
            }
            if let Some(cause) = &shared.poisoned {
                return Err(Error::Poisoned {
                    cause: cause.clone(),
                });
            }
            if shared.leader_active {
                // Everything queued now goes into the next batch; the one in flight
                // suffices if it holds `target - 1` and syncs when durability is wanted.
                let in_flight_suffices =
                    target <= shared.in_flight_end && (!durable || shared.in_flight_sync);
                let batch_no = shared.taken + u64::from(!in_flight_suffices);
                self.wake[parity(batch_no)].wait(&mut shared);
                continue;
            }
            shared.leader_active = true;
            shared.taken += 1;
            let batch_no = shared.taken;
            let sync = durable || matches!(self.sync, SyncMode::Always);
            shared.in_flight_end = shared.next_lsn;
            shared.in_flight_sync = sync;
            let spare = std::mem::take(&mut shared.spare);
            let mut batch = std::mem::replace(&mut shared.queue, spare);
            drop(shared);
            let outcome = self.io.lock().write_batch(&mut batch, sync, self);
            shared = self.shared.lock();
            let finished = self.finish_batch(&mut shared, batch, outcome);
            self.wake_after(batch_no);
            let done = take_done(&mut shared, self.sync);
            if !shared.completions.is_empty() {
                // Records of `append_then` still wait: the syncer leads them if no
                // blocking appender does.
                self.async_work.notify_one();
            }
            if !done.is_empty() {
                drop(shared);
                run_completions(done, &finished);
                shared = self.shared.lock();
            }
            finished?;
        }
    }

    /// The leader's bookkeeping once `batch` is written (`outcome`: whether everything
    /// written is durable), under `shared`: advances the written and durable LSNs, or
    /// poisons the handle and wakes everyone to report it.
    fn finish_batch(
        &self,
        shared: &mut Shared,
        mut batch: Batch,
        outcome: Result<bool>,
    ) -> Result<()> {
        shared.leader_active = false;
        match outcome {
            Ok(durable_through) => {
                if let Some(last) = batch.records.last() {
                    shared.written_lsn = last.lsn + 1;
                }
                if durable_through {
                    shared.durable_lsn = shared.written_lsn;
                }
                debug_assert!(
                    shared.durable_lsn <= shared.written_lsn
                        && shared.written_lsn <= shared.next_lsn,
                    "durable <= written <= reserved"
                );
                batch.clear();
                shared.spare = batch;
                Ok(())
            }
            Err(e) => {
                self.poison_locked(shared, &e);
                Err(e)
            }
        }
    }

    /// Refuses every later write through this handle, and wakes the waiters to say so.
    pub(super) fn poison(&self, e: &crate::error::Error) {
        self.poison_locked(&mut self.shared.lock(), e);
    }

    fn poison_locked(&self, shared: &mut Shared, e: &crate::error::Error) {
        tracing_fsync_error(e);
        shared.poisoned.get_or_insert_with(|| e.to_string());
        for cv in &self.wake {
            cv.notify_all();
        }
    }

    /// Wakes, after batch `batch_no` is written: first the next leader, so the disk gets
    /// the next batch without delay; then the waiters this batch satisfied.
    fn wake_after(&self, batch_no: u64) {
        let next = &self.wake[parity(batch_no + 1)];
        if matches!(self.sync, SyncMode::Always) {
            // Every batch syncs, so no waiter of the next batch is satisfied by this
            // one: the thread woken leads, or finds a leader that will wake it.
            next.notify_one();
        } else {
            // A waiter of the next batch may be satisfied by this one (a flush whose
            // records this unsynced batch made durable by rotating) and leave without
            // leading; wake them all so that someone takes the queue.
            next.notify_all();
        }
        self.wake[parity(batch_no)].notify_all();
    }
}

/// The completions a finished batch satisfied: those written (and durable, under
/// `Always`), or all of them once the handle is poisoned.
fn take_done(shared: &mut Shared, sync: SyncMode) -> Vec<Completion> {
    let reached = match (&shared.poisoned, sync) {
        (Some(_), _) => u64::MAX,
        (None, SyncMode::Always) => shared.durable_lsn,
        (None, _) => shared.written_lsn,
    };
    let ready = shared
        .completions
        .iter()
        .take_while(|c| c.appended.lsn < reached)
        .count();
    shared.completions.drain(..ready).collect()
}

/// Tells each completion its outcome: its record's position, or the batch's failure.
/// Called with no lock of the writer held: a completion takes the store's locks.
fn run_completions(done: Vec<Completion>, batch: &Result<()>) {
    for c in done {
        let outcome = match batch {
            Ok(()) => Ok(c.appended),
            Err(e) => Err(Error::Poisoned {
                cause: e.to_string(),
            }),
        };
        c.then.done(outcome);
    }
}

fn parity(batch_no: u64) -> usize {
    (batch_no % 2) as usize
}

fn tracing_fsync_error(e: &Error) {
    tracing::error!(error = %e, "write or fsync failed; the log handle is poisoned");
}
