//! The PostgreSQL suite's report (`bench-results/workload-postgres.md`): agentwal on
//! PostgreSQL against `postgres-seed` and `postgres-floor` (one durable `INSERT` per
//! commit) on one throwaway cluster, the local engine beside them, and the targets judged
//! on the ratios of one run's medians.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::backends::pg_cluster::Cluster;
use crate::backends::{self, Backend};
use crate::config::Config;
use crate::measurement::{Measurement, median};
use crate::provenance::Provenance;
use crate::report::{fmt_bytes, fmt_ms, fmt_rate, fmt_ratio, opt};

type Rounds = BTreeMap<(usize, &'static str), Vec<Measurement>>;

fn med(rounds: &Rounds, t: usize, b: &dyn Backend) -> Option<Measurement> {
    rounds
        .get(&(t, b.name()))
        .map(|r| Measurement::median_of(r))
}

/// Prints the report and writes it to `cfg.out_dir/workload-postgres.md`.
pub fn write(cfg: &Config, rounds: &Rounds, cluster: &Cluster, took: Duration, prov: &Provenance) {
    let md = markdown(cfg, rounds, cluster, took, prov);
    println!("{md}");
    std::fs::create_dir_all(&cfg.out_dir).expect("create the output directory");
    let path = cfg.out_dir.join("workload-postgres.md");
    std::fs::write(&path, &md).expect("write the report");
    eprintln!("wrote {}", path.display());
}

fn markdown(
    cfg: &Config,
    rounds: &Rounds,
    cluster: &Cluster,
    took: Duration,
    prov: &Provenance,
) -> String {
    let mut w = String::new();
    let threads: Vec<String> = cfg.threads.iter().map(usize::to_string).collect();
    let mut env = String::from("AGENTWAL_BENCH_SUITE=postgres ");
    if cfg.quick {
        env.push_str("AGENTWAL_BENCH_QUICK=1 ");
    }
    if std::env::var_os("AGENTWAL_BENCH_ROUNDS").is_some() {
        let _ = write!(env, "AGENTWAL_BENCH_ROUNDS={} ", cfg.rounds);
    }
    if std::env::var_os("AGENTWAL_BENCH_STEPS").is_some() {
        let _ = write!(env, "AGENTWAL_BENCH_STEPS={} ", cfg.steps);
    }
    if std::env::var_os("AGENTWAL_BENCH_THREADS").is_some() {
        let _ = write!(env, "AGENTWAL_BENCH_THREADS={} ", threads.join(","));
    }
    let _ = writeln!(w, "# agentwal on PostgreSQL: workload benchmark\n");
    let _ = writeln!(
        w,
        "{} · commit {} · {}\n",
        prov.date, prov.commit, prov.machine
    );
    let _ = writeln!(
        w,
        "PostgreSQL {} on the same machine, a throwaway cluster the benchmark started itself \
         (`scripts/pg-cluster.sh`: initdb, unix socket, no TCP), every setting at its default: {}. \
         With `fsync = on` and `synchronous_commit = on` a COMMIT returns once its WAL is flushed: \
         durable per commit, like the local engine's `SyncMode::Always`.\n",
        cluster.version, cluster.settings
    );
    let _ = writeln!(
        w,
        "Mode: {} — S = {} steps per task, T = {} tasks (one thread each), {} round(s) (the \
         backends' order rotates each round), each figure the median over rounds; run took \
         {:.0} s. Command: `{env}cargo bench --features tokio,postgres --bench workload`.\n",
        if cfg.quick { "quick" } else { "full" },
        cfg.steps,
        threads.join(", "),
        cfg.rounds,
        took.as_secs_f64(),
    );
    let _ = writeln!(
        w,
        "- `agentwal`: the local engine, `Store::commit` on a local directory (ext4), for what a user \
         gives up for multi-host.\n\
         - `agentwal-postgres`: `PgStore::commit` (default `PgOptions`, `pool_idle_max` = T), one \
         handle shared by the T worker threads; a commit is one prepared call of the commit \
         function `agentwal_commit` in autocommit (one round trip, one implicit transaction; \
         a second when the handle's hint of the task's row was stale, docs/postgres.md §2); a load \
         reads the task row and folds the rows from the last snapshot.\n\
         - `postgres-floor`: the least a durable commit costs on the same server: the delta's \
         postcard bytes as one autocommit `INSERT` per step (one round trip, one WAL flush), \
         one `tokio-postgres` connection per worker thread, statement prepared.\n\
         - `postgres-seed`: the common design (LangGraph's savers do the same): the full state as JSON, one \
         row per checkpoint in `checkpoints (task text, seq bigint, state jsonb, primary key (task, \
         seq))`, one autocommit `INSERT` per step (one round trip), one `tokio-postgres` connection \
         per worker thread, statements prepared; `load_latest` = `SELECT state::text ... ORDER BY seq \
         DESC LIMIT 1`, then `serde_json` parsing.\n"
    );
    results(&mut w, cfg, rounds);
    ratios(&mut w, cfg, rounds);
    targets(&mut w, cfg, rounds);
    let _ = writeln!(
        w,
        "Definitions. commits/s: T × S over the wall time from a common start to the last commit. \
         \"bytes\": for the PostgreSQL peers the sum of `pg_total_relation_size` (heap, TOAST, \
         indexes, free-space and visibility maps) over the tables of the run's schema, after a \
         `VACUUM (ANALYZE)` of each table and a `CHECKPOINT`; for `agentwal` the store's files. \"WAL / \
         delta\": WAL bytes the server generated during the commits \
         (`pg_current_wal_insert_lsn` before and after) over the postcard-encoded deltas. \
         load_latest warm: median of {} loads of task 0 ({}-step state) on one handle; cold: \
         the first load on a new handle (a new connection; for `agentwal`, a reopened store), \
         median of {}; open: connecting (and, for `PgStore`, checking the schema) or the \
         local store's recovery. \"a load reads\": rows and bytes of stored values a `load_latest` \
         of task 0 reads (for `agentwal-postgres` the postcard bodies from the newest snapshot on; \
         for `postgres-seed` the latest row's JSON text). Each run uses a fresh schema, dropped afterwards.",
        cfg.warm_loads, cfg.steps, cfg.cold_loads
    );
    w
}

fn results(w: &mut String, cfg: &Config, rounds: &Rounds) {
    let _ = writeln!(w, "## Results (medians over rounds)\n");
    let _ = writeln!(
        w,
        "| backend | T | commits/s | p50 commit | p99 commit | bytes | WAL / delta | load_latest warm | load_latest cold | a load reads | open |"
    );
    let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &t in &cfg.threads {
        for b in &cfg.backends {
            let Some(m) = med(rounds, t, *b) else {
                continue;
            };
            let _ = writeln!(
                w,
                "| {} | {t} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                b.name(),
                fmt_rate(m.commits_per_s),
                fmt_ms(m.p50_ms),
                fmt_ms(m.p99_ms),
                fmt_bytes(m.disk_bytes),
                opt(m.wal_bytes, |v| format!("{:.1}", v / m.delta_postcard)),
                opt(m.load_warm_us, |v| fmt_ms(v / 1e3)),
                opt(m.load_cold_us, |v| fmt_ms(v / 1e3)),
                match (m.load_rows, m.load_read_bytes) {
                    (Some(r), Some(b)) => format!("{r:.0} rows, {}", fmt_bytes(b)),
                    _ => "–".into(),
                },
                opt(m.recovery_ms, fmt_ms),
            );
        }
    }
    let _ = writeln!(w);
}

/// Per-round ratios of `a` to `b` of `f`, and their median.
fn paired(
    rounds: &Rounds,
    t: usize,
    a: &dyn Backend,
    b: &dyn Backend,
    f: fn(&Measurement) -> f64,
) -> String {
    let (Some(ra), Some(rb)) = (rounds.get(&(t, a.name())), rounds.get(&(t, b.name()))) else {
        return String::new();
    };
    if ra.len() < 2 {
        return String::new();
    }
    let mut v: Vec<f64> = ra.iter().zip(rb).map(|(x, y)| f(x) / f(y)).collect();
    let each: Vec<String> = v.iter().map(|r| format!("{r:.2}")).collect();
    format!(
        "; per round {}, their median {:.2}×",
        each.join(", "),
        median(&mut v)
    )
}

fn ratios(w: &mut String, cfg: &Config, rounds: &Rounds) {
    let (local, pg, seed) = (
        &backends::AGENTWAL,
        &backends::AGENTWAL_POSTGRES,
        &backends::POSTGRES_SEED,
    );
    let _ = writeln!(w, "## Ratios\n");
    let _ = writeln!(
        w,
        "| T | commits/s: agentwal-postgres ÷ postgres-seed | commits/s: local agentwal ÷ agentwal-postgres | bytes: postgres-seed ÷ agentwal-postgres | load warm: postgres-seed ÷ agentwal-postgres |"
    );
    let _ = writeln!(w, "|---:|---:|---:|---:|---:|");
    for &t in &cfg.threads {
        let (Some(l), Some(p), Some(s)) = (
            med(rounds, t, local),
            med(rounds, t, pg),
            med(rounds, t, seed),
        ) else {
            continue;
        };
        let _ = writeln!(
            w,
            "| {t} | {} | {} | {} | {} |",
            fmt_ratio(p.commits_per_s / s.commits_per_s),
            fmt_ratio(l.commits_per_s / p.commits_per_s),
            fmt_ratio(s.disk_bytes / p.disk_bytes),
            match (s.load_warm_us, p.load_warm_us) {
                (Some(s), Some(p)) => fmt_ratio(s / p),
                _ => "–".into(),
            },
        );
    }
    let _ = writeln!(w);
}

fn targets(w: &mut String, cfg: &Config, rounds: &Rounds) {
    let (pg, seed) = (&backends::AGENTWAL_POSTGRES, &backends::POSTGRES_SEED);
    let t = cfg.tmax();
    let (Some(p), Some(s)) = (med(rounds, t, pg), med(rounds, t, seed)) else {
        return;
    };
    let _ = writeln!(w, "## Targets (ratios of this run's medians)\n");
    let _ = writeln!(w, "| target | measured | met |");
    let _ = writeln!(w, "|---|---|---|");
    let verdict = |met: bool| if met { "met" } else { "**missed**" };
    let floor = &backends::POSTGRES_FLOOR;
    let t1 = cfg.threads.iter().copied().min().unwrap_or(1);
    if let (Some(p1), Some(f1)) = (med(rounds, t1, pg), med(rounds, t1, floor)) {
        // One task: commits/s is the inverse of one commit's time.
        let r = f1.commits_per_s / p1.commits_per_s;
        let _ = writeln!(
            w,
            "| a commit ≤ 1.5× one durable `INSERT` (postgres-floor) at T={t1} | {} vs {} commits/s, p50 {} vs {} ({}{}) | {} |",
            fmt_rate(p1.commits_per_s),
            fmt_rate(f1.commits_per_s),
            fmt_ms(p1.p50_ms),
            fmt_ms(f1.p50_ms),
            fmt_ratio(r),
            paired(rounds, t1, floor, pg, |m| m.commits_per_s),
            verdict(r <= 1.5)
        );
    }
    let r = p.commits_per_s / s.commits_per_s;
    let _ = writeln!(
        w,
        "| commits/s ≥ 10× postgres-seed at T={t} | {} vs {} ({}{}) | {} |",
        fmt_rate(p.commits_per_s),
        fmt_rate(s.commits_per_s),
        fmt_ratio(r),
        paired(rounds, t, pg, seed, |m| m.commits_per_s),
        verdict(r >= 10.0)
    );
    let r = s.disk_bytes / p.disk_bytes;
    let _ = writeln!(
        w,
        "| bytes in the database ≤ 1/20 of postgres-seed's (T={t}) | {} vs {} (1/{r:.0}) | {} |",
        fmt_bytes(p.disk_bytes),
        fmt_bytes(s.disk_bytes),
        verdict(r >= 20.0)
    );
    if let (Some(pw), Some(sw)) = (p.load_warm_us, s.load_warm_us) {
        let r = sw / pw;
        let _ = writeln!(
            w,
            "| load_latest ≤ 1/3 of postgres-seed's ({}-step task, warm) | {} vs {} (1/{r:.1}{}; cold: {} vs {}) | {} |",
            cfg.steps,
            fmt_ms(pw / 1e3),
            fmt_ms(sw / 1e3),
            paired(rounds, t, seed, pg, |m| m.load_warm_us.unwrap_or(f64::NAN)),
            opt(p.load_cold_us, |v| fmt_ms(v / 1e3)),
            opt(s.load_cold_us, |v| fmt_ms(v / 1e3)),
            verdict(r >= 3.0)
        );
    }
    let _ = writeln!(w);
}
