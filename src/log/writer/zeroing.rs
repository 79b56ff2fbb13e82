//! Zeroing preallocated space ahead of the data: the writing of the zeros, and the policy
//! that decides when it pays.
//!
//! `fallocate` on ext4 and XFS reserves *unwritten* extents: the first write into one makes
//! a metadata change that the next fdatasync must persist (one more device round trip per
//! batch). Writing zeros ahead of the data, in large writes, makes that change once per
//! [`ZERO_AHEAD_MIN_BYTES`] instead of once per batch, but sends every byte of the segment
//! to the device twice (zeros, then data): a cost per byte. Which is cheaper depends on how
//! many bytes one fdatasync covers.
//!
//! Measured on the development machine (ext4, workload benchmark, medians of 5 rounds):
//! with about 3 KiB per sync (one task) zeroing was 37% faster; with ~23 KiB (16 tasks) 27%
//! faster; with ~40 KiB (32 tasks) 13% faster; with ~55 KiB (48 tasks) even; with ~74 KiB
//! (64 tasks) 21% slower. So the writer keeps a moving average of the bytes each sync
//! covers, stops zeroing ahead once it reaches [`SKIP_ZEROING_SYNC_BYTES`], and starts
//! again only below [`RESUME_ZEROING_SYNC_BYTES`]. Near the break-even point both choices
//! cost the same, and the gap keeps the writer from flapping there: at 64 tasks, waves of
//! snapshots push the average up and the plain steps between them sit just under the
//! break-even point.
//!
//! Either way, space past the data reads as zeros (written zeros, or unwritten extents), so
//! the choice changes nothing recovery sees.

use std::sync::atomic::Ordering;

use super::{Io, Writer};
use crate::error::Result;

/// The writer zeroes preallocated space once fewer than this many zeroed bytes remain
/// ahead of the data...
const ZERO_AHEAD_MIN_BYTES: u64 = 512 << 10;
/// ...up to this many bytes past the data.
const ZERO_AHEAD_MAX_BYTES: u64 = 1 << 20;
/// Zeros written per `pwrite` when zeroing ahead.
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

/// At or above this average of bytes per fdatasync, the writer stops zeroing ahead: the
/// extent conversion, paid once per sync, is then cheaper than writing the bytes twice.
pub(crate) const SKIP_ZEROING_SYNC_BYTES: u64 = 48 << 10;

/// Below this average of bytes per fdatasync, a writer that stopped zeroing starts again.
pub(crate) const RESUME_ZEROING_SYNC_BYTES: u64 = 24 << 10;

/// Weight of a new sample in the moving average, as a power of two (1/8).
const AVERAGE_SHIFT: u32 = 3;

/// The moving average of bytes per fdatasync, and the decision taken from it.
#[derive(Debug, Default)]
pub(crate) struct ZeroingPolicy {
    /// Average bytes of data per sync (0 until the first sample: zero ahead at first).
    sync_bytes_avg: u64,
    /// Set once the average reached `SKIP_ZEROING_SYNC_BYTES`, until it falls below
    /// `RESUME_ZEROING_SYNC_BYTES`.
    skipping: bool,
}

impl ZeroingPolicy {
    /// Records that an fdatasync made `bytes` of new data durable.
    pub fn observe_sync(&mut self, bytes: u64) {
        let avg = self.sync_bytes_avg;
        self.sync_bytes_avg = avg - (avg >> AVERAGE_SHIFT) + (bytes >> AVERAGE_SHIFT);
        if self.sync_bytes_avg >= SKIP_ZEROING_SYNC_BYTES {
            self.skipping = true;
        } else if self.sync_bytes_avg < RESUME_ZEROING_SYNC_BYTES {
            self.skipping = false;
        }
    }

    /// Whether zeroing ahead is worth its write volume at the current batch sizes.
    pub fn zero_ahead(&self) -> bool {
        !self.skipping
    }
}

impl Io {
    /// Writes zeros past the data when fewer than `ZERO_AHEAD_MIN_BYTES` are zeroed, so
    /// later batches land on written (not unwritten) extents, unless the policy says batches
    /// are large enough not to bother. The zeros go only past `write_pos` and within the
    /// segment; the next fdatasync makes them durable. Returns the bytes of zeros written.
    pub(super) fn zero_ahead(&mut self, w: &Writer) -> Result<u64> {
        self.zero_ahead_within(self.segment_end, w)
    }

    /// [`zero_ahead`](Self::zero_ahead), but not past `limit`.
    pub(super) fn zero_ahead_within(&mut self, limit: u64, w: &Writer) -> Result<u64> {
        // Sealed, successor not created yet: nothing to write ahead of.
        if !self.zeroing.zero_ahead() || self.file.is_none() {
            return Ok(0);
        }
        let from = self.zeroed_end.max(self.write_pos);
        let to = (self.write_pos + ZERO_AHEAD_MAX_BYTES)
            .min(self.segment_end)
            .min(limit);
        if from >= to || from >= self.write_pos + ZERO_AHEAD_MIN_BYTES {
            return Ok(0);
        }
        self.allocate_through(to)?;
        debug_assert!(to <= self.allocated_end, "zeros stay inside the file");
        let mut at = from;
        while at < to {
            let n = (to - at).min(ZEROS.len() as u64) as usize;
            self.file()?
                .write_all_at(&ZEROS[..n], at)
                .map_err(|e| self.err("zeroing preallocated space in", e))?;
            at += n as u64;
        }
        w.counters
            .zero_bytes_written
            .fetch_add(to - from, Ordering::Relaxed);
        self.zeroed_end = to;
        Ok(to - from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_syncs_zero_and_large_syncs_do_not() {
        let mut p = ZeroingPolicy::default();
        assert!(
            p.zero_ahead(),
            "no history: zero (one task is the common case)"
        );
        for _ in 0..100 {
            p.observe_sync(3 << 10);
        }
        assert!(p.zero_ahead());
        for _ in 0..100 {
            p.observe_sync(80 << 10);
        }
        assert!(!p.zero_ahead());
        for _ in 0..100 {
            p.observe_sync(3 << 10);
        }
        assert!(p.zero_ahead(), "back to small batches: zero again");
    }

    #[test]
    fn between_the_thresholds_the_last_decision_holds() {
        let mut p = ZeroingPolicy::default();
        for _ in 0..100 {
            p.observe_sync(36 << 10);
        }
        assert!(p.zero_ahead(), "rising into the gap: still zeroing");
        for _ in 0..100 {
            p.observe_sync(80 << 10);
        }
        for _ in 0..100 {
            p.observe_sync(36 << 10);
        }
        assert!(!p.zero_ahead(), "falling into the gap: still skipping");
    }

    #[test]
    fn one_large_batch_does_not_flip_the_decision() {
        let mut p = ZeroingPolicy::default();
        for _ in 0..100 {
            p.observe_sync(3 << 10);
        }
        p.observe_sync(300 << 10);
        assert!(p.zero_ahead());
    }

    #[test]
    fn average_converges_to_a_steady_sample() {
        let mut p = ZeroingPolicy::default();
        for _ in 0..200 {
            p.observe_sync(64 << 10);
        }
        let diff = p.sync_bytes_avg.abs_diff(64 << 10);
        assert!(diff <= 8, "average {} for 64 KiB samples", p.sync_bytes_avg);
    }
}
