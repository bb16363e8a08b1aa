//! BENCHMARKS.md's "Current figures" table against the JSON reports it quotes
//! (docs/bench/current/, written by scripts/bench-current.sh): every figure the table shows
//! is the one in its report, formatted as the table writes it, so the table cannot drift
//! from the measurements.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::Value;

/// How one figure of a report is written in the table.
enum Format {
    /// The value × factor with this many decimals, then the unit (`4.31 s`).
    Fixed {
        factor: f64,
        decimals: usize,
        unit: &'static str,
    },
    /// Completed of all runs (`10000/10000 completed`).
    Completed,
}

/// (report, JSON pointer, format): the figures the table must show.
const FIGURES: &[(&str, &str, Format)] = &[
    (
        "single-run",
        "/points/0/wall_s",
        Format::Fixed {
            factor: 1000.0,
            decimals: 1,
            unit: " ms",
        },
    ),
    (
        "overhead-200-events",
        "/points/0/engine_overhead_per_iteration_ms/p50",
        Format::Fixed {
            factor: 1.0,
            decimals: 2,
            unit: " ms",
        },
    ),
    (
        "load-1000-stream",
        "/points/0/wall_s",
        Format::Fixed {
            factor: 1.0,
            decimals: 2,
            unit: " s",
        },
    ),
    (
        "load-1000-stream",
        "/points/0/peak_rss_bytes",
        Format::Fixed {
            factor: 1.0 / 1048576.0,
            decimals: 0,
            unit: " MiB",
        },
    ),
    (
        "load-1000-stream",
        "/points/0/engine_cpu_per_iteration_ms",
        Format::Fixed {
            factor: 1.0,
            decimals: 3,
            unit: " ms",
        },
    ),
    (
        "load-1000-unstreamed",
        "/points/0/wall_s",
        Format::Fixed {
            factor: 1.0,
            decimals: 2,
            unit: " s",
        },
    ),
    (
        "load-1000-unstreamed",
        "/points/0/engine_cpu_per_iteration_ms",
        Format::Fixed {
            factor: 1.0,
            decimals: 3,
            unit: " ms",
        },
    ),
    ("load-10000", "/points/0", Format::Completed),
    (
        "load-10000",
        "/points/0/peak_rss_bytes",
        Format::Fixed {
            factor: 1.0 / 1048576.0,
            decimals: 0,
            unit: " MiB",
        },
    ),
    (
        "load-10000",
        "/points/0/wall_s",
        Format::Fixed {
            factor: 1.0,
            decimals: 1,
            unit: " s",
        },
    ),
    (
        "baseline-50",
        "/comparison/memory_ratio",
        Format::Fixed {
            factor: 1.0,
            decimals: 1,
            unit: "×",
        },
    ),
    (
        "serve",
        "/echo_p99_ms",
        Format::Fixed {
            factor: 1.0,
            decimals: 2,
            unit: " ms",
        },
    ),
    (
        "serve",
        "/server_peak_rss_mib",
        Format::Fixed {
            factor: 1.0,
            decimals: 0,
            unit: " MiB",
        },
    ),
    (
        "serve-batch",
        "/first_paint_cold_ms",
        Format::Fixed {
            factor: 1.0,
            decimals: 0,
            unit: " ms",
        },
    ),
    (
        "serve-batch",
        "/list_p99_ms",
        Format::Fixed {
            factor: 1.0,
            decimals: 1,
            unit: " ms",
        },
    ),
    (
        "serve-batch",
        "/server_peak_rss_mib",
        Format::Fixed {
            factor: 1.0,
            decimals: 0,
            unit: " MiB",
        },
    ),
    (
        "spawn-sandbox",
        "/sandbox_extra_cpu_ms_per_spawn",
        Format::Fixed {
            factor: 1.0,
            decimals: 3,
            unit: " ms",
        },
    ),
    (
        "load-1000-sandboxed",
        "/points/0/wall_s",
        Format::Fixed {
            factor: 1.0,
            decimals: 2,
            unit: " s",
        },
    ),
    (
        "load-1000-sandboxed",
        "/points/0/lower_bound/achieved_ratio",
        Format::Fixed {
            factor: 1.0,
            decimals: 2,
            unit: "×",
        },
    ),
    (
        "installed-size",
        "/installed_bytes",
        Format::Fixed {
            factor: 1e-6,
            decimals: 1,
            unit: " MB",
        },
    ),
];

fn written(report: &Value, pointer: &str, format: &Format) -> String {
    let value = report
        .pointer(pointer)
        .unwrap_or_else(|| panic!("no {pointer} in the report"));
    match format {
        Format::Fixed {
            factor,
            decimals,
            unit,
        } => format!("{:.*}{unit}", decimals, value.as_f64().unwrap() * factor),
        Format::Completed => format!("{}/{} completed", value["completed_runs"], value["runs"]),
    }
}

#[test]
fn the_current_table_matches_its_json_reports() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("BENCHMARKS.md")).unwrap();
    let table: Vec<&str> = doc
        .split("## Current figures")
        .nth(1)
        .expect("BENCHMARKS.md has a `## Current figures` section")
        .lines()
        .take_while(|l| !l.starts_with("## "))
        .filter(|l| l.starts_with('|'))
        .collect();
    let mut missing = Vec::new();
    for (name, pointer, format) in FIGURES {
        let path = root.join(format!("docs/bench/current/{name}.json"));
        let report: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let figure = written(&report, pointer, format);
        let quoted = format!("current/{name}.json");
        if !table
            .iter()
            .any(|row| row.contains(&quoted) && row.contains(&figure))
        {
            missing.push(format!("{name}{pointer} = {figure}"));
        }
    }
    // The streaming cost is the difference of the two 1,000 @ 1,000 reports.
    let cpu = |name: &str| -> f64 {
        let path = root.join(format!("docs/bench/current/{name}.json"));
        let report: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        report["points"][0]["engine_cpu_per_iteration_ms"]
            .as_f64()
            .unwrap()
    };
    let extra = format!(
        "{:+.3} ms",
        cpu("load-1000-stream") - cpu("load-1000-unstreamed")
    );
    if !table.iter().any(|row| row.contains(&extra)) {
        missing.push(format!(
            "streaming's extra engine CPU per iteration = {extra}"
        ));
    }
    assert!(
        missing.is_empty(),
        "BENCHMARKS.md's current table does not show these figures of docs/bench/current/ (run scripts/bench-current.sh and update the table): {missing:?}"
    );
}
