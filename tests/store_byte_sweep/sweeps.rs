//! The sweeps: every cut and zeroed tail, every single-bit flip, and the judgement of
//! what recovery returns.

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::common::panic_text;
use agentwal::storage::sim::SimStorage;
use agentwal::{AgentState, Error, Store};

use crate::image::{Built, open_image};
use crate::workload::{
    AFTER_TASK, Answer, FILL_BLOCK_BYTES, FLIP_PAST_END, HEADER, answer, delta, open,
};

/// Checks an opened store answers `want`, then commits once more and checks a reopen from
/// the durable image sees that commit (writing after the recovery's repair works).
fn check_recovered(store: Store, sim: &SimStorage, want: &Answer) -> Result<(), String> {
    let checks = || -> Result<(), String> {
        let got = answer(&store).map_err(|e| format!("answer after open: {e}"))?;
        if &got != want {
            return Err(format!(
                "wrong state after open:\n got {got:?}\nwant {want:?}"
            ));
        }
        let seq = store
            .commit(AFTER_TASK, &delta(99))
            .map_err(|e| format!("commit after recovery: {e}"))?;
        if seq != 1 {
            return Err(format!("commit after recovery got seq {seq}"));
        }
        let before = answer(&store).map_err(|e| format!("answer after commit: {e}"))?;
        drop(store);
        let again = SimStorage::from_image(&sim.durable_image());
        let reopened = open(&again).map_err(|e| format!("reopen after commit: {e}"))?;
        let after = answer(&reopened).map_err(|e| format!("answer after reopen: {e}"))?;
        let mut with_commit = want.clone();
        with_commit.tasks.push(AFTER_TASK.to_string());
        with_commit.tasks.sort();
        let mut state = AgentState::default();
        agentwal::State::apply(&mut state, &delta(99));
        let t = with_commit.by_task.get_mut(AFTER_TASK).expect("after task");
        t.latest = Some((1, state));
        t.checkpoints = vec![(1, false)];
        if before != with_commit || after != with_commit {
            return Err(format!(
                "the commit after recovery is not there:\nbefore reopen {before:?}\n\
                 after reopen {after:?}\nwant {with_commit:?}"
            ));
        }
        Ok(())
    };
    catch_unwind(AssertUnwindSafe(checks))
        .unwrap_or_else(|p| Err(format!("panicked: {}", panic_text(&p))))
}

/// Damage that keeps a prefix of the segment: cut at `k`, or zeros from `k` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Damage {
    Truncate,
    Zero,
}

/// Recovery from `damage` at every offset `0..=records_end`; returns the failures.
pub(crate) fn prefix_sweep(built: &Built, damage: Damage) -> Vec<String> {
    let mut failures = Vec::new();
    for k in 0..=built.records_end() {
        let mut bytes = built.bytes.clone();
        match damage {
            Damage::Truncate => bytes.truncate(k),
            Damage::Zero => bytes[k..].fill(0),
        }
        let n = built.intact(&bytes);
        // Zeroing from 36 on leaves the header whole: its last 4 bytes are a zero pad.
        let header_damaged = bytes.get(..HEADER) != Some(&built.bytes[..HEADER]);
        let fail = |why: String| format!("{damage:?} at {k} ({n} records intact): {why}");
        let (sim, opened) = match open_image(&built.with_segment(bytes)) {
            Ok(o) => o,
            Err(why) => {
                failures.push(fail(why));
                continue;
            }
        };
        match opened {
            // A damaged segment header fails the open (it holds no data to lose).
            Err(
                Error::Corruption {
                    segment, offset: 0, ..
                }
                | Error::UnsupportedFormat { segment, .. },
            ) if header_damaged && segment == built.segment => {}
            Err(e) => failures.push(fail(format!("open failed: {e}"))),
            Ok(_) if header_damaged => failures.push(fail("a damaged header opened".into())),
            Ok(store) => {
                if let Err(why) = check_recovered(store, &sim, built.expected_after(n)) {
                    failures.push(fail(why));
                }
            }
        }
    }
    failures
}

