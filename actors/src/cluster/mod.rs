//! cluster — running a plan's runs on a cluster scheduler instead of in this process, as
//! plain domain code (no actix): what the orchestrating process and a compute node exchange
//! through the shared filesystem ([`handoff`]), and the Slurm vocabulary ([`slurm`]: settings,
//! `sbatch` command lines, job arrays, job names and comments, `squeue` output, the
//! shared-filesystem probe).
//!
//! The `SlurmExecutor` actor in the runtime drives these; `delta exec-planned` is the
//! compute-node side. docs/scale-out.md describes the executor contract.
//!
//! Must not: import actix, decide scheduling (the plan's scheduler does), or hold secrets:
//! nothing here ever sees a provider key.

pub mod handoff;
pub mod relay_record;
pub mod slurm;

/// Creates `dir` and its missing parents 0700, whatever the umask: an orchestration's
/// `slurm/` folders hold task texts, results and job logs. Existing folders are left as
/// they are.
pub(crate) fn create_private_dirs(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}
