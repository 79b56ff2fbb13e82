//! The journal's retention rule: which calls compaction prunes, and what a pruned call
//! answers (docs/store.md §4).

use std::time::Duration;

use agentwal::{Options, Store};

use crate::{delta, small};

/// Options for the journal's retention tests: small segments, no background pass.
pub(crate) fn journal(keep: Option<u32>) -> Options {
    Options {
        segment_bytes: 4096,
        ..small(keep)
    }
}

/// Commits checkpoints of a task no test here reads, until the log has rotated past the
/// records written so far (so that a forced pass compacts them).
fn rotate(store: &Store) {
    let segments = store.stats().segments;
    let mut i = 0;
    while store.stats().segments == segments {
        i += 1;
        store.commit("filler", &delta(9, i)).unwrap();
    }
}

fn call_ids(store: &Store, task: &str) -> Vec<String> {
    let calls = store.calls(task).unwrap();
    calls.into_iter().map(|c| c.call_id).collect()
}

/// The journal's retention rule (docs/store.md §4): with retention configured, a compaction
/// pass drops a finished call whose finish lies before its task's oldest retained
/// checkpoint, its records and its index entry; pending calls and calls finished later
/// stay, across reopens. Without retention nothing is dropped.
#[test]
fn compaction_drops_calls_finished_before_the_oldest_retained_checkpoint() {
    for keep in [Some(2), None] {
        let dir = tempfile::tempdir().unwrap();
        let store: Store = Store::open_with(dir.path(), journal(keep)).unwrap();
        store.begin_call("t", "before-1", "tool", b"a").unwrap();
        store.finish_call("t", "before-1", b"r0").unwrap();
        store.commit("t", &delta(0, 1)).unwrap(); // a snapshot: the fold base of seq 3
        store.begin_call("t", "pending", "tool", b"p").unwrap();
        store.begin_call("t", "before-3", "tool", b"b").unwrap();
        store.finish_call("t", "before-3", b"r1").unwrap();
        store.commit("t", &delta(0, 2)).unwrap();
        store.commit("t", &delta(0, 3)).unwrap(); // with keep 2, the oldest retained
        store.begin_call("t", "after-3", "tool", b"c").unwrap();
        store.finish_call("t", "after-3", b"r2").unwrap();
        store.commit("t", &delta(0, 4)).unwrap();
        // A deleted task's calls go whatever their state.
        store.begin_call("gone", "done", "tool", b"d").unwrap();
        store.finish_call("gone", "done", b"r3").unwrap();
        store.begin_call("gone", "open", "tool", b"e").unwrap();
        store.delete_task("gone").unwrap();
        assert_eq!(
            store.list_checkpoints("t").unwrap()[0].seq,
            keep.map_or(1, |_| 3)
        );
        // Nothing is pruned before a pass.
        assert_eq!(
            store.call_result("t", "before-1").unwrap(),
            Some(b"r0".to_vec())
        );
        rotate(&store);
        store.compact().unwrap();
        let all = ["before-1", "pending", "before-3", "after-3"];
        let (kept, entries): (&[&str], usize) = match keep {
            // "before-3" finished after the fold base (seq 1) but before seq 3: no retained
            // checkpoint can resume from before it, so it goes.
            Some(_) => (&["pending", "after-3"], 2),
            None => (&all, 4),
        };
        assert_eq!(call_ids(&store, "t"), kept, "keep {keep:?}");
        assert_eq!(store.index_call_entries(), entries, "keep {keep:?}");
        let results = |store: &Store| {
            all.map(|c| {
                store
                    .call_result("t", c)
                    .unwrap()
                    .map(|r| String::from_utf8(r).unwrap())
            })
        };
        let want = match keep {
            Some(_) => [None, None, None, Some("r2".into())],
            None => [
                Some("r0".into()),
                None,
                Some("r1".into()),
                Some("r2".into()),
            ],
        };
        assert_eq!(results(&store), want, "keep {keep:?}");
        assert_eq!(store.pending_calls("t").unwrap().len(), 1);
        assert_eq!(store.call_result("gone", "done").unwrap(), None);
        if keep.is_some() {
            // The dropped ids are free again: a new call, not the old one.
            store.begin_call("t", "before-1", "other", b"new").unwrap();
        } else {
            assert!(matches!(
                store.begin_call("t", "before-1", "other", b"new"),
                Err(agentwal::Error::InvalidArgument(_))
            ));
        }
        let ids = call_ids(&store, "t");
        drop(store);
        let store: Store = Store::open_with(dir.path(), journal(keep)).unwrap();
        assert_eq!(call_ids(&store, "t"), ids, "keep {keep:?}: after a reopen");
        assert_eq!(results(&store), want, "keep {keep:?}: after a reopen");
        assert!(!store.tasks().unwrap().contains(&"gone".to_string()));
        store.verify().unwrap();
        if keep.is_some() {
            let pending: Vec<String> = (store.pending_calls("t").unwrap().into_iter())
                .map(|p| p.call_id)
                .collect();
            assert_eq!(pending, ["pending", "before-1"]);
            // A pending call stays however old it gets.
            for i in 5..=20 {
                store.commit("t", &delta(0, i)).unwrap();
            }
            store.finish_call("t", "before-1", b"late").unwrap();
            rotate(&store);
            store.compact().unwrap();
            assert_eq!(call_ids(&store, "t"), ["pending", "before-1"]);
        }
    }
}

