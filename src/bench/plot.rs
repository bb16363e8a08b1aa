//! `--plot FILE.svg`: a hand-written SVG of a `--sweep`, two panels against concurrency on a
//! log scale: throughput (runs/s) and p99 run latency (ms). It must not measure anything
//! and needs no plotting crate.

use std::fmt::Write as _;
use std::path::Path;

use super::report::LoadPoint;
use crate::error::CliError;

const PANEL_W: f64 = 420.0;
const PANEL_H: f64 = 300.0;
const MARGIN_L: f64 = 70.0;
const MARGIN_T: f64 = 40.0;
const MARGIN_B: f64 = 50.0;
const GAP: f64 = 90.0;

/// One panel: a title, a y label and (concurrency, value) points.
struct Series<'a> {
    title: &'a str,
    y_label: &'a str,
    colour: &'a str,
    points: Vec<(f64, f64)>,
}

/// Writes the sweep's SVG to `path`.
pub fn write_svg(path: &Path, points: &[LoadPoint]) -> Result<(), CliError> {
    let svg = render_svg(points);
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| {
            CliError::Runtime(format!(
                "cannot create {} for --plot: {e}",
                parent.display()
            ))
        })?;
    }
    std::fs::write(path, svg)
        .map_err(|e| CliError::Runtime(format!("cannot write --plot {}: {e}", path.display())))
}

/// The SVG document for a sweep.
pub fn render_svg(points: &[LoadPoint]) -> String {
    let throughput = Series {
        title: "Throughput",
        y_label: "runs/s",
        colour: "#1f77b4",
        points: points
            .iter()
            .map(|p| (p.max_parallel as f64, p.runs_per_s))
            .collect(),
    };
    let latency = Series {
        title: "p99 run latency",
        y_label: "ms",
        colour: "#d62728",
        points: points
            .iter()
            .map(|p| (p.max_parallel as f64, p.run_latency_ms.p99))
            .collect(),
    };
    let width = MARGIN_L * 2.0 + PANEL_W * 2.0 + GAP;
    let height = MARGIN_T + PANEL_H + MARGIN_B;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    panel(&mut svg, &throughput, MARGIN_L);
    panel(
        &mut svg,
        &latency,
        MARGIN_L * 2.0 + PANEL_W + GAP - MARGIN_L,
    );
    svg.push_str("</svg>\n");
    svg
}

fn log10_range(xs: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = xs.fold((f64::MAX, f64::MIN), |(lo, hi), x| {
        let l = x.max(1.0).log10();
        (lo.min(l), hi.max(l))
    });
    if lo > hi {
        (0.0, 1.0)
    } else if hi - lo < 1e-9 {
        (lo - 0.5, hi + 0.5)
    } else {
        (lo, hi)
    }
}

fn panel(svg: &mut String, series: &Series, left: f64) {
    let top = MARGIN_T;
    let bottom = top + PANEL_H;
    let (x_lo, x_hi) = log10_range(series.points.iter().map(|p| p.0));
    let y_max = nice_ceiling(series.points.iter().map(|p| p.1).fold(0.0, f64::max));
    let x_of = |x: f64| left + (x.max(1.0).log10() - x_lo) / (x_hi - x_lo) * PANEL_W;
    let y_of = |y: f64| bottom - y / y_max * PANEL_H;
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">{}</text>",
        left + PANEL_W / 2.0,
        top - 15.0,
        series.title
    );
    let _ = writeln!(
        svg,
        "<rect x=\"{left:.1}\" y=\"{top:.1}\" width=\"{PANEL_W}\" height=\"{PANEL_H}\" fill=\"none\" stroke=\"#444\"/>"
    );
    for k in 0..=4 {
        let y = y_max * f64::from(k) / 4.0;
        let py = y_of(y);
        let _ = writeln!(
            svg,
            "<line x1=\"{left:.1}\" y1=\"{py:.1}\" x2=\"{:.1}\" y2=\"{py:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left + PANEL_W,
            left - 6.0,
            py + 4.0,
            format_tick(y)
        );
    }
    for &(x, _) in &series.points {
        let px = x_of(x);
        let _ = writeln!(
            svg,
            "<text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            bottom + 18.0,
            format_tick(x)
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">concurrent runs (log scale)</text>",
        left + PANEL_W / 2.0,
        bottom + 40.0
    );
    let _ = writeln!(
        svg,
        "<text transform=\"translate({:.1},{:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        left - 52.0,
        top + PANEL_H / 2.0,
        series.y_label
    );
    let path: Vec<String> = series
        .points
        .iter()
        .map(|&(x, y)| format!("{:.1},{:.1}", x_of(x), y_of(y)))
        .collect();
    let _ = writeln!(
        svg,
        "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>",
        path.join(" "),
        series.colour
    );
    for &(x, y) in &series.points {
        let _ = writeln!(
            svg,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"{}\"><title>{}: {}</title></circle>",
            x_of(x),
            y_of(y),
            series.colour,
            format_tick(x),
            format_tick(y)
        );
    }
}

/// 1, 2 or 5 times a power of ten, at least `v` (1 for non-positive values).
fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let power = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * power)
}

fn format_tick(v: f64) -> String {
    if v >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::bench::measure::{CpuUsage, Peaks};
    use crate::bench::report::{LowerBound, RunSample};

    fn point(concurrency: usize, latency_ms: u64) -> LoadPoint {
        let samples = vec![
            RunSample {
                duration_ms: latency_ms,
                model_time_ms: 0,
                queue_time_ms: 0,
                tool_time_ms: 0,
                iterations: 1,
                completed: true,
            };
            concurrency
        ];
        LoadPoint::summarise(
            concurrency,
            concurrency,
            1,
            std::time::Duration::from_secs(1),
            &samples,
            vec![],
            CpuUsage::default(),
            Peaks::default(),
            LowerBound::for_workload(1, 1, 1, 0.0, 1.0),
        )
    }

    #[test]
    fn svg_has_both_panels_and_one_marker_per_point() {
        let svg = render_svg(&[point(10, 300), point(100, 450), point(1000, 900)]);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("Throughput") && svg.contains("p99 run latency"));
        assert_eq!(svg.matches("<circle").count(), 6);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("<title>1000: 900</title>"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn nice_ceilings() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(120.0), 200.0);
        assert_eq!(nice_ceiling(400.0), 500.0);
        assert_eq!(nice_ceiling(1000.0), 1000.0);
    }
}
