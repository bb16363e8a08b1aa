//! cluster::slurm::commands — running Slurm's client commands: `sbatch` (the job script on
//! stdin, the environment given explicitly), `squeue` (this user's tasks, one per line),
//! `scancel`; each bounded in time, each failure worded with the command and Slurm's own
//! message.
//!
//! Must not: run anything through a shell, or inherit this process's environment into a
//! job: `sbatch` gets exactly the variables its caller passes (no provider key among them).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::sbatch::Submission;
use super::squeue::{parse_queue, QueuedTask, SQUEUE_FORMAT};

/// The longest any one Slurm command may take (a busy controller answers in seconds).
pub const COMMAND_TIME: Duration = Duration::from_secs(60);
/// At most this many job ids per `scancel`.
const CANCEL_BATCH: usize = 500;

/// Why a Slurm command did not do its job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlurmCommandError {
    /// The command is in none of the PATH's folders (or is not executable there).
    #[error("`{tool}` is not on PATH (hint: run on a Slurm login node, or load the Slurm module; `--executor slurm` needs sbatch, squeue and scancel)")]
    NotFound {
        /// `sbatch`, `squeue` or `scancel`.
        tool: String,
    },
    /// The command was found but could not be started or waited for.
    #[error("cannot start `{tool}`: {message}")]
    Spawn {
        /// `sbatch`, `squeue` or `scancel`.
        tool: String,
        /// The operating system's error.
        message: String,
    },
    /// The command ran and exited unsuccessfully; `stderr` says why.
    #[error("`{command}` failed ({status}): {stderr} (hint: check the plan's executor: settings — partition, account, time_limit, sbatch_args — and `sinfo`)")]
    Failed {
        /// The command line as run, shell-quoted (its environment left out).
        command: String,
        /// How it exited, as the OS words it (e.g. `exit status: 1`).
        status: String,
        /// Slurm's own message, trimmed.
        stderr: String,
    },
    /// The command did not exit within [`COMMAND_TIME`]; it was killed.
    #[error("`{tool}` did not answer within {} s (hint: is slurmctld up? `scontrol ping`)", limit.as_secs())]
    TimedOut {
        /// `sbatch`, `squeue` or `scancel`.
        tool: String,
        /// The limit it exceeded.
        limit: Duration,
    },
    /// `sbatch` succeeded but its first line does not start with a numeric job id.
    #[error("`sbatch --parsable` printed {output:?}, not a job id")]
    BadJobId {
        /// What `sbatch` printed, trimmed.
        output: String,
    },
}

/// The three client commands, found on a PATH.
#[derive(Debug, Clone)]
pub struct SlurmTools {
    /// Where `sbatch` is; it runs with exactly the environment given to
    /// [`SlurmTools::submit`].
    pub sbatch: PathBuf,
    /// Where `squeue` is, which lists this user's queued and running tasks.
    pub squeue: PathBuf,
    /// Where `scancel` is, which cancels jobs and array tasks.
    pub scancel: PathBuf,
}

impl SlurmTools {
    /// Finds `sbatch`, `squeue` and `scancel` on `path` (a PATH value).
    pub fn find(path: Option<&OsStr>) -> Result<SlurmTools, SlurmCommandError> {
        let find = |tool: &str| {
            path.into_iter()
                .flat_map(std::env::split_paths)
                .map(|dir| dir.join(tool))
                .find(|candidate| is_executable(candidate))
                .ok_or_else(|| SlurmCommandError::NotFound {
                    tool: tool.to_owned(),
                })
        };
        Ok(SlurmTools {
            sbatch: find("sbatch")?,
            squeue: find("squeue")?,
            scancel: find("scancel")?,
        })
    }

