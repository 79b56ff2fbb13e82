//! `PgOptions::max_age` retention, against a local `Store` with the same options fed the
//! same commits at the same times (the local `max_age_retention_across_compaction_and_reopen`
//! in tests/store_model/, on PostgreSQL). Needs `AGENTWAL_PG_HOST` (fails without it).
#![cfg(feature = "postgres")]

mod common;

use std::thread::sleep;
use std::time::Duration;

use agentwal::postgres::{PgOptions, PgStore};
use agentwal::{AgentDelta, BodyCheck, Error, Options, Store, Value};

const MAX_AGE: Duration = Duration::from_millis(1000);
/// Well away from the boundary: ages compared are at most MAX_AGE - MARGIN or at least
/// MAX_AGE + MARGIN.
const MARGIN: Duration = Duration::from_millis(300);

/// A fork origin, as `CheckpointInfo::forked_from` gives it.
type Origin = Option<(String, u64)>;

struct Both {
    pg: PgStore,
    local: Store,
}

impl Both {
    fn commit(&self, task: &str, n: i64) -> u64 {
        let delta = AgentDelta::default().set("n", n);
        let l = self.local.commit(task, &delta).expect("local commit");
        let p = self.pg.commit(task, &delta).expect("pg commit");
        assert_eq!(l, p, "{task}: commit seqs");
        p
    }

    fn listed(&self, task: &str) -> Vec<(u64, bool, Origin)> {
        let lists = [
            self.local.list_checkpoints(task).expect("local list"),
            self.pg.list_checkpoints(task).expect("pg list"),
        ];
        let [l, p] = lists.map(|list| {
            list.into_iter()
                .map(|c| (c.seq, c.snapshot, c.forked_from))
                .collect::<Vec<_>>()
        });
        assert_eq!(l, p, "{task}: local and PostgreSQL lists");
        p
    }

    fn n_at(&self, task: &str, seq: u64) -> Option<Value> {
        let l = self.local.load(task, seq).expect("local load");
        let p = self.pg.load(task, seq).expect("pg load");
        let [l, p] = [l, p].map(|cp| cp.map(|cp| cp.state.vars["n"].clone()));
        assert_eq!(l, p, "{task}@{seq}: local and PostgreSQL loads");
        p
    }

    fn matching(&self, task: &str, not: i64) -> Option<u64> {
        let accept = |s: &agentwal::AgentState| s.vars["n"] != Value::Int(not);
        let l = self
            .local
            .load_latest_matching(task, accept)
            .expect("local");
        let p = self.pg.load_latest_matching(task, accept).expect("pg");
        let [l, p] = [l, p].map(|cp| cp.map(|cp| cp.seq));
        assert_eq!(l, p, "{task}: load_latest_matching(n != {not})");
        p
    }

    fn infos(&self) -> Vec<(String, u64, u64, Origin)> {
        let infos = [
            self.local.task_infos().expect("local task_infos"),
            self.pg.task_infos().expect("pg task_infos"),
        ];
        let [l, p] = infos.map(|infos| {
            infos
                .into_iter()
                .map(|i| (i.task, i.latest_seq, i.checkpoints, i.forked_from))
                .collect::<Vec<_>>()
        });
        assert_eq!(l, p, "task_infos (task, latest, retained, fork origin)");
        p
    }

    /// Every retained seq of `task` loads on both, alike; the PG rows verify.
    fn all_retained_load(&self, task: &str) {
        for (seq, _, _) in self.listed(task) {
            assert!(self.n_at(task, seq).is_some(), "{task}@{seq} is retained");
        }
        let report = self.pg.verify_with(BodyCheck::Require).expect("verify");
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }
}

fn refused(r: agentwal::Result<u64>) -> bool {
    matches!(r, Err(Error::InvalidArgument(_)))
}