/// A call retention no longer keeps is pruned at the pass that finds it (its result is
/// gone from then on); its id stays taken, and a write of it is refused, until its records
/// have left the log.
#[test]
fn a_pruned_call_answers_none_and_keeps_its_id_until_its_records_go() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open_with(dir.path(), journal(Some(1))).unwrap();
    store.begin_call("t", "c", "tool", b"a").unwrap();
    store.finish_call("t", "c", b"r").unwrap();
    store.commit("t", &delta(0, 1)).unwrap();
    // Still in the active segment, which a background pass leaves alone: pruned, not
    // dropped.
    store.compact_sealed_segments().unwrap();
    assert_eq!(store.call_result("t", "c").unwrap(), None);
    assert!(call_ids(&store, "t").is_empty());
    assert_eq!(store.index_call_entries(), 1);
    let invalid = |r: agentwal::Result<()>| matches!(r, Err(agentwal::Error::InvalidArgument(_)));
    assert!(invalid(store.begin_call("t", "c", "tool", b"a")));
    assert!(invalid(store.finish_call("t", "c", b"r")));
    // A reopen before its records go serves it again, until the next pass.
    drop(store);
    let store: Store = Store::open_with(dir.path(), journal(Some(1))).unwrap();
    assert_eq!(store.call_result("t", "c").unwrap(), Some(b"r".to_vec()));
    rotate(&store);
    store.compact().unwrap();
    assert_eq!(store.call_result("t", "c").unwrap(), None);
    assert_eq!(store.index_call_entries(), 0);
    store.begin_call("t", "c", "tool", b"again").unwrap();
    assert_eq!(call_ids(&store, "t"), ["c"]);
}

/// The soundness trap: a pass compacts only a prefix of segments, so a pruned call whose
/// begin lies in it and whose finish lies after it must keep its begin; dropping it would
/// leave a finish without a begin, which recovery reports as `Inconsistent`. Its records
/// go once they share a segment. Each step is reopened and verified.
#[test]
fn a_pruned_call_split_across_segments_leaves_the_log_whole() {
    let dir = tempfile::tempdir().unwrap();
    let opts = journal(Some(1));
    let reopen = |store: Store| -> Store {
        drop(store);
        let store: Store = Store::open_with(dir.path(), opts).unwrap();
        store.verify().unwrap();
        store
    };
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    // The begin fills most of segment 1; the finish does not fit after it.
    store
        .begin_call("t", "split", "tool", &[b'a'; 3000])
        .unwrap();
    assert_eq!(store.stats().segments, 1);
    store.finish_call("t", "split", &[b'r'; 2000]).unwrap();
    assert_eq!(store.stats().segments, 2, "the finish went to segment 2");
    store.commit("t", &delta(0, 1)).unwrap();
    // Segment 1 is the prefix; the finish sits in the active segment after it, which a
    // background pass leaves alone.
    store.compact_sealed_segments().unwrap();
    assert_eq!(store.call_result("t", "split").unwrap(), None, "pruned");
    let store = reopen(store);
    assert_eq!(
        store.call_result("t", "split").unwrap(),
        Some(vec![b'r'; 2000]),
        "both records are still on disk"
    );
    // Once both are sealed, a pass copies them into one compacted segment ...
    rotate(&store);
    store.compact().unwrap();
    let store = reopen(store);
    assert_eq!(
        store.call_result("t", "split").unwrap(),
        Some(vec![b'r'; 2000])
    );
    // ... and the next drops them together.
    store.compact().unwrap();
    assert_eq!(store.index_call_entries(), 0);
    let store = reopen(store);
    assert_eq!(store.call_result("t", "split").unwrap(), None);
    assert_eq!(store.index_call_entries(), 0);
    assert_eq!(store.load_latest("t").unwrap().unwrap().seq, 1);
}

/// `max_age` alone is retention too: once every checkpoint but the latest is too old, a
/// pass drops the calls that finished before the latest.
#[test]
fn max_age_prunes_the_calls_that_finished_before_the_oldest_young_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        max_age: Some(Duration::from_millis(50)),
        ..journal(None)
    };
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    store.begin_call("t", "old", "tool", b"a").unwrap();
    store.finish_call("t", "old", b"r").unwrap();
    store.commit("t", &delta(0, 1)).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    store.begin_call("t", "young", "tool", b"b").unwrap();
    store.finish_call("t", "young", b"r").unwrap();
    store.commit("t", &delta(0, 2)).unwrap();
    store.begin_call("t", "after", "tool", b"c").unwrap();
    store.finish_call("t", "after", b"r").unwrap();
    rotate(&store);
    store.compact().unwrap();
    // Seq 1 is too old, seq 2 (the latest) is kept: "young" finished before it.
    assert_eq!(store.list_checkpoints("t").unwrap()[0].seq, 2);
    assert_eq!(call_ids(&store, "t"), ["after"]);
    assert_eq!(store.index_call_entries(), 1);
}
