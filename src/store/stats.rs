//! Counters and sizes of a store.

use super::*;

impl<S: State> Store<S> {
    /// Counters and sizes (see [`Stats`]).
    pub fn stats(&self) -> Stats {
        let log = self.inner.log.stats();
        // A directory listing; on error the sizes are unknown, not fatal to `stats`.
        let sizes = self.inner.log.segment_sizes().unwrap_or_default();
        let free = self.inner.log.free_file_sizes().unwrap_or_default();
        let segments = sizes.len() as u64;
        let disk_bytes = sizes.iter().chain(&free).map(|(_, b)| b).sum();
        let (mut live_bytes, mut tasks, mut checkpoints) = (0, 0, 0);
        self.inner.index.for_each(|_, d| {
            live_bytes += d.live_bytes();
            tasks += u64::from(!d.checkpoints.is_empty() || !d.calls.is_empty());
            checkpoints += d.checkpoints.len() as u64;
        });
        let log_bytes = self.inner.report.bytes + log.bytes_written;
        Stats {
            commits: self.inner.commits.load(Ordering::Relaxed),
            appends: log.appends,
            fsyncs: log.fsyncs,
            batches: log.batches,
            mean_batch_records: if log.batches == 0 {
                0.0
            } else {
                log.appends as f64 / log.batches as f64
            },
            bytes_written: log.bytes_written,
            zero_bytes_written: log.zero_bytes_written,
            fill_bytes_written: log.fill_bytes_written,
            compaction_bytes_written: log.compaction_bytes_written,
            segments_created: log.rotations,
            segments_recycled: log.segments_recycled,
            live_bytes,
            dead_bytes: log_bytes.saturating_sub(live_bytes),
            segments,
            free_segments: free.len() as u64,
            disk_bytes,
            tasks,
            checkpoints,
            compactions: self.inner.compactions.load(Ordering::Relaxed),
        }
    }
}
