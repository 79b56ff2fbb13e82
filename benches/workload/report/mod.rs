//! The report: the Markdown tables (`markdown`), the SVG chart (`svg`), the JSON results
//! (`json`) and the number formats they use.

pub mod compaction;
pub mod json;
pub mod markdown;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod svg;

use crate::Run;
use crate::config::Config;
use crate::provenance::Provenance;

/// Prints the Markdown report and writes it, the chart and the JSON results to
/// `cfg.out_dir` (`workload.*`, or `workload-fresh.*` for a fresh-process run).
pub fn write(cfg: &Config, run: &Run, prov: &Provenance) {
    let md = markdown::markdown(cfg, run, prov);
    println!("{md}");
    std::fs::create_dir_all(&cfg.out_dir).expect("create the output directory");
    let stem = cfg.report_stem();
    let md_path = cfg.out_dir.join(format!("{stem}.md"));
    std::fs::write(&md_path, &md).expect("write the Markdown report");
    let svg_path = cfg.out_dir.join(format!("{stem}.svg"));
    svg::write_svg(&svg_path, cfg, run, prov).expect("write the SVG chart");
    let json_path = cfg.out_dir.join(format!("{stem}.json"));
    std::fs::write(&json_path, json::json(cfg, run, prov)).expect("write the JSON results");
    eprintln!(
        "wrote {}, {} and {}",
        md_path.display(),
        svg_path.display(),
        json_path.display()
    );
}

pub fn fmt_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut u = 0;
    while v.abs() >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

pub fn fmt_ms(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else if ms >= 1.0 {
        format!("{ms:.2} ms")
    } else if ms >= 0.01 {
        format!("{:.0} µs", ms * 1000.0)
    } else {
        format!("{:.2} µs", ms * 1000.0)
    }
}

pub fn fmt_rate(r: f64) -> String {
    if r >= 10_000.0 {
        format!("{:.1}k", r / 1000.0)
    } else {
        format!("{r:.0}")
    }
}

pub fn fmt_ratio(r: f64) -> String {
    if r >= 10.0 {
        format!("{r:.0}×")
    } else {
        format!("{r:.2}×")
    }
}

pub fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "–".to_string(), f)
}