#[derive(Debug, Default)]
pub(crate) struct FlipCounts {
    pub(crate) flips: u64,
    pub(crate) corruption: u64,
    pub(crate) unsupported: u64,
    pub(crate) ignored: u64,
}

/// Every bit flip of `[0, records_end + FLIP_PAST_END)` and of the `FLIP_PAST_END` bytes
/// from the next block boundary on (an earlier life's, in a recycled segment); returns the
/// counts and failures.
pub(crate) fn flip_sweep(built: &Built) -> (FlipCounts, Vec<String>) {
    let mut counts = FlipCounts::default();
    let mut failures = Vec::new();
    let ops = built.spans.len();
    let in_close = |byte: usize| {
        built
            .close
            .is_some_and(|c| (c.start..c.end).contains(&byte))
    };
    let old_life = built.records_end().div_ceil(FILL_BLOCK_BYTES) * FILL_BLOCK_BYTES;
    let past_block = (old_life..old_life + FLIP_PAST_END).filter(|&b| b < built.bytes.len());
    for byte in (0..built.records_end() + FLIP_PAST_END).chain(past_block) {
        let record = built.record_at(byte);
        for bit in 0..8 {
            counts.flips += 1;
            let mut bytes = built.bytes.clone();
            bytes[byte] ^= 1 << bit;
            let fail = |why: String| {
                let at = match record {
                    Some(r) => format!("record {r} of {ops}"),
                    None if byte < HEADER => "the segment header".into(),
                    None if in_close(byte) => "the close record".into(),
                    None => "past the data".into(),
                };
                format!("flip of byte {byte} bit {bit} (in {at}): {why}")
            };
            let (sim, opened) = match open_image(&built.with_segment(bytes)) {
                Ok(o) => o,
                Err(why) => {
                    failures.push(fail(why));
                    continue;
                }
            };
            // Where a corruption report may point: the damaged record (or the header).
            let lowest = record.map_or(0, |r| built.spans[r].start);
            let past_data = byte >= built.data_end();
            // The last batch, which a flip turns into a torn tail: the close record if
            // there is one, else the last user record.
            let last_batch = match built.close {
                Some(_) => in_close(byte),
                None => record == Some(ops - 1),
            };
            match opened {
                Err(Error::Corruption {
                    segment,
                    offset,
                    reason,
                }) => {
                    let offset = offset as usize;
                    if segment != built.segment || !(lowest..=byte).contains(&offset) {
                        failures.push(fail(format!(
                            "corruption reported in {} at {offset} ({reason})",
                            segment.display()
                        )));
                    } else if past_data {
                        failures.push(fail(format!(
                            "garbage past the data is corruption at {offset} ({reason})"
                        )));
                    } else {
                        counts.corruption += 1;
                    }
                }
                Err(Error::UnsupportedFormat { segment, .. })
                    if byte < HEADER && segment == built.segment =>
                {
                    counts.unsupported += 1;
                }
                Err(e) => failures.push(fail(format!("open failed: {e}"))),
                Ok(store) => {
                    // A flip in the last batch looks exactly like a torn tail (docs/log.md
                    // §4.1): that batch is dropped (a close record holds no operation).
                    // Past the data: nothing is lost.
                    let want = match record {
                        _ if last_batch && built.close.is_some() => ops,
                        Some(r) if last_batch => r,
                        None if past_data && !last_batch => ops,
                        _ => {
                            let why = "opened: silent wrong state or lost acknowledged record";
                            failures.push(fail(why.into()));
                            continue;
                        }
                    };
                    match check_recovered(store, &sim, built.expected_after(want)) {
                        Ok(()) => counts.ignored += 1,
                        Err(why) => failures.push(fail(why)),
                    }
                }
            }
        }
    }
    (counts, failures)
}
