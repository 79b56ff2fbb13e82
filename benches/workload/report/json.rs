//! The machine-readable results (`workload.json`, `workload-fresh.json`): every round of
//! every backend, so a later run can be judged against this one (`AGENTWAL_BENCH_BASELINE`)
//! without re-reading Markdown.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::Run;
use crate::config::Config;
use crate::measurement::Measurement;
use crate::provenance::Provenance;

#[derive(Serialize, Deserialize)]
struct Header {
    mode: String,
    process: String,
    date: String,
    commit: String,
    machine: String,
    steps: usize,
    threads: Vec<usize>,
    rounds: usize,
}

#[derive(Serialize, Deserialize)]
struct Rounds {
    backend: String,
    threads: usize,
    rounds: Vec<Measurement>,
}

#[derive(Deserialize)]
struct File {
    header: Header,
    runs: Vec<Rounds>,
}

/// An earlier run's rounds, read from its JSON results.
pub struct Baseline {
    /// Where it came from, for the report: the file, its commit, date and process mode.
    pub label: String,
    pub rounds: BTreeMap<(usize, String), Vec<Measurement>>,
}

/// The JSON text: a header line, then one line per (backend, T), so two files diff by run.
pub fn json(cfg: &Config, run: &Run, prov: &Provenance) -> String {
    let header = Header {
        mode: if cfg.quick { "quick" } else { "full" }.into(),
        process: cfg.process.name().into(),
        date: prov.date.clone(),
        commit: prov.commit.clone(),
        machine: prov.machine.clone(),
        steps: cfg.steps,
        threads: cfg.threads.clone(),
        rounds: cfg.rounds,
    };
    let runs: Vec<String> = run
        .rounds
        .iter()
        .map(|(&(threads, backend), rounds)| {
            let r = Rounds {
                backend: backend.into(),
                threads,
                rounds: rounds.clone(),
            };
            serde_json::to_string(&r).expect("encode the rounds")
        })
        .collect();
    format!(
        "{{\"header\": {},\n\"runs\": [\n{}\n]}}\n",
        serde_json::to_string(&header).expect("encode the header"),
        runs.join(",\n")
    )
}

/// Reads the JSON results at `path` (`AGENTWAL_BENCH_BASELINE`).
pub fn read_baseline(path: &Path) -> Baseline {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("AGENTWAL_BENCH_BASELINE={}: {e}", path.display()));
    let file: File = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("AGENTWAL_BENCH_BASELINE={}: {e}", path.display()));
    let h = &file.header;
    Baseline {
        label: format!(
            "`{}` (commit {}, {}, {}, {} round(s))",
            path.display(),
            h.commit,
            h.date,
            h.process,
            h.rounds
        ),
        rounds: file
            .runs
            .into_iter()
            .map(|r| ((r.threads, r.backend), r.rounds))
            .collect(),
    }
}
