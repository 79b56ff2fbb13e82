//! Filling the rest of a write's last block where the blocks were written before.
//!
//! Past the data, a recycled file (docs/format.md §6) holds its earlier life's bytes, and a segment
//! reopened after a restart holds the zeros an earlier process wrote ahead. Those blocks
//! are written, so the page cache cannot make up a block it does not hold: a `write` that
//! covers only part of one must read it from the device first, on the leader's path and
//! before the batch's fdatasync. A batch ends inside a block almost every time, so in a
//! recycled file whose pages were evicted almost every batch waited for a read (measured:
//! 0.67–0.80× the commits/s of the same store with the file cached, at 1 and 8 tasks;
//! bench-results/format-v2.md, "The cold recycled file").
//!
//! So in those blocks the writer extends each write with zeros to the end of its last
//! block: a write that covers whole blocks needs no read, and the next batch starts in a
//! block this writer wrote, which the cache holds. The device writes the same blocks
//! either way (a block is written back whole). Reading ahead instead (`posix_fadvise`)
//! was tried and measured worse: it reads every block, though a batch overwrites all but
//! its last, and those reads compete with the fdatasyncs (section 5).
//!
//! Zeros past the data read as unwritten space, as the earlier life's bytes do not
//! validate (docs/format.md §3): recovery sees no difference.

use super::Io;

/// The file system block the fill rounds up to: ext4's and XFS's usual block size. Where
/// blocks are smaller the fill still covers whole blocks; where larger, some reads remain.
pub(super) const FILL_BLOCK_BYTES: u64 = 4096;

/// How many zeros follow a write ending at `end`: up to the end of its block, when that
/// block lies below `cold_end` (written before the writer took the segment).
fn fill_after(end: u64, cold_end: u64) -> u64 {
    if end >= cold_end {
        return 0;
    }
    let block_end = end.div_ceil(FILL_BLOCK_BYTES) * FILL_BLOCK_BYTES;
    block_end.min(cold_end) - end
}

impl Io {
    /// Zeros to write after data ending at `end` (see the module's doc).
    pub(super) fn fill_after(&self, end: u64) -> u64 {
        fill_after(end, self.cold_end)
    }

    /// Starts a segment the writer has just taken, whose blocks were written up to
    /// `written_end` before (by an earlier life of the file, or an earlier writer).
    pub(super) fn set_cold_end(&mut self, written_end: u64) {
        self.cold_end = written_end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_into_written_blocks_ends_on_a_block_boundary() {
        let cold_end = 64 << 20;
        for end in [41, 4095, 4097, 100_000, (1 << 20) + 1] {
            let fill = fill_after(end, cold_end);
            assert_eq!((end + fill) % FILL_BLOCK_BYTES, 0, "end {end}");
            assert!(fill < FILL_BLOCK_BYTES);
        }
        assert_eq!(fill_after(8192, cold_end), 0, "already on a boundary");
    }

    #[test]
    fn nothing_is_filled_at_or_past_the_written_blocks() {
        assert_eq!(fill_after(40, 40), 0, "a fresh segment");
        assert_eq!(fill_after(9000, 4096), 0, "past them");
        assert_eq!(fill_after(4000, 4050), 50, "up to their end, not past it");
    }
}
