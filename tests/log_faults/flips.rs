//! Every bit flip of an acknowledged record is `Corruption` at that record.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use agentwal::Error;
use agentwal::log::SyncMode;
use agentwal::log::{FORMAT_VERSION, segment_file_name};

use crate::helpers::{
    HEADER, HEADER_VERSION_BYTES, open_collect, scratch, sweep_options, with_sync,
};
use crate::one_segment::{OneSegment, build_concurrent, build_sequential};

/// Flips every bit of `region` in a copy of `built`, one at a time, and opens it.
/// Returns (corruption errors, unsupported-format errors, torn tails) seen.
fn flip_sweep(built: &OneSegment, region: std::ops::Range<u64>) -> (u64, u64, u64) {
    let work = scratch();
    let dir = work.path();
    let path = dir.join(segment_file_name(1));
    std::fs::write(&path, &built.bytes).expect("write segment");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("open segment");
    let opts = with_sync(built.opts, SyncMode::Never);
    let final_batch_start = built
        .batch_ends
        .iter()
        .rev()
        .nth(1)
        .copied()
        .unwrap_or(HEADER);
    let mut counts = (0, 0, 0);
    let mut after = Vec::with_capacity(built.bytes.len());
    for byte in region {
        let owner = built.records.iter().position(|r| r.contains(byte));
        let expected_offset = owner.map_or(0, |i| built.records[i].offset);
        for bit in 0..8 {
            let what = format!("{}: flip of byte {byte} bit {bit}", built.what);
            let flipped = built.bytes[byte as usize] ^ (1 << bit);
            file.write_all_at(&[flipped], byte).expect("flip");
            match open_collect(dir, opts) {
                Err(Error::Corruption {
                    segment, offset, ..
                }) => {
                    assert_eq!(
                        (segment.as_path(), offset),
                        (path.as_path(), expected_offset),
                        "{what}"
                    );
                    counts.0 += 1;
                }
                Err(Error::UnsupportedFormat {
                    segment,
                    found,
                    supported,
                }) if HEADER_VERSION_BYTES.contains(&byte) => {
                    let shift = 8 * (byte - HEADER_VERSION_BYTES.start) + bit;
                    assert_eq!(
                        (segment.as_path(), found, supported),
                        (
                            path.as_path(),
                            FORMAT_VERSION ^ (1 << shift),
                            FORMAT_VERSION
                        ),
                        "{what}"
                    );
                    counts.1 += 1;
                }
                Ok((log, seen)) if byte >= final_batch_start => {
                    // The final batch may be a torn write: dropped whole, nothing else lost.
                    let kept = built
                        .records
                        .iter()
                        .take_while(|r| r.end() <= final_batch_start)
                        .count();
                    assert_eq!(seen, &built.records[..kept], "{what}");
                    let r = log.recovery();
                    assert_eq!(r.records, kept as u64, "{what}");
                    assert!(r.torn_bytes > 0, "{what}: {r:?}");
                    drop(log);
                    // The writer zeroed the torn bytes: restore the segment.
                    file.write_all_at(&built.bytes, 0).expect("restore");
                    counts.2 += 1;
                    file.write_all_at(&[built.bytes[byte as usize]], byte)
                        .expect("unflip");
                    continue;
                }
                Err(e) => panic!("{what}: unexpected error {e}"),
                Ok((log, seen)) => panic!(
                    "{what}: opened, recovering {} records ({:?})",
                    seen.len(),
                    log.recovery()
                ),
            }
            // A failed open leaves the segment as it found it.
            after.clear();
            after.resize(built.bytes.len(), 0);
            file.read_exact_at(&mut after, 0).expect("read back");
            assert_eq!(
                after[byte as usize], flipped,
                "{what}: open modified the file"
            );
            after[byte as usize] = built.bytes[byte as usize];
            assert!(after == built.bytes, "{what}: open modified the file");
            file.write_all_at(&[built.bytes[byte as usize]], byte)
                .expect("unflip");
        }
    }
    counts
}

#[test]
fn every_bit_flip_in_acknowledged_records_is_corruption_at_that_record() {
    let built = build_sequential(
        "always, sequential",
        sweep_options(SyncMode::Always),
        20,
        None,
    );
    let (corrupt, unsupported, torn) = flip_sweep(&built, 0..built.data_end);
    let last = built.records.last().unwrap();
    let final_batch_bits = 8 * (last.end() - last.offset);
    assert_eq!(corrupt + unsupported + torn, 8 * built.data_end);
    // Every flip outside the final batch is an error; flips inside it are torn tails.
    assert_eq!(torn, final_batch_bits);
    eprintln!(
        "{}: {} flips over {} bytes: {corrupt} corruption, {unsupported} unsupported \
         format, {torn} torn tails",
        built.what,
        8 * built.data_end,
        built.data_end
    );
}

#[test]
fn every_bit_flip_inside_multi_record_batches_is_corruption_at_that_record() {
    let built = build_concurrent();
    let (corrupt, unsupported, torn) = flip_sweep(&built, HEADER..built.data_end);
    let final_batch_start = built.batch_ends[built.batch_ends.len() - 2];
    assert_eq!(unsupported, 0);
    assert_eq!(torn, 8 * (built.data_end - final_batch_start));
    eprintln!(
        "{}: {} flips: {corrupt} corruption, {torn} torn tails",
        built.what,
        8 * (built.data_end - HEADER)
    );
}
