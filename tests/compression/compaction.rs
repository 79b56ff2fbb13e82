//! Compaction compresses: raw bodies by default, background passes, only what the
//! setting names.

use agentwal::{Compression, Options, Store};

use crate::helpers::{
    count, dir_bytes, fold, of_tasks, options, records, seal_what_came_before, steps,
};

/// The default (`ZstdAtCompaction`): commits and forks write bodies as encoded; a
/// compaction pass stores them compressed, snapshots and deltas, repoints the index at
/// their new sizes (the same a reopened store reads off the disk), and every checkpoint
/// loads as before, also after a reopen and read-only.
#[test]
#[cfg_attr(not(feature = "zstd"), ignore = "needs the zstd feature")]
fn the_default_writes_raw_bodies_and_compaction_compresses_them() {
    assert_eq!(
        Options::default().compression,
        Compression::ZstdAtCompaction {
            level: agentwal::ZSTD_LEVEL_DEFAULT,
            deltas: true
        }
    );
    let dir = tempfile::tempdir().unwrap();
    let deltas = steps(11, 60);
    let opts = options(Compression::default());
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    for d in &deltas {
        store.commit("t", d).unwrap();
    }
    store.fork("t", 20, "f").unwrap();
    let check = |store: &Store, what: &str| {
        for seq in 1..=60u64 {
            let cp = store.load("t", seq).unwrap().expect("retained");
            assert_eq!(*cp.state, fold(&deltas[..seq as usize]), "{what}: t@{seq}");
        }
        let f = store.load_latest("f").unwrap().unwrap();
        assert_eq!(*f.state, fold(&deltas[..20]), "{what}: fork");
        store.verify().unwrap();
    };
    check(&store, "written");
    let written = records(dir.path());
    assert_eq!(count(&written, "zstd"), (0, 0), "commits write raw bodies");
    let (raw_snapshots, raw_deltas) = count(&written, "raw");
    assert!(raw_snapshots >= 4 && raw_deltas >= 50);
    let raw_bytes = dir_bytes(dir.path());
    // Compaction leaves the active segment alone.
    seal_what_came_before(&store);
    let written = of_tasks(&records(dir.path()), &["t", "f"]);
    store.compact().unwrap();
    check(&store, "compacted");
    let compacted = of_tasks(&records(dir.path()), &["t", "f"]);
    let (zstd_snapshots, zstd_deltas) = count(&compacted, "zstd");
    assert_eq!(
        (zstd_snapshots, zstd_deltas),
        (raw_snapshots, raw_deltas),
        "every body compressed"
    );
    assert!(
        written.len() == compacted.len()
            && (written.iter().zip(&compacted))
                .all(|(a, b)| (a.kind, &a.task, a.seq) == (b.kind, &b.task, b.seq)),
        "the same records, in the same order"
    );
    let compressed_bytes: u64 = (compacted.iter())
        .filter_map(|r| r.body.as_ref().map(|b| b.stored_bytes))
        .sum();
    assert!(
        compressed_bytes * 2 < raw_bytes,
        "{compressed_bytes} vs {raw_bytes}"
    );
    let total_bytes = dir_bytes(dir.path());
    let sizes = |store: &Store| {
        let mut all = store.list_checkpoints("t").unwrap();
        all.extend(store.list_checkpoints("f").unwrap());
        all.iter().map(|c| (c.seq, c.bytes)).collect::<Vec<_>>()
    };
    let remapped = sizes(&store);
    drop(store);
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    check(&store, "compacted, reopened");
    assert_eq!(
        sizes(&store),
        remapped,
        "the index's sizes are those on disk"
    );
    // A second pass copies compressed bodies as they are.
    store.compact().unwrap();
    check(&store, "compacted twice");
    assert_eq!(dir_bytes(dir.path()), total_bytes);
    drop(store);
    let store: Store = Store::open_read_only(dir.path()).unwrap();
    check(&store, "read-only");
}