#[test]
fn max_age_retention_matches_the_local_store_across_prunes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let local = Store::open_with(
        dir.path(),
        Options {
            snapshot_every: 3,
            max_age: Some(MAX_AGE),
            ..Options::default()
        },
    )
    .expect("open local");
    let pg = common::pg::store(
        "max_age",
        PgOptions {
            snapshot_every: 3,
            max_age: Some(MAX_AGE),
            ..PgOptions::default()
        },
    );
    let s = Both { pg, local };

    // Phase 1: all young.
    for n in 1..=5 {
        s.commit("a", n);
    }
    s.commit("x", 1);
    s.commit("x", 2);
    assert_eq!(s.local.fork("a", 3, "f").expect("local fork"), 1);
    assert_eq!(s.pg.fork("a", 3, "f").expect("pg fork"), 1);
    assert_eq!(s.listed("a").len(), 5, "all young");
    assert_eq!(s.listed("f")[0].2, Some(("a".to_string(), 3)));
    s.infos();

    // Phase 2: a@1..5, x@1..2 and f@1 grow old; a@6 and a@7 are young.
    sleep(MAX_AGE + MARGIN);
    s.commit("a", 6);
    s.commit("a", 7);
    let young: Vec<u64> = s.listed("a").iter().map(|c| c.0).collect();
    assert_eq!(young, [6, 7]);
    assert_eq!(s.listed("x").iter().map(|c| c.0).collect::<Vec<_>>(), [2]);
    // The latest is always served, fork origin and all.
    assert_eq!(s.listed("f")[0].2, Some(("a".to_string(), 3)));
    for seq in 1..=5 {
        assert_eq!(s.n_at("a", seq), None, "a@{seq} is too old");
    }
    assert_eq!(s.n_at("a", 6), Some(Value::Int(6)));
    assert_eq!(s.n_at("a", 7), Some(Value::Int(7)));
    assert_eq!(s.n_at("x", 1), None);
    assert_eq!(s.n_at("x", 2), Some(Value::Int(2)));
    assert!(matches!(
        s.pg.load("a", 8),
        Err(Error::UnknownSeq {
            seq: 8,
            latest: 7,
            ..
        })
    ));
    assert_eq!(s.matching("a", 0), Some(7));
    assert_eq!(s.matching("a", 7), Some(6));
    let only_old =
        s.pg.load_latest_matching("a", |st| st.vars["n"] == Value::Int(5));
    assert_eq!(only_old.expect("load").map(|cp| cp.seq), None);
    assert!(refused(s.local.fork("a", 5, "g")), "local fork from a@5");
    assert!(refused(s.pg.fork("a", 5, "g")), "pg fork from a@5");
    assert!(s.pg.load_latest("g").expect("load g").is_none());
    s.infos();
    s.all_retained_load("a");
    // The prune at a@7's commit deleted what no retained checkpoint needs.
    let stored = s.pg.stats().expect("stats").checkpoints;
    assert!(stored < 5 + 2 + 2 + 1, "pruned: {stored} rows stored");

    // Phase 3: a@8 and a@9 (a snapshot) age out while a@10.. stay young, so the oldest
    // retained seq, a@10, is a delta whose fold base, a@9, is not retained: the prunes keep
    // it. At the checks, a@9 is at least 1150 ms old and a@10 350 ms (plus the checks' time).
    s.commit("a", 8);
    s.commit("a", 9);
    sleep(Duration::from_millis(800));
    s.commit("a", 10);
    s.commit("a", 11);
    sleep(Duration::from_millis(350));
    s.commit("a", 12);
    let listed = s.listed("a");
    let young: Vec<u64> = listed.iter().map(|c| c.0).collect();
    assert_eq!(young, [10, 11, 12]);
    assert!(
        !listed[0].1,
        "a@10 is a delta (snapshot_every 3: a@3, a@6, a@9 are snapshots)"
    );
    assert_eq!(s.n_at("a", 9), None);
    assert_eq!(s.n_at("a", 10), Some(Value::Int(10)));
    s.all_retained_load("a");
    s.infos();
    // The stored rows of a: its fold base a@9 and a@10..=12, nothing older.
    let pg_rows = s.pg.stats().expect("stats").checkpoints;
    // x keeps both its rows (no commit since they aged, so no prune), f its one.
    assert_eq!(
        pg_rows,
        4 + 2 + 1,
        "a@9 (the fold base) ..= a@12 stored, x@1..=2, f@1"
    );
    assert!(refused(s.pg.fork("a", 9, "g")), "pg fork from a@9");
    assert!(refused(s.local.fork("a", 9, "g")), "local fork from a@9");
    assert_eq!(s.pg.fork("a", 10, "h").expect("fork from a@10"), 1);
    assert_eq!(
        s.pg.load_latest("h")
            .expect("load h")
            .map(|cp| cp.state.vars["n"].clone()),
        Some(Value::Int(10))
    );

    // Phase 4: everything old; only the latest of each task is served.
    sleep(MAX_AGE + MARGIN);
    assert_eq!(s.listed("a").iter().map(|c| c.0).collect::<Vec<_>>(), [12]);
    assert_eq!(s.n_at("a", 11), None);
    assert_eq!(s.n_at("a", 12), Some(Value::Int(12)));
    s.commit("a", 13);
    assert_eq!(s.listed("a").iter().map(|c| c.0).collect::<Vec<_>>(), [13]);
    assert_eq!(s.n_at("a", 13), Some(Value::Int(13)));
    s.all_retained_load("a");
}

#[test]
fn max_age_and_keep_checkpoints_the_stricter_wins() {
    let pg: PgStore = common::pg::store(
        "max_age_keep",
        PgOptions {
            snapshot_every: 2,
            keep_checkpoints: Some(2),
            max_age: Some(Duration::from_secs(3600)),
            ..PgOptions::default()
        },
    );
    for n in 1..=6 {
        pg.commit("a", &AgentDelta::default().set("n", n))
            .expect("commit");
    }
    let seqs: Vec<u64> = pg
        .list_checkpoints("a")
        .unwrap()
        .iter()
        .map(|c| c.seq)
        .collect();
    assert_eq!(seqs, [5, 6], "keep 2 is stricter than an hour");
    assert!(pg.load("a", 4).unwrap().is_none());
    assert!(pg.load("a", 5).unwrap().is_some());
    assert_eq!(pg.task_infos().unwrap()[0].checkpoints, 2);
}
