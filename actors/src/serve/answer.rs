//! Answering a run that waits for input from the page (`POST /api/runs/{run}/answer`): what
//! a request may carry, whether the run waits, when the `delta continue` that carries the
//! answer has taken the run, and what its early exit means. The decisions only: the process
//! is started and watched by `runtime::serve::manager::answer`.
//!
//! Must not: start processes, read files or know HTTP (each error has a [`code`] and an
//! [`ErrorClass`] the web layer maps).
//!
//! [`code`]: AnswerError::code

use std::path::PathBuf;

use super::error::ErrorClass;
use crate::metadata::MetadataError;
use crate::protocol::RunStatus;
use crate::workspace::validate_run_id;

/// Longest answer accepted.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// How much of the end of `delta continue`'s stderr a failure report quotes.
pub const STDERR_TAIL_BYTES: usize = 4096;

/// Why an answer was refused or not delivered.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    /// The run id cannot name a run folder.
    #[error("invalid run id `{0}`")]
    InvalidRunId(String),
    /// The answer is longer than [`MAX_ANSWER_BYTES`].
    #[error("answer is {size} bytes, more than the limit of {limit}")]
    TooLarge {
        /// Its size, in bytes.
        size: usize,
        /// The limit, in bytes.
        limit: usize,
    },
    /// The run's record cannot be read (no such run, or not a record delta reads).
    #[error("{0}")]
    RunNotFound(String),
    /// The run does not wait for an answer.
    #[error("run {run_id} is {status:?}, not WAITING_FOR_INPUT")]
    NotWaiting {
        /// The run.
        run_id: String,
        /// Its status.
        status: RunStatus,
    },
    /// `delta continue` could not be started.
    #[error("cannot run {}: {reason}", .exe.display())]
    SpawnFailed {
        /// The `delta` executable.
        exe: PathBuf,
        /// The system's error.
        reason: String,
    },
    /// `delta continue` exited and the run still waits.
    #[error(
        "the answer was not delivered: delta continue {how} and run {run_id} still waits for \
         input: {said}"
    )]
    NotDelivered {
        /// The run.
        run_id: String,
        /// `exited with code N` or `was killed`.
        how: String,
        /// The end of what it printed on stderr.
        said: String,
    },
    /// `delta continue` has not taken the run in time (it goes on trying).
    #[error(
        "delta continue has not taken run {run_id} within {seconds}s; it is still trying \
         (watch the run's status)"
    )]
    Slow {
        /// The run.
        run_id: String,
        /// How long the request waited.
        seconds: u64,
    },
    /// The server failed to look (a task that could not run).
    #[error("{0}")]
    Io(String),
}

impl AnswerError {
    /// How the web layer reports it.
    pub fn class(&self) -> ErrorClass {
        match self {
            AnswerError::InvalidRunId(_) => ErrorClass::BadRequest,
            AnswerError::TooLarge { .. } => ErrorClass::TooLarge,
            AnswerError::RunNotFound(_) => ErrorClass::NotFound,
            AnswerError::NotWaiting { .. } => ErrorClass::Conflict,
            AnswerError::SpawnFailed { .. }
            | AnswerError::NotDelivered { .. }
            | AnswerError::Io(_) => ErrorClass::Internal,
            AnswerError::Slow { .. } => ErrorClass::Timeout,
        }
    }

    /// Stable machine-readable code of the error.
    pub fn code(&self) -> &'static str {
        match self {
            AnswerError::InvalidRunId(_) => "invalid_id",
            AnswerError::TooLarge { .. } => "too_large",
            AnswerError::RunNotFound(_) => "run_not_found",
            AnswerError::NotWaiting { .. } => "not_waiting",
            AnswerError::SpawnFailed { .. } => "spawn_failed",
            AnswerError::NotDelivered { .. } => "continue_failed",
            AnswerError::Slow { .. } => "continue_slow",
            AnswerError::Io(_) => "io",
        }
    }
}

/// The answer arrived: the continuation took the run, or already ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answered {
    /// `delta continue` took the run (its status left WAITING_FOR_INPUT) and drives it.
    Taken {
        /// The run's status now.
        status: RunStatus,
    },
    /// `delta continue` ended before the run was seen taken, the way a run ends.
    Finished {
        /// The run's status, when it could be read.
        status: Option<RunStatus>,
        /// Its exit code (`None`: killed by a signal, or not known).
        exit_code: Option<i32>,
    },
}

/// Refuses a request that cannot be an answer, before anything is read: an id that names no
/// run folder, an answer over [`MAX_ANSWER_BYTES`].
pub fn check_request(run_id: &str, message: &str) -> Result<(), AnswerError> {
    if validate_run_id(run_id).is_err() {
        return Err(AnswerError::InvalidRunId(run_id.chars().take(80).collect()));
    }
    if message.len() > MAX_ANSWER_BYTES {
        return Err(AnswerError::TooLarge {
            size: message.len(),
            limit: MAX_ANSWER_BYTES,
        });
    }
    Ok(())
}

/// Only a run that waits for input is answered.
pub fn check_waiting(
    run_id: &str,
    status: Result<RunStatus, MetadataError>,
) -> Result<(), AnswerError> {
    match status {
        Ok(RunStatus::WaitingForInput) => Ok(()),
        Ok(status) => Err(AnswerError::NotWaiting {
            run_id: run_id.to_string(),
            status,
        }),
        Err(e) => Err(AnswerError::RunNotFound(e.to_string())),
    }
}

