//! Compressed snapshots and deltas round-trip through load, fork, compaction, reopen
//! and the async path; uncompressed and compressed stores mix.

#[cfg(all(feature = "tokio", feature = "zstd"))]
use agentwal::{AgentState, Error};
use agentwal::{Compression, Store};

use crate::helpers::{ZSTD_1, count, fold, options, records, steps};

#[test]
#[cfg_attr(not(feature = "zstd"), ignore = "needs the zstd feature")]
fn compressed_snapshots_and_deltas_round_trip_through_load_fork_compaction_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let deltas = steps(1, 60);
    let store: Store = Store::open_with(dir.path(), options(ZSTD_1)).unwrap();
    for (i, d) in deltas.iter().enumerate() {
        assert_eq!(store.commit("t", d).unwrap(), i as u64 + 1);
    }
    store.fork("t", 20, "f").unwrap();
    let mut branch = deltas[..20].to_vec();
    for d in steps(2, 5) {
        store.commit("f", &d).unwrap();
        branch.push(d);
    }
    let check = |store: &Store, what: &str| {
        for seq in 1..=60u64 {
            let cp = store.load("t", seq).unwrap().expect("retained");
            assert_eq!(*cp.state, fold(&deltas[..seq as usize]), "{what}: t@{seq}");
        }
        let f = store.load_latest("f").unwrap().unwrap();
        assert_eq!((f.seq, &*f.state), (6, &fold(&branch)), "{what}: fork");
        let report = store.verify().unwrap();
        assert_eq!(report.bodies_decoded, 66, "{what}");
        assert!(report.bodies_compressed >= 60, "{what}: {report:?}");
        assert!(
            report.body_bytes_stored * 2 < report.body_bytes,
            "{what}: {report:?}"
        );
    };
    check(&store, "written");
    let written = records(dir.path());
    let (snapshots, deltas_zstd) = count(&written, "zstd");
    assert!(snapshots >= 3, "snapshots compressed: {snapshots}");
    assert!(deltas_zstd >= 50, "deltas compressed: {deltas_zstd}");
    // Fork's snapshot too.
    assert!(written.iter().any(|r| r.detail.contains("forked from t@20")
        && r.body.as_ref().is_some_and(|b| b.codec == "zstd")));
    // Every compressed body checks out and says its sizes.
    for r in &written {
        if let Some(b) = &r.body {
            assert_eq!(b.error, None, "{r:?}");
            if b.codec == "zstd" {
                assert!(b.stored_bytes < b.bytes, "{r:?}");
                assert!(
                    r.detail
                        .contains(&format!("zstd {} B of {} B", b.stored_bytes, b.bytes))
                );
            }
        }
    }
    drop(store);
    let store: Store = Store::open_with(dir.path(), options(ZSTD_1)).unwrap();
    check(&store, "reopened");
    store.compact().unwrap();
    check(&store, "compacted");
    drop(store);
    let store: Store = Store::open_read_only(dir.path()).unwrap();
    check(&store, "compacted, reopened read-only");
}

#[test]
#[cfg_attr(not(feature = "zstd"), ignore = "needs the zstd feature")]
fn stores_written_uncompressed_and_compressed_mix_and_keep_reading() {
    let dir = tempfile::tempdir().unwrap();
    let deltas = steps(3, 40);
    {
        let store: Store = Store::open_with(dir.path(), options(Compression::None)).unwrap();
        for d in &deltas[..20] {
            store.commit("t", d).unwrap();
        }
    }
    assert_eq!(count(&records(dir.path()), "zstd"), (0, 0));
    {
        let store: Store = Store::open_with(dir.path(), options(ZSTD_1)).unwrap();
        for d in &deltas[20..30] {
            store.commit("t", d).unwrap();
        }
    }
    {
        let store: Store = Store::open_with(dir.path(), options(Compression::None)).unwrap();
        for d in &deltas[30..] {
            store.commit("t", d).unwrap();
        }
        for seq in 1..=40u64 {
            let cp = store.load("t", seq).unwrap().unwrap();
            assert_eq!(*cp.state, fold(&deltas[..seq as usize]), "seq {seq}");
        }
        store.verify().unwrap();
    }
    let all = records(dir.path());
    let zstd = count(&all, "zstd");
    let raw = count(&all, "raw");
    assert!(
        zstd.0 + zstd.1 == 10 && raw.0 + raw.1 == 30,
        "zstd {zstd:?} raw {raw:?}"
    );
}

/// The async API's deferred commits (a delta appended from the runtime thread, a snapshot
/// due on a cached state) compress as the blocking path does.
#[test]
#[cfg(all(feature = "tokio", feature = "zstd"))]
fn async_commits_compress_as_blocking_ones_do() {
    let dir = tempfile::tempdir().unwrap();
    let deltas = steps(9, 40);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store: agentwal::AsyncStore =
            agentwal::AsyncStore::open_with(dir.path(), options(ZSTD_1))
                .await
                .unwrap();
        for d in &deltas {
            store.commit("t", d).await.unwrap();
        }
        let latest = store.load_latest("t").await.unwrap().unwrap();
        assert_eq!(*latest.state, fold(&deltas));
    });
    let (snapshots, zstd_deltas) = count(&records(dir.path()), "zstd");
    assert!(
        snapshots >= 2 && zstd_deltas >= 30,
        "{snapshots} {zstd_deltas}"
    );
    // A handle closes once its last clone and its queued writes are done: retry a while.
    let mut opened = Store::<AgentState>::open_with(dir.path(), options(ZSTD_1));
    for _ in 0..500 {
        if !matches!(opened, Err(Error::Locked { .. })) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        opened = Store::open_with(dir.path(), options(ZSTD_1));
    }
    let store = opened.unwrap();
    for seq in 1..=40u64 {
        let cp = store.load("t", seq).unwrap().unwrap();
        assert_eq!(*cp.state, fold(&deltas[..seq as usize]), "seq {seq}");
    }
}