/// The default compresses a store without retention too: nothing is dead, but the
/// background compactor runs a pass once the segments no pass wrote outweigh the compacted
/// one (and a segment), so only the newest segments hold raw bodies. Under
/// `Compression::None` it runs none.
#[test]
#[cfg_attr(not(feature = "zstd"), ignore = "needs the zstd feature")]
fn background_compaction_compresses_a_store_without_retention() {
    let deltas = steps(13, 400);
    for (setting, compresses) in [(Compression::default(), true), (Compression::None, false)] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            segment_bytes: 64 << 10,
            auto_compact: true,
            ..options(setting)
        };
        let store: Store = Store::open_with(dir.path(), opts).unwrap();
        for d in &deltas {
            store.commit("t", d).unwrap();
        }
        // Passes run on a background thread after rotations: wait for one to have been
        // installed and counted (the count follows the install). Which segments it
        // covered depends on when it ran, so only some bodies need be compressed.
        let seen = || {
            let (snapshots, deltas) = count(&records(dir.path()), "zstd");
            (store.stats().compactions, snapshots, deltas)
        };
        let none_yet = |(passes, snapshots, deltas): (u64, usize, usize)| {
            passes == 0 || snapshots == 0 || deltas == 0
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while compresses && none_yet(seen()) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if !compresses {
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
        let (compactions, zstd_snapshots, zstd_deltas) = seen();
        if compresses {
            assert!(
                compactions >= 1 && zstd_snapshots >= 1 && zstd_deltas >= 1,
                "{setting:?}: {compactions} passes, {zstd_snapshots} snapshots and \
                 {zstd_deltas} deltas compressed"
            );
        } else {
            assert_eq!((compactions, zstd_snapshots, zstd_deltas), (0, 0, 0));
        }
        for seq in (1..=400u64).step_by(37) {
            let cp = store.load("t", seq).unwrap().unwrap();
            assert_eq!(
                *cp.state,
                fold(&deltas[..seq as usize]),
                "{setting:?} seq {seq}"
            );
        }
        drop(store);
        let store: Store = Store::open_with(dir.path(), opts).unwrap();
        store.verify().unwrap();
        assert_eq!(
            *store.load_latest("t").unwrap().unwrap().state,
            fold(&deltas)
        );
    }
}

/// Under `Compression::None` compaction copies bodies as they are; under `Zstd` without
/// `deltas`, it compresses the raw snapshots another setting wrote and leaves deltas raw.
#[test]
#[cfg_attr(not(feature = "zstd"), ignore = "needs the zstd feature")]
fn compaction_compresses_only_what_the_setting_names() {
    let deltas = steps(12, 40);
    let snapshots_only = Compression::Zstd {
        level: 1,
        deltas: false,
    };
    for (setting, expected) in [(Compression::None, (0, 0)), (snapshots_only, (1, 0))] {
        let dir = tempfile::tempdir().unwrap();
        {
            let store: Store = Store::open_with(dir.path(), options(Compression::None)).unwrap();
            for d in &deltas {
                store.commit("t", d).unwrap();
            }
            seal_what_came_before(&store);
        }
        let store: Store = Store::open_with(dir.path(), options(setting)).unwrap();
        store.compact().unwrap();
        let t = of_tasks(&records(dir.path()), &["t"]);
        let (snapshots, zstd_deltas) = count(&t, "zstd");
        let all_snapshots = count(&t, "raw").0 + snapshots;
        assert_eq!(
            (snapshots.min(1), zstd_deltas),
            expected,
            "{setting:?}: {snapshots} of {all_snapshots} snapshots"
        );
        if expected.0 == 1 {
            assert_eq!(snapshots, all_snapshots, "{setting:?}");
        }
        let latest = store.load_latest("t").unwrap().unwrap();
        assert_eq!(*latest.state, fold(&deltas), "{setting:?}");
    }
}
