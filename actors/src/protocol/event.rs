//! Progress the engine streams to its subscribers: [`RunEvent`] per run,
//! [`OrchestrationEvent`] per plan. Lossy for slow subscribers; results never are.

use serde::{Deserialize, Serialize};

use super::status::RunStatus;

/// Progress, streamed to every subscriber. Lossy for slow subscribers; results never are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RunEvent {
    RunStarted {
        run_id: String,
        agent_name: String,
        work_dir: String,
        resumed: bool,
    },
    IterationStarted {
        run_id: String,
        iteration: u32,
        max_iterations: u32,
    },
    Thought {
        run_id: String,
        iteration: u32,
        text: String,
    },
    ToolStarted {
        run_id: String,
        iteration: u32,
        action_id: String,
        tool_name: String,
        summary: String,
    },
    ToolFinished {
        run_id: String,
        iteration: u32,
        action_id: String,
        tool_name: String,
        success: bool,
        exit_code: Option<i32>,
        duration_ms: u64,
        preview: String,
    },
    ModelRetry {
        run_id: String,
        attempt: u32,
        error: String,
        delay_ms: u64,
    },
    RunFinished {
        run_id: String,
        status: RunStatus,
        duration_ms: u64,
        error: Option<String>,
    },
}

impl RunEvent {
    pub fn run_id(&self) -> &str {
        match self {
            RunEvent::RunStarted { run_id, .. }
            | RunEvent::IterationStarted { run_id, .. }
            | RunEvent::Thought { run_id, .. }
            | RunEvent::ToolStarted { run_id, .. }
            | RunEvent::ToolFinished { run_id, .. }
            | RunEvent::ModelRetry { run_id, .. }
            | RunEvent::RunFinished { run_id, .. } => run_id,
        }
    }
}

/// Progress of an orchestration. Lossy for slow subscribers; the summary never is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum OrchestrationEvent {
    /// A stage expanded into `runs` runs, of which `already_done` finished before this
    /// invocation (a resume) and are not started again.
    StageStarted {
        stage: String,
        runs: usize,
        #[serde(default)]
        already_done: crate::plan::state::RunCounts,
    },
    RunStarted {
        stage: String,
        index: usize,
        run_id: String,
        attempt: u32,
    },
    RunFinished {
        stage: String,
        index: usize,
        run_id: String,
        status: RunStatus,
        duration_ms: u64,
        error: Option<String>,
    },
    StageFinished {
        stage: String,
        status: crate::plan::state::StageStatus,
        counts: crate::plan::state::RunCounts,
    },
    Progress {
        /// Runs known so far (stages not yet expanded are not counted).
        total: usize,
        done: usize,
        running: usize,
        failed: usize,
    },
    Finished {
        status: crate::plan::state::OrchestrationStatus,
    },
}
