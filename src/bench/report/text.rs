//! Text rendering of a [`BenchReport`](super::BenchReport): one block per point, then the
//! baseline and the ratios. It must not compute figures; the report already holds them.

use std::fmt::Write as _;

use super::{BenchReport, LoadPoint, Percentiles};

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The human-readable report.
pub fn render_text(report: &BenchReport) -> String {
    let mut out = String::new();
    let m = &report.machine;
    let w = &report.workload;
    let _ = writeln!(
        out,
        "machine: {} CPUs ({}), {:.1} GiB RAM, {} {}, open files {}, delta {} ({} build, {})",
        m.cpus,
        m.cpu_model,
        mib(m.memory_total_bytes) / 1024.0,
        m.os,
        m.kernel,
        m.open_files_limit,
        m.delta_version,
        m.build,
        m.allocator
    );
    let jitter = if w.latency_jitter_ms > 0 {
        format!("±{}", w.latency_jitter_ms)
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "workload: {} model calls per run ({} x `{}`), latency {}{} ms, journal fsync {}, model: {}",
        w.calls_per_run,
        w.calls_per_run.saturating_sub(1),
        w.tool,
        w.latency_ms,
        jitter,
        if w.journal_fsync { "on" } else { "off" },
        w.endpoint
    );
    let _ = writeln!(
        out,
        "tool spawn rate: {:.0}/s (fresh processes), {:.0}/s through the tool spawner; model over {}, {}{}",
        report.tool_spawn_rate_per_s,
        report.spawner_spawn_rate_per_s,
        if w.http2 { "HTTP/2" } else { "HTTP/1.1" },
        if w.stream { "streamed" } else { "not streamed" },
        w.max_connections
            .map(|n| format!(", at most {n} connections"))
            .unwrap_or_default()
    );
    for p in &report.points {
        render_point(&mut out, p, m.cpus);
    }
    if let Some(b) = &report.baseline {
        let _ = writeln!(
            out,
            "\nbaseline {} ({} runs, at most {} at a time)",
            b.kind, b.runs, b.max_parallel
        );
        runs_rows(&mut out, b.completed_runs, b.failed_runs, &b.errors);
        row(
            &mut out,
            "wall",
            format_args!("{:.2} s ({:.1} runs/s)", b.wall_s, b.runs_per_s),
        );
        latency_row(&mut out, &b.run_latency_ms);
        row(
            &mut out,
            "memory",
            format_args!(
                "{:.1} MiB total (sum of peak RSS), {:.1} MiB largest process",
                mib(b.total_peak_rss_bytes),
                mib(b.max_process_peak_rss_bytes)
            ),
        );
        row(
            &mut out,
            "cpu",
            format_args!("{:.2} s user, {:.2} s sys", b.cpu_user_s, b.cpu_sys_s),
        );
    }
    if let Some(c) = &report.comparison {
        let _ = writeln!(
            out,
            "\none process with actors vs process-per-run: {:.1}x less wall, {:.1}x less memory, {:.1}x less CPU",
            c.wall_ratio, c.memory_ratio, c.cpu_ratio
        );
    }
    out
}

fn render_point(out: &mut String, p: &LoadPoint, cpus: usize) {
    let _ = writeln!(out, "\n{} runs, max parallel {}", p.runs, p.max_parallel);
    runs_rows(out, p.completed_runs, p.failed_runs, &p.errors);
    row(
        out,
        "wall",
        format_args!(
            "{:.2} s  ({:.1} runs/s, {:.1} model calls/s, {:.1} tool executions/s)",
            p.wall_s, p.runs_per_s, p.model_calls_per_s, p.tool_executions_per_s
        ),
    );
    latency_row(out, &p.run_latency_ms);
    let o = &p.engine_overhead_per_iteration_ms;
    row(
        out,
        "engine overhead",
        format_args!(
            "p50 {:.2} ms, p95 {:.2}, p99 {:.2}, max {:.2} per iteration",
            o.p50, o.p95, o.p99, o.max
        ),
    );
    row(
        out,
        "peak RSS",
        format_args!(
            "{:.1} MiB (process), {:.1} MiB sampled during this point",
            mib(p.peak_rss_bytes),
            mib(p.peak_rss_sampled_bytes)
        ),
    );
    row(
        out,
        "peak open fds",
        format_args!(
            "{} ({} before the runs: {:.2} per concurrent run); at most {} tools at once",
            p.peak_open_fds, p.open_fds_before, p.fds_per_run, p.max_tool_processes
        ),
    );
    let c = &p.cpu;
    row(
        out,
        "cpu",
        format_args!(
            "{:.2} s user, {:.2} s sys; tools {:.2} s user, {:.2} s sys; {:.0}% of {} CPUs over the wall",
            c.user_s,
            c.sys_s,
            c.children_user_s,
            c.children_sys_s,
            p.cpu_busy_percent(cpus),
            cpus
        ),
    );
    row(
        out,
        "engine cpu",
        format_args!(
            "{:.3} ms engine CPU per iteration, {:.3} of it in the kernel ({:.2} s over {} iterations; scripted model thread {:.2} s apart)",
            p.engine_cpu_per_iteration_ms,
            p.engine_sys_s * 1000.0 / p.iterations.max(1) as f64,
            p.engine_cpu_s,
            p.iterations,
            p.scripted_server_cpu_s
        ),
    );
    let b = &p.lower_bound;
    row(
        out,
        "lower bound",
        format_args!(
            "{} (latency chain {}, tool spawning {}): achieved {:.2}x the ideal",
            short_duration(b.ideal_s),
            short_duration(b.latency_chain_s),
            short_duration(b.tool_spawn_s),
            b.achieved_ratio
        ),
    );
}

/// Seconds as `1.49 s`, or `1.5 ms` below a tenth of a second, where two decimals of a
/// second would print an ideal of a few milliseconds as `0.00 s`.
fn short_duration(seconds: f64) -> String {
    if seconds >= 0.1 || seconds == 0.0 {
        format!("{seconds:.2} s")
    } else {
        format!("{:.1} ms", seconds * 1000.0)
    }
}

/// One indented `label  value` line; labels are padded so the values line up.
fn row(out: &mut String, label: &str, value: std::fmt::Arguments<'_>) {
    let _ = writeln!(out, "  {label:<16}{value}");
}

fn runs_rows(out: &mut String, completed: usize, failed: usize, errors: &[String]) {
    row(
        out,
        "runs",
        format_args!("{completed} completed, {failed} failed"),
    );
    for e in errors {
        let _ = writeln!(out, "    error: {e}");
    }
}

fn latency_row(out: &mut String, l: &Percentiles) {
    row(
        out,
        "run latency",
        format_args!(
            "p50 {:.0} ms, p95 {:.0}, p99 {:.0}, max {:.0}",
            l.p50, l.p95, l.p99, l.max
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::short_duration;

    #[test]
    fn an_ideal_of_a_few_milliseconds_is_not_printed_as_zero_seconds() {
        assert_eq!(short_duration(0.0015), "1.5 ms");
        assert_eq!(short_duration(1.4942), "1.49 s");
        assert_eq!(short_duration(0.0), "0.00 s");
    }
}
