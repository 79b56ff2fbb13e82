//! The SVG chart (`bench-results/workload.svg`): commits/s and p99 latency per T, bytes
//! on disk and warm load time at the largest T, bars on log scales.

use std::path::Path;

use plotters::backend::SVGBackend;
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::Run;
use crate::config::Config;
use crate::measurement::Measurement;
use crate::provenance::Provenance;
use crate::report::{fmt_bytes, fmt_ms, fmt_rate};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, LogCoord<f64>>>;

struct Bar {
    group: usize,
    slot: usize,
    slots: usize,
    value: f64,
    color: RGBColor,
}

pub fn write_svg(path: &Path, cfg: &Config, run: &Run, prov: &Provenance) -> Result {
    let root = SVGBackend::new(path, (1280, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title_area, body) = root.split_vertically(64);
    title(&title_area, cfg, prov)?;
    let panels = body.split_evenly((2, 2));
    let tmax = cfg.tmax();
    let t_groups: Vec<String> = cfg.threads.iter().map(|t| format!("T = {t}")).collect();
    bar_panel(
        &panels[0],
        "commits/s (higher is better)",
        &t_groups,
        &per_t(cfg, run, &|m| Some(m.commits_per_s)),
        &|v| fmt_rate(v),
        &legend(cfg),
    )?;
    bar_panel(
        &panels[1],
        "p99 commit latency (lower is better)",
        &t_groups,
        &per_t(cfg, run, &|m| Some(m.p99_ms)),
        &|v| fmt_ms(v),
        &[],
    )?;
    let (groups, bars) = per_backend(cfg, run, tmax, &|m| Some(m.disk_bytes));
    bar_panel(
        &panels[2],
        &format!("bytes on disk after T = {tmax} (lower is better)"),
        &groups,
        &bars,
        &|v| fmt_bytes(v),
        &[],
    )?;
    let (groups, bars) = per_backend(cfg, run, tmax, &|m| m.load_warm_us.map(|u| u / 1e3));
    bar_panel(
        &panels[3],
        &format!(
            "load_latest p50 of a {}-step task, warm (agentwal: cache hit; lower is better)",
            cfg.steps
        ),
        &groups,
        &bars,
        &|v| fmt_ms(v),
        &[],
    )?;
    root.present()?;
    Ok(())
}

fn title<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    cfg: &Config,
    prov: &Provenance,
) -> Result
where
    DB::ErrorType: 'static,
{
    area.draw(&Text::new(
        format!(
            "agentwal workload benchmark ({} mode, {}, S = {} steps per task, median of {} round(s))",
            if cfg.quick { "quick" } else { "full" },
            cfg.process.name(),
            cfg.steps,
            cfg.rounds
        ),
        (12, 8),
        ("sans-serif", 20).into_font(),
    ))?;
    area.draw(&Text::new(
        format!("{} · commit {}", prov.date, prov.commit),
        (12, 34),
        ("sans-serif", 12).into_font(),
    ))?;
    area.draw(&Text::new(
        prov.machine.clone(),
        (12, 49),
        ("sans-serif", 12).into_font(),
    ))?;
    Ok(())
}

/// A backend that is not durable per commit says so, so its bars are not read as a peer's.
fn legend(cfg: &Config) -> Vec<(String, RGBColor)> {
    cfg.backends
        .iter()
        .map(|&b| {
            let name = if b.durable_per_commit() {
                b.name().to_string()
            } else {
                format!("{} (not durable per commit)", b.name())
            };
            (name, b.color())
        })
        .collect()
}

/// One group of bars per T, one bar per backend.
fn per_t(cfg: &Config, run: &Run, f: &dyn Fn(&Measurement) -> Option<f64>) -> Vec<Bar> {
    let mut bars = Vec::new();
    for (g, &t) in cfg.threads.iter().enumerate() {
        for (slot, &b) in cfg.backends.iter().enumerate() {
            if let Some(v) = run.median(t, b).as_ref().and_then(f) {
                bars.push(Bar {
                    group: g,
                    slot,
                    slots: cfg.backends.len(),
                    value: v,
                    color: b.color(),
                });
            }
        }
    }
    bars
}

/// One bar per backend that has the figure at T = `t`, each its own group.
fn per_backend(
    cfg: &Config,
    run: &Run,
    t: usize,
    f: &dyn Fn(&Measurement) -> Option<f64>,
) -> (Vec<String>, Vec<Bar>) {
    let mut groups = Vec::new();
    let mut bars = Vec::new();
    for &b in &cfg.backends {
        if let Some(v) = run.median(t, b).as_ref().and_then(f) {
            bars.push(Bar {
                group: groups.len(),
                slot: 0,
                slots: 1,
                value: v,
                color: b.color(),
            });
            groups.push(b.name().to_string());
        }
    }
    (groups, bars)
}

/// One panel of bars on a log scale; `legend` names the colors.
fn bar_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    caption: &str,
    groups: &[String],
    bars: &[Bar],
    label: &dyn Fn(f64) -> String,
    legend: &[(String, RGBColor)],
) -> Result
where
    DB::ErrorType: 'static,
{
    // A log axis needs finite, positive values (an infinite one once hung the drawing).
    let bars: Vec<&Bar> = bars
        .iter()
        .filter(|b| b.value.is_finite() && b.value > 0.0)
        .collect();
    if bars.is_empty() {
        return Ok(());
    }
    let lo = bars.iter().map(|b| b.value).fold(f64::INFINITY, f64::min) / 3.0;
    // Leave room above the bars for their labels (and the legend).
    let headroom = if legend.is_empty() { 4.0 } else { 40.0 };
    let hi = bars.iter().map(|b| b.value).fold(0.0, f64::max) * headroom;
    let n = groups.len();
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(64)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n + 1)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < n {
                groups[i as usize].clone()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| label(*y))
        .draw()?;
    draw_bars(&mut chart, &bars, lo, label)?;
    draw_legend(&mut chart, legend)
}

/// Each bar and its value above it.
fn draw_bars<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    bars: &[&Bar],
    lo: f64,
    label: &dyn Fn(f64) -> String,
) -> Result
where
    DB::ErrorType: 'static,
{
    for bar in bars {
        let width = 0.84 / bar.slots as f64;
        let x0 = bar.group as f64 - 0.42 + width * bar.slot as f64;
        let x1 = x0 + width * 0.9;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(x0, lo), (x1, bar.value)],
            bar.color.filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            label(bar.value),
            ((x0 + x1) / 2.0, bar.value * 1.12),
            ("sans-serif", 10)
                .into_font()
                .transform(FontTransform::Rotate270)
                .color(&BLACK),
        )))?;
    }
    Ok(())
}

fn draw_legend<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    legend: &[(String, RGBColor)],
) -> Result
where
    DB::ErrorType: 'static,
{
    for (name, color) in legend {
        let color = *color;
        chart
            .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
            .label(name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    if !legend.is_empty() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 11))
            .draw()?;
    }
    Ok(())
}
