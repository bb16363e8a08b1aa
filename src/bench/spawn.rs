//! `delta bench spawn`: the CPU one tool start costs, from a process holding few descriptors
//! (what a fresh process pays), from one holding many (the engine at 10,000 concurrent runs),
//! and through the tool spawner; with `--sandbox`, also sandboxed (docs/sandbox.md) from the
//! spawner and in-process. Every start is a real `run_process` (pipes, capture, its own
//! process group) of the tool, awaited to its exit, one at a time.
//!
//! Owns its clap arguments, the three phases and their report. It must not change engine
//! behaviour: it only runs `ProcessSpec`s, with and without a spawner.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use delta_actors::sandbox::{
    confine, KernelSupport, PolicySource, RunPlace, RunSandbox, SandboxPolicy,
};
use delta_actors::tool::process::{run_process, ProcessSpec, Termination};
use delta_actors::tool::spawner::{share_for_process, Spawner, SpawnerCommand};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::measure::{ensure_open_files, open_fds, CpuUsage};
use super::BenchFormat;
use crate::error::CliError;
use crate::spawner::SUBCOMMAND;

const MAX_SPAWNS: usize = 1_000_000;
const MAX_DESCRIPTORS: usize = 1_000_000;
/// Descriptors the bench needs besides the ones it opens on purpose.
const DESCRIPTOR_MARGIN: u64 = 256;

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  delta bench spawn
  delta bench spawn --spawns 500 --descriptors 1000 --format json

Three phases of --spawns starts each: in-process while this process holds few descriptors
(the cost of a fresh process), in-process after opening --descriptors more (the engine at
many concurrent runs: fork copies the descriptor table, exec closes it), and through the
tool spawner (started before those descriptors, as the engine starts it). CPU per start is
this process's user + system time plus the spawner's and the tools'.

With --sandbox, two more: through the spawner with every tool sandboxed (workspace-write,
network off, the default deny_read: docs/sandbox.md), and in-process sandboxed with few
descriptors; the report adds what the sandbox costs per start over the unsandboxed spawner.
  delta bench spawn --sandbox --spawns 2000")]
pub struct SpawnArgs {
    /// Tool starts per phase.
    #[arg(long, default_value_t = 2000)]
    pub spawns: usize,
    /// Descriptors held open during the second and third phases.
    #[arg(long, default_value_t = 10_000)]
    pub descriptors: usize,
    /// The tool to start (split at whitespace, no shell).
    #[arg(long, default_value = "true")]
    pub tool: String,
    /// What stdout carries.
    #[arg(long, value_enum, default_value_t = BenchFormat::Text)]
    pub format: BenchFormat,
    /// Also measure sandboxed starts (through the spawner, and in-process).
    #[arg(long)]
    pub sandbox: bool,
}

/// `delta bench spawn --format json`, schema version 2 (2 added the sandboxed phases).
#[derive(Debug, Serialize)]
pub struct SpawnReport {
    pub schema_version: String,
    pub tool: Vec<String>,
    pub spawns_per_phase: usize,
    pub descriptors: usize,
    pub phases: Vec<Phase>,
    /// Spawner phase CPU per start over the fresh-process phase's.
    pub spawner_over_fresh: f64,
    /// In-process-with-many-descriptors CPU per start over the fresh-process phase's.
    pub in_process_over_fresh: f64,
    /// With `--sandbox`: CPU per sandboxed start through the spawner minus per unsandboxed
    /// one (milliseconds); `null` without it.
    pub sandbox_extra_cpu_ms_per_spawn: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Phase {
    pub name: String,
    /// Descriptors this process held during the phase.
    pub open_descriptors: u64,
    /// This process + spawner + tools, milliseconds of CPU per start.
    pub cpu_ms_per_spawn: f64,
    /// This process alone.
    pub engine_cpu_ms_per_spawn: f64,
    pub wall_ms_per_spawn: f64,
}

pub fn run(args: &SpawnArgs) -> Result<i32, CliError> {
    let tool: Vec<String> = args.tool.split_whitespace().map(str::to_owned).collect();
    if tool.is_empty() {
        return Err(CliError::Usage(
            "--tool is empty: give a command such as `true`".into(),
        ));
    }
    if !(1..=MAX_SPAWNS).contains(&args.spawns) || args.descriptors > MAX_DESCRIPTORS {
        return Err(CliError::Usage(format!(
            "--spawns must be 1..={MAX_SPAWNS} and --descriptors at most {MAX_DESCRIPTORS}"
        )));
    }
    ensure_open_files(args.descriptors as u64 + DESCRIPTOR_MARGIN).map_err(CliError::Config)?;
    let program = super::delta_exe()?;
    // Like the engine: the spawner starts before the descriptors exist, as the process's
    // shared one (so CpuUsage counts it).
    let spawner = share_for_process(&SpawnerCommand::new(program, [SUBCOMMAND]))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Runtime(format!("cannot start the async runtime: {e}")))?;
    let report = rt.block_on(measure(args, tool, spawner))?;
    match args.format {
        BenchFormat::Json => crate::output::emit_json(&report),
        BenchFormat::Text => crate::output::emit(&render_text(&report)),
    }
    Ok(0)
}