/// While `delta continue` runs: the run is taken once its status (when it can be read) is
/// no longer WAITING_FOR_INPUT.
pub fn taken(status: Option<RunStatus>) -> Option<Answered> {
    match status {
        Some(RunStatus::WaitingForInput) | None => None,
        Some(status) => Some(Answered::Taken { status }),
    }
}

/// `delta continue` exited before the run was seen taken: the answer arrived if it ended
/// the way a run does (0: completed, 101: waiting for the next answer) or the run left
/// WAITING_FOR_INPUT; otherwise it failed, and says why in the end of its stderr (`said`).
pub fn after_exit(
    run_id: &str,
    exit_code: Option<i32>,
    status: Option<RunStatus>,
    said: &str,
) -> Result<Answered, AnswerError> {
    let delivered = matches!(exit_code, Some(0 | 101))
        || status.is_some_and(|status| status != RunStatus::WaitingForInput);
    if delivered {
        return Ok(Answered::Finished { status, exit_code });
    }
    Err(AnswerError::NotDelivered {
        run_id: run_id.to_string(),
        how: match exit_code {
            Some(code) => format!("exited with code {code}"),
            None => "was killed".to_string(),
        },
        said: if said.trim().is_empty() {
            "(it printed nothing)".to_string()
        } else {
            said.trim().to_string()
        },
    })
}

/// The last [`STDERR_TAIL_BYTES`] of a stream, kept as it is read.
#[derive(Debug, Default)]
pub struct StderrTail {
    kept: Vec<u8>,
}

impl StderrTail {
    /// Adds what was read, dropping what falls out of the tail.
    pub fn keep(&mut self, chunk: &[u8]) {
        self.kept.extend_from_slice(chunk);
        let excess = self.kept.len().saturating_sub(STDERR_TAIL_BYTES);
        self.kept.drain(..excess);
    }

    /// The tail as text.
    pub fn said(&self) -> String {
        String::from_utf8_lossy(&self.kept).trim().to_string()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_request_needs_a_valid_run_id_and_an_answer_within_the_limit() {
        assert!(check_request("r1", "yes").is_ok());
        let error = check_request("../r1", "yes").unwrap_err();
        assert_eq!(
            (error.code(), error.class()),
            ("invalid_id", ErrorClass::BadRequest)
        );
        assert_eq!(error.to_string(), "invalid run id `../r1`");
        let long = "x".repeat(MAX_ANSWER_BYTES + 1);
        let error = check_request("r1", &long).unwrap_err();
        assert_eq!(
            (error.code(), error.class()),
            ("too_large", ErrorClass::TooLarge)
        );
        assert!(check_request("r1", &long[1..]).is_ok());
    }

    #[test]
    fn only_a_waiting_run_is_answered() {
        assert!(check_waiting("r1", Ok(RunStatus::WaitingForInput)).is_ok());
        let error = check_waiting("r1", Ok(RunStatus::Completed)).unwrap_err();
        assert_eq!(
            (error.code(), error.to_string().as_str()),
            ("not_waiting", "run r1 is Completed, not WAITING_FOR_INPUT")
        );
        let missing = MetadataError::NotFound {
            path: PathBuf::from("/w/.delta/r1/metadata.json"),
        };
        let error = check_waiting("r1", Err(missing)).unwrap_err();
        assert_eq!(
            (error.code(), error.class()),
            ("run_not_found", ErrorClass::NotFound)
        );
    }

    #[test]
    fn the_run_is_taken_once_its_status_leaves_waiting_for_input() {
        assert_eq!(taken(None), None, "a record mid-exchange says nothing");
        assert_eq!(taken(Some(RunStatus::WaitingForInput)), None);
        assert_eq!(
            taken(Some(RunStatus::Running)),
            Some(Answered::Taken {
                status: RunStatus::Running
            })
        );
    }

    #[test]
    fn an_early_exit_delivered_the_answer_only_if_it_ended_as_a_run_does() {
        for (code, status) in [
            (Some(0), Some(RunStatus::Completed)),
            (Some(101), Some(RunStatus::WaitingForInput)),
            (Some(1), Some(RunStatus::Failed)),
        ] {
            assert_eq!(
                after_exit("r1", code, status, "").unwrap(),
                Answered::Finished {
                    status,
                    exit_code: code
                }
            );
        }
        let error = after_exit(
            "r1",
            Some(2),
            Some(RunStatus::WaitingForInput),
            "  no model\n",
        )
        .unwrap_err();
        assert_eq!(error.code(), "continue_failed");
        assert_eq!(
            error.to_string(),
            "the answer was not delivered: delta continue exited with code 2 and run r1 still \
             waits for input: no model"
        );
        let killed = after_exit("r1", None, None, "").unwrap_err().to_string();
        assert!(killed.contains("was killed") && killed.ends_with("(it printed nothing)"));
    }

    #[test]
    fn the_stderr_tail_keeps_the_last_bytes() {
        let mut tail = StderrTail::default();
        tail.keep(&vec![b'a'; STDERR_TAIL_BYTES]);
        tail.keep(b"the end\n");
        let said = tail.said();
        assert_eq!(said.len(), STDERR_TAIL_BYTES - 1, "trimmed newline");
        assert!(said.ends_with("the end"));
    }
}