    /// Submits one job or array; returns the job id `sbatch --parsable` printed.
    pub async fn submit(
        &self,
        submission: &Submission,
        env: &[(String, String)],
    ) -> Result<String, SlurmCommandError> {
        let mut command = Command::new(&self.sbatch);
        command
            .args(&submission.args)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped());
        let script = submission.script.clone();
        let output = run(command, "sbatch", Some(script)).await?;
        let first = output.lines().next().unwrap_or("").trim();
        let id = first.split(';').next().unwrap_or("").trim();
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
            return Err(SlurmCommandError::BadJobId {
                output: output.trim().to_owned(),
            });
        }
        Ok(id.to_owned())
    }

    /// This user's queued and running tasks (array tasks one per line).
    pub async fn queue(&self) -> Result<Vec<QueuedTask>, SlurmCommandError> {
        let mut command = Command::new(&self.squeue);
        command.args(["--me", "-h", "-r", "-o", SQUEUE_FORMAT]);
        Ok(parse_queue(&run(command, "squeue", None).await?))
    }

    /// Cancels jobs or array tasks (`<job>` or `<job>_<task>`). Ids already gone are not an
    /// error.
    pub async fn cancel(&self, job_ids: &[String]) -> Result<(), SlurmCommandError> {
        for batch in job_ids.chunks(CANCEL_BATCH) {
            let mut command = Command::new(&self.scancel);
            command.args(batch);
            match run(command, "scancel", None).await {
                Ok(_) => {}
                // "Invalid job id specified": it ended meanwhile.
                Err(SlurmCommandError::Failed { stderr, .. })
                    if stderr.contains("Invalid job id")
                        || stderr.contains("already completing") => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Runs `command` (stdin = `input` when given), bounded by [`COMMAND_TIME`]; stdout when it
/// exits 0.
async fn run(
    mut command: Command,
    tool: &str,
    input: Option<String>,
) -> Result<String, SlurmCommandError> {
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if input.is_none() {
        command.stdin(Stdio::null());
    }
    let described = describe(&command);
    let mut child = command.spawn().map_err(|e| SlurmCommandError::Spawn {
        tool: tool.to_owned(),
        message: e.to_string(),
    })?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        // A job script is a few hundred bytes: the pipe takes it at once.
        let _ = stdin.write_all(text.as_bytes()).await;
    }
    let output = tokio::time::timeout(COMMAND_TIME, child.wait_with_output())
        .await
        .map_err(|_| SlurmCommandError::TimedOut {
            tool: tool.to_owned(),
            limit: COMMAND_TIME,
        })?
        .map_err(|e| SlurmCommandError::Spawn {
            tool: tool.to_owned(),
            message: e.to_string(),
        })?;
    if !output.status.success() {
        return Err(SlurmCommandError::Failed {
            command: described,
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The command as a user would type it, for error messages (no environment in it).
fn describe(command: &Command) -> String {
    let std = command.as_std();
    let mut words = vec![std.get_program().to_string_lossy().into_owned()];
    words.extend(std.get_args().map(|a| a.to_string_lossy().into_owned()));
    shell_words::join(words)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn missing_tools_are_named() {
        let empty = tempfile::tempdir().unwrap();
        let error = SlurmTools::find(Some(empty.path().as_os_str())).unwrap_err();
        assert_eq!(
            error,
            SlurmCommandError::NotFound {
                tool: "sbatch".into()
            }
        );
        assert!(error.to_string().contains("sbatch, squeue and scancel"));
    }

    #[tokio::test]
    async fn a_failing_command_reports_its_words_and_stderr() {
        let dir = tempfile::tempdir().unwrap();
        for tool in ["sbatch", "squeue", "scancel"] {
            let path = dir.path().join(tool);
            std::fs::write(
                &path,
                "#!/bin/sh\ncat >/dev/null\necho 'sbatch: error: invalid partition' >&2\nexit 1\n",
            )
            .unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let tools = SlurmTools::find(Some(dir.path().as_os_str())).unwrap();
        let submission = Submission {
            stage: "s".into(),
            shape: super::super::SubmissionShape::Single { index: 0 },
            args: vec!["--parsable".into(), "--partition=nope".into()],
            script: "#!/bin/sh\n".into(),
        };
        let error = tools.submit(&submission, &[]).await.unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("--partition=nope") && text.contains("invalid partition"),
            "{text}"
        );
    }
}