async fn measure(
    args: &SpawnArgs,
    tool: Vec<String>,
    spawner: Arc<Spawner>,
) -> Result<SpawnReport, CliError> {
    let workspace = BenchWorkspace::new()?;
    let sandbox = if args.sandbox {
        Some(workspace.sandbox()?)
    } else {
        None
    };
    let cwd = workspace.dir.clone();
    let fresh = phase("in-process, few descriptors", args, &tool, &cwd, None, None).await?;
    let fresh_sandboxed = match &sandbox {
        Some(sandbox) => Some(
            phase(
                "in-process, sandboxed, few descriptors",
                args,
                &tool,
                &cwd,
                None,
                Some(sandbox.clone()),
            )
            .await?,
        ),
        None => None,
    };
    let held: Vec<std::fs::File> = (0..args.descriptors)
        .map(|_| std::fs::File::open("/dev/null"))
        .collect::<Result<_, _>>()
        .map_err(|e| CliError::Runtime(format!("cannot open the --descriptors: {e}")))?;
    let crowded = phase(
        "in-process, many descriptors",
        args,
        &tool,
        &cwd,
        None,
        None,
    )
    .await?;
    let spawned = phase(
        "tool spawner, many descriptors",
        args,
        &tool,
        &cwd,
        Some(spawner.clone()),
        None,
    )
    .await?;
    let spawned_sandboxed = match &sandbox {
        Some(sandbox) => Some(
            phase(
                "tool spawner, sandboxed, many descriptors",
                args,
                &tool,
                &cwd,
                Some(spawner),
                Some(sandbox.clone()),
            )
            .await?,
        ),
        None => None,
    };
    drop(held);
    let fresh_cpu = fresh.cpu_ms_per_spawn.max(f64::EPSILON);
    let ratio = |phase: &Phase| phase.cpu_ms_per_spawn / fresh_cpu;
    let sandbox_extra = spawned_sandboxed
        .as_ref()
        .map(|sandboxed| sandboxed.cpu_ms_per_spawn - spawned.cpu_ms_per_spawn);
    let mut phases = vec![fresh, crowded, spawned];
    phases.extend(spawned_sandboxed);
    phases.extend(fresh_sandboxed);
    Ok(SpawnReport {
        schema_version: "2".into(),
        spawner_over_fresh: ratio(&phases[2]),
        in_process_over_fresh: ratio(&phases[1]),
        sandbox_extra_cpu_ms_per_spawn: sandbox_extra,
        tool,
        spawns_per_phase: args.spawns,
        descriptors: args.descriptors,
        phases,
    })
}

/// The folder the tools run in (their workspace when sandboxed), removed at the end.
struct BenchWorkspace {
    dir: std::path::PathBuf,
}

