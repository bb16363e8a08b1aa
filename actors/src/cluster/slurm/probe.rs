//! cluster::slurm::probe — `delta orchestrate --executor slurm --check`: a tiny job that
//! writes a file into the workspace from a compute node and runs the node's `delta
//! --version`; the submitting host then reads the file. Seeing it proves the workspace is
//! on a filesystem both share and that the nodes find the delta binary.
//!
//! Its files live in `<workspace>/.delta/slurm-probe/` (made 0700), removed with the
//! folders the probe made once it has seen them; a probe that failed keeps its job's log.
//!
//! Must not: leave the probe's job behind (cancelled when the wait runs out) or wait
//! unbounded.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::commands::{SlurmCommandError, SlurmTools};
use super::sbatch::{Submission, SubmissionShape};
use super::settings::SlurmSettings;

/// What the probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeReport {
    /// The probe job's Slurm id.
    pub job_id: String,
    /// The node's hostname, as the job wrote it.
    pub node: String,
    /// The node's `delta --version`.
    pub delta_version: String,
    /// From the submission until the probe's file was seen.
    pub waited: Duration,
}

/// Why the check failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Submitting the probe job failed: `sbatch` missing, refusing it or not answering.
    #[error(transparent)]
    Slurm(#[from] SlurmCommandError),
    /// The probe's folder in the workspace (`.delta/slurm-probe`) could not be created.
    #[error("cannot write the probe's folder {}: {message}", path.display())]
    Io {
        /// The folder.
        path: PathBuf,
        /// The operating system's error.
        message: String,
    },
    /// The probe's file did not appear in time (the workspace is not shared, or the job
    /// did not run); the job is cancelled before this is returned.
    #[error("the probe job {job_id} did not write {} within {} s (hint: the workspace must be on a filesystem the compute nodes share with this host — NFS, Lustre, GPFS...; its output is in {})", path.display(), waited.as_secs(), log.display())]
    NotSeen {
        /// The probe job's Slurm id.
        job_id: String,
        /// The file the job should have written.
        path: PathBuf,
        /// The job's stdout and stderr, where Slurm or the node said what went wrong.
        log: PathBuf,
        /// How long the check waited.
        waited: Duration,
    },
    /// The job ran and wrote its file, but the `delta` binary did not run on the node.
    #[error("the probe job {job_id} ran but `{delta}` did not run on the node: {output} (hint: set executor.delta_path to the delta binary as the nodes see it)", delta = delta.display())]
    NoDelta {
        /// The probe job's Slurm id.
        job_id: String,
        /// The binary the job tried to run, as the nodes see it.
        delta: PathBuf,
        /// The job's `delta --version` line: `FAILED: ` and what the shell printed, or empty.
        output: String,
    },
}

/// The probe's job: one plain job writing `<nonce>\n<hostname>\n<delta --version>`.
pub fn probe_submission(
    settings: &SlurmSettings,
    workspace: &Path,
    probe_file: &Path,
    log: &Path,
    delta: &Path,
    nonce: &str,
) -> Submission {
    let mut args = vec![
        "--parsable".to_owned(),
        "--job-name=delta-probe".to_owned(),
        "--comment=delta probe".to_owned(),
        format!("--output={}", log.display()),
        format!("--chdir={}", workspace.display()),
        "--export=ALL".to_owned(),
    ];
    if let Some(partition) = &settings.partition {
        args.push(format!("--partition={partition}"));
    }
    if let Some(account) = &settings.account {
        args.push(format!("--account={account}"));
    }
    args.push("--time=5".to_owned());
    args.extend(settings.sbatch_args.iter().cloned());
    let q = |p: &Path| shell_words::quote(&p.to_string_lossy()).into_owned();
    let script = format!(
        "#!/bin/sh\n# delta: shared-filesystem probe\nv=$({delta} --version 2>&1) || v=\"FAILED: $v\"\nprintf '%s\\n%s\\n%s\\n' {nonce} \"$(hostname)\" \"$v\" > {tmp} && mv {tmp} {file}\n",
        delta = q(delta),
        tmp = q(&probe_file.with_extension("tmp")),
        file = q(probe_file),
    );
    Submission {
        stage: "probe".to_owned(),
        shape: SubmissionShape::Single { index: 0 },
        args,
        script,
    }
}

/// Submits the probe and waits up to `limit` for its file.
pub async fn run_probe(
    tools: &SlurmTools,
    settings: &SlurmSettings,
    workspace: &Path,
    delta: &Path,
    env: &[(String, String)],
    limit: Duration,
) -> Result<ProbeReport, ProbeError> {
    let dir = workspace.join(".delta").join("slurm-probe");
    let created = missing_folders(&dir);
    crate::cluster::create_private_dirs(&dir).map_err(|e| ProbeError::Io {
        path: dir.clone(),
        message: e.to_string(),
    })?;
    let report = probe_in(tools, settings, workspace, &dir, delta, env, limit).await;
    // A failed probe keeps its job's log (the error names it), and with it its folders.
    remove_empty_folders(&created);
    report
}

/// The folders of `dir` (itself, then its parents) that do not exist yet: what to remove
/// again, if still empty, once a check that created them is over.
pub fn missing_folders(dir: &Path) -> Vec<PathBuf> {
    dir.ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && std::fs::symlink_metadata(d).is_err())
        .map(Path::to_path_buf)
        .collect()
}

/// Removes each of `folders`, deepest first, that is empty; leaves the others.
pub fn remove_empty_folders(folders: &[PathBuf]) {
    for folder in folders {
        let _ = std::fs::remove_dir(folder);
    }
}

async fn probe_in(
    tools: &SlurmTools,
    settings: &SlurmSettings,
    workspace: &Path,
    dir: &Path,
    delta: &Path,
    env: &[(String, String)],
    limit: Duration,
) -> Result<ProbeReport, ProbeError> {
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let file = dir.join(format!("{nonce}.txt"));
    let log = dir.join(format!("{nonce}.out"));
    let submission = probe_submission(settings, workspace, &file, &log, delta, &nonce);
    let started = Instant::now();
    let job_id = tools.submit(&submission, env).await?;
    let mut pause = Duration::from_millis(100);
    while started.elapsed() < limit {
        let probed = crate::bounded_read::read_to_string(
            &file,
            crate::bounded_read::MARKER,
            crate::bounded_read::Links::Refuse,
        );
        if let Ok(text) = probed {
            let mut lines = text.lines();
            if lines.next() == Some(nonce.as_str()) {
                let node = lines.next().unwrap_or("").to_owned();
                let version = lines.next().unwrap_or("").to_owned();
                let _ = std::fs::remove_file(&file);
                let _ = std::fs::remove_file(&log);
                if version.starts_with("FAILED") || version.is_empty() {
                    return Err(ProbeError::NoDelta {
                        job_id,
                        delta: delta.to_path_buf(),
                        output: version,
                    });
                }
                return Ok(ProbeReport {
                    job_id,
                    node,
                    delta_version: version,
                    waited: started.elapsed(),
                });
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
    let _ = tools.cancel(std::slice::from_ref(&job_id)).await;
    Err(ProbeError::NotSeen {
        job_id,
        path: file,
        log,
        waited: started.elapsed(),
    })
}
