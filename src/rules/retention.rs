//! Which checkpoints retention serves (`keep_checkpoints`, `max_age`; docs/store.md §7) and
//! where a fold starts (the fold-base rule): the same on both backends.

use std::time::Duration;

/// Whether a fold can start at checkpoint `seq`: only at a snapshot, or at a task's first
/// checkpoint (seq 1, folded onto the default state). A history whose oldest stored
/// checkpoint is a delta after seq 1 cannot be rebuilt there.
pub(crate) fn fold_can_start(seq: u64, snapshot: bool) -> bool {
    snapshot || seq == 1
}

/// The fold base of the last of consecutive checkpoints whose snapshot flags are
/// `snapshots`: the index of the newest snapshot, or 0 (the oldest) when there is none.
pub(crate) fn fold_base<I>(mut snapshots: I) -> usize
where
    I: DoubleEndedIterator<Item = bool> + ExactSizeIterator,
{
    snapshots.rposition(|s| s).unwrap_or(0)
}

/// The age bound's cutoff: `max_age` before `now_ms` (`None` without an age bound). A
/// checkpoint created at or after it is young enough to keep.
pub(crate) fn age_cutoff_ms(max_age: Option<Duration>, now_ms: u64) -> Option<u64> {
    let age = max_age?;
    let age_ms = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
    Some(now_ms.saturating_sub(age_ms))
}

/// Oldest seq that retention still serves, for a task whose newest checkpoint is
/// `latest` (0: none, then 0) and oldest rebuildable one `first_loadable`: the last `keep`
/// checkpoints, those from `young_from` on (the first created at or after the age cutoff,
/// `None` without an age bound), and always the latest.
pub(crate) fn retained_from(
    latest: u64,
    first_loadable: u64,
    keep: Option<u32>,
    young_from: Option<u64>,
) -> u64 {
    if latest == 0 {
        return 0;
    }
    let by_count = keep.map_or(0, |n| (latest + 1).saturating_sub(u64::from(n)));
    let from = first_loadable
        .max(by_count)
        .max(young_from.unwrap_or(0))
        .max(1)
        .min(latest);
    debug_assert!((1..=latest).contains(&from));
    from
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_keeps_the_latest_whatever_the_bounds() {
        assert_eq!(retained_from(0, 0, Some(1), Some(5)), 0);
        assert_eq!(retained_from(10, 1, Some(0), None), 10);
        assert_eq!(retained_from(10, 1, Some(3), None), 8);
        assert_eq!(retained_from(10, 1, Some(30), None), 1);
        assert_eq!(retained_from(10, 4, Some(30), None), 4);
        assert_eq!(retained_from(10, 1, None, Some(11)), 10);
        assert_eq!(retained_from(10, 1, Some(5), Some(3)), 6);
    }

    #[test]
    fn a_fold_starts_at_a_snapshot_or_seq_1() {
        assert!(fold_can_start(1, false));
        assert!(fold_can_start(7, true));
        assert!(!fold_can_start(7, false));
        assert_eq!(fold_base([false, true, false, true, false].into_iter()), 3);
        assert_eq!(fold_base([false, false].into_iter()), 0);
    }

    #[test]
    fn the_age_cutoff_saturates() {
        assert_eq!(age_cutoff_ms(None, 100), None);
        assert_eq!(
            age_cutoff_ms(Some(Duration::from_millis(30)), 100),
            Some(70)
        );
        assert_eq!(age_cutoff_ms(Some(Duration::MAX), 100), Some(0));
    }
}
