//! Reading ahead the blocks a writer is about to overwrite.
//!
//! Past the data, a recycled file (§2.7) holds its earlier life's bytes, and a segment
//! reopened after a restart holds the zeros an earlier process wrote ahead. Those blocks
//! are written, so the page cache cannot make up their pages: a `write` that covers part
//! of a page it does not hold must read that page from the device first, on the leader's
//! path, before the batch's fdatasync. A batch smaller than a page then waits for one
//! read of its own (measured: 0.70–0.75× the commits/s of a fresh store at 1 and 8 tasks,
//! bench-results/v2-margins.md). Asking the kernel to read the next window ahead in the
//! background makes that one read per window instead of one per page.
//!
//! Blocks written by this writer (its batches, its zeros ahead) are cached already, and
//! unwritten extents read as zeros without a read, so only the bytes that were written
//! before the writer took the segment (`cold_end`) are read ahead. The advice changes no
//! byte of the file, so it changes nothing that recovery sees.

use super::Io;

/// The writer asks for the next window once fewer than this many bytes ahead of the data
/// have been asked for...
const READ_AHEAD_MIN_BYTES: u64 = 512 << 10;
/// ...up to this many bytes past the data.
const READ_AHEAD_MAX_BYTES: u64 = 1 << 20;
/// Reads go by pages: a window starts on a page boundary.
const PAGE_BYTES: u64 = 4096;

/// The window to ask for, as `(offset, len)`, when the data at `write_pos` comes within
/// `READ_AHEAD_MIN_BYTES` of `asked_end` (where the last window ended) and written bytes
/// from before the writer (up to `cold_end`) remain ahead; `None` otherwise.
fn next_window(write_pos: u64, asked_end: u64, cold_end: u64) -> Option<(u64, u64)> {
    if write_pos + READ_AHEAD_MIN_BYTES <= asked_end {
        return None;
    }
    let start = asked_end.max(write_pos);
    let to = (write_pos + READ_AHEAD_MAX_BYTES).min(cold_end);
    let from = start / PAGE_BYTES * PAGE_BYTES;
    (start < to).then(|| (from, to - from))
}

impl Io {
    /// Asks for the next window of pre-existing blocks ahead of the data to be read into
    /// the page cache, when it is time to (see the module's doc).
    pub(super) fn read_ahead(&mut self) {
        let Some(file) = self.file.as_deref() else {
            return;
        };
        if let Some((offset, len)) = next_window(self.write_pos, self.read_ahead_end, self.cold_end)
        {
            file.advise_will_need(offset, len);
            self.read_ahead_end = offset + len;
        }
    }

    /// Starts read-ahead afresh for a segment the writer has just taken, whose written
    /// blocks end at `written_end` (by an earlier life of the file, or an earlier writer).
    pub(super) fn reset_read_ahead(&mut self, written_end: u64) {
        self.cold_end = written_end;
        self.read_ahead_end = self.write_pos;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drives the planner over a run of writes of `write_bytes` from `start`, and returns
    /// the windows it asked for; asserts every write below `cold_end` was covered first.
    fn drive(start: u64, cold_end: u64, write_bytes: u64, writes: u64) -> Vec<(u64, u64)> {
        let (mut pos, mut asked_end, mut windows) = (start, start, Vec::new());
        for _ in 0..writes {
            if let Some((offset, len)) = next_window(pos, asked_end, cold_end) {
                assert!(offset <= pos.max(asked_end), "no gap before a window");
                windows.push((offset, len));
                asked_end = offset + len;
            }
            let end = (pos + write_bytes).min(cold_end);
            assert!(
                pos >= cold_end || end <= asked_end,
                "write at {pos} not read ahead"
            );
            pos += write_bytes;
        }
        windows
    }

    #[test]
    fn every_write_into_pre_existing_blocks_is_read_ahead_first() {
        for write_bytes in [100, 1900, 4096, 70_000, 300_000] {
            let windows = drive(40, 4 << 20, write_bytes, 200);
            assert!(!windows.is_empty());
            for (offset, len) in windows {
                assert_eq!(offset % PAGE_BYTES, 0, "windows start on a page");
                assert!(len <= READ_AHEAD_MAX_BYTES + PAGE_BYTES);
                assert!(offset + len <= 4 << 20, "never past the written blocks");
            }
        }
    }

    #[test]
    fn small_writes_ask_once_per_window_not_once_per_write() {
        let windows = drive(40, 64 << 20, 1900, 2000);
        // 2000 × 1900 B ≈ 3.6 MiB of data: a window about every 512 KiB of it.
        assert!(
            (6..=9).contains(&windows.len()),
            "{} windows",
            windows.len()
        );
    }

    #[test]
    fn nothing_is_asked_for_without_pre_existing_blocks_ahead() {
        assert_eq!(next_window(40, 40, 40), None, "a fresh segment");
        assert_eq!(next_window(8192, 8192, 4096), None, "past them already");
        assert!(drive(40, 40, 1900, 100).is_empty());
    }
}