impl BenchWorkspace {
    fn new() -> Result<BenchWorkspace, CliError> {
        let dir = std::env::temp_dir().join(format!("delta-bench-spawn-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| CliError::Runtime(format!("cannot create {}: {e}", dir.display())))?;
        Ok(BenchWorkspace { dir })
    }

    /// The default sandbox (workspace-write, network off) of a run in this folder, with
    /// this process's HOME (its credential stores hidden) and temporary folder.
    fn sandbox(&self) -> Result<Arc<RunSandbox>, CliError> {
        let env: BTreeMap<String, String> = ["HOME", "TMPDIR", "PATH"]
            .into_iter()
            .filter_map(|key| Some((key.to_owned(), std::env::var(key).ok()?)))
            .collect();
        let place = RunPlace {
            work_dir: &self.dir,
            agent_home: &self.dir,
            env: &env,
        };
        let policy = SandboxPolicy::defaults(PolicySource::Environment);
        confine(&policy, &place, &KernelSupport::probed())
            .map(|confined| confined.sandbox)
            .map_err(|e| CliError::Config(format!("--sandbox: {e}")))
    }
}

impl Drop for BenchWorkspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn phase(
    name: &str,
    args: &SpawnArgs,
    tool: &[String],
    cwd: &std::path::Path,
    spawner: Option<Arc<Spawner>>,
    sandbox: Option<Arc<RunSandbox>>,
) -> Result<Phase, CliError> {
    let env = vec![(
        "PATH".to_owned(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
    )];
    let cwd = cwd.to_path_buf();
    let open_descriptors = open_fds();
    // Includes the spawner's CPU and its tools' (see CpuUsage::now).
    let before = CpuUsage::now();
    let started = Instant::now();
    for _ in 0..args.spawns {
        let mut spec = ProcessSpec::new(tool.to_vec(), cwd.clone(), env.clone());
        spec.spawner = spawner.clone();
        spec.sandbox = sandbox.clone();
        let outcome = run_process(spec, CancellationToken::new()).await;
        if outcome.termination != Termination::Exited(0) {
            return Err(CliError::Runtime(format!(
                "--tool {:?} did not exit 0 ({:?}); give a tool that succeeds, such as `true`",
                args.tool, outcome.termination
            )));
        }
    }
    let wall = started.elapsed();
    let cpu = CpuUsage::now().since(&before);
    let per = |seconds: f64| seconds * 1000.0 / args.spawns as f64;
    let engine_s = cpu.user_s + cpu.sys_s;
    Ok(Phase {
        name: name.into(),
        open_descriptors,
        cpu_ms_per_spawn: per(engine_s + cpu.children_user_s + cpu.children_sys_s),
        engine_cpu_ms_per_spawn: per(engine_s),
        wall_ms_per_spawn: per(wall.as_secs_f64()),
    })
}

fn render_text(report: &SpawnReport) -> String {
    let mut text = format!(
        "tool {:?}, {} starts per phase\n\n{:<32} {:>12} {:>14} {:>14} {:>10}\n",
        report.tool.join(" "),
        report.spawns_per_phase,
        "phase",
        "descriptors",
        "cpu ms/start",
        "engine ms",
        "wall ms"
    );
    for phase in &report.phases {
        text.push_str(&format!(
            "{:<32} {:>12} {:>14.3} {:>14.3} {:>10.3}\n",
            phase.name,
            phase.open_descriptors,
            phase.cpu_ms_per_spawn,
            phase.engine_cpu_ms_per_spawn,
            phase.wall_ms_per_spawn
        ));
    }
    text.push_str(&format!(
        "\nCPU per start against a fresh process: in-process {:.2}x, through the spawner {:.2}x\n",
        report.in_process_over_fresh, report.spawner_over_fresh
    ));
    if let Some(extra) = report.sandbox_extra_cpu_ms_per_spawn {
        text.push_str(&format!(
            "The sandbox adds {extra:.3} ms of CPU per start through the spawner\n"
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_report_names_each_phase_and_the_ratios() {
        let phase = |name: &str, cpu: f64| Phase {
            name: name.into(),
            open_descriptors: 10,
            cpu_ms_per_spawn: cpu,
            engine_cpu_ms_per_spawn: cpu / 2.0,
            wall_ms_per_spawn: cpu,
        };
        let report = SpawnReport {
            schema_version: "2".into(),
            tool: vec!["true".into()],
            spawns_per_phase: 3,
            descriptors: 10,
            phases: vec![phase("a", 0.5), phase("b", 1.5)],
            spawner_over_fresh: 1.1,
            in_process_over_fresh: 3.0,
            sandbox_extra_cpu_ms_per_spawn: Some(0.125),
        };
        let text = render_text(&report);
        assert!(
            text.contains("in-process 3.00x, through the spawner 1.10x"),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with('b') && l.contains("1.500")),
            "{text}"
        );
        assert!(
            text.contains("The sandbox adds 0.125 ms of CPU per start"),
            "{text}"
        );
    }
}
