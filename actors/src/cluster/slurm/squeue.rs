//! cluster::slurm::squeue — the queue as `squeue -h -r -o '<format>'` prints it, one task per
//! line (`-r` lists each array task on its own line, pending ones included), parsed back to
//! the delta items it runs.
//!
//! Must not: run `squeue` (`commands` does).

use super::sbatch::{parse_job_comment, ItemBase, JobComment};

/// The `-o` format [`parse_queue`] reads: job id (`<job>_<task>` for array tasks), array
/// job id, array task id (`N/A` for a plain job), name, comment, state.
pub const SQUEUE_FORMAT: &str = "%i|%F|%K|%j|%k|%T";

/// Where a queued task stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskState {
    /// `PENDING`: waiting for resources, priority or its array's throttle.
    Pending,
    /// `RUNNING`: on a node.
    Running,
    /// COMPLETING, CONFIGURING, SUSPENDED, ...: still in the queue.
    Other(String),
}

/// One line of the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedTask {
    /// What `scancel` takes: `<job>_<task>` or `<job>`.
    pub job_id: String,
    /// The array task id; `None` for a plain job.
    pub array_task: Option<usize>,
    /// The job name (for delta's jobs `<orchestration>-<stage>` for an array,
    /// `<orchestration>-<stage>-<index>` for a plain job).
    pub name: String,
    /// Parsed when the job is delta's.
    pub comment: Option<JobComment>,
    /// Pending, running, or another state that keeps it in the queue.
    pub state: TaskState,
}

impl QueuedTask {
    /// The (stage, item) this task runs when it belongs to `orchestration_id`.
    pub fn item_of(&self, orchestration_id: &str) -> Option<(&str, usize)> {
        let comment = self.comment.as_ref()?;
        if comment.orchestration_id != orchestration_id {
            return None;
        }
        let index = match (comment.base, self.array_task) {
            (ItemBase::Index(index), _) => index,
            (ItemBase::Offset(offset), Some(task)) => offset.checked_add(task)?,
            (ItemBase::Offset(_), None) => return None,
        };
        Some((comment.stage.as_str(), index))
    }
}

/// Parses `squeue -h -r -o SQUEUE_FORMAT` output; lines that do not parse are skipped.
pub fn parse_queue(text: &str) -> Vec<QueuedTask> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<QueuedTask> {
    let mut fields = line.trim().splitn(5, '|');
    let job_id = fields.next()?.trim().to_owned();
    let _array_job = fields.next()?;
    let array_task = fields.next()?.trim().parse().ok();
    let name = fields.next()?.trim().to_owned();
    // The comment is free text from any user: the state is the last field.
    let (comment, state) = fields.next()?.rsplit_once('|')?;
    if job_id.is_empty() {
        return None;
    }
    let state = match state.trim() {
        "PENDING" => TaskState::Pending,
        "RUNNING" => TaskState::Running,
        other => TaskState::Other(other.to_owned()),
    };
    Some(QueuedTask {
        job_id,
        array_task,
        name,
        comment: parse_job_comment(comment.trim()),
        state,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn array_tasks_and_plain_jobs_map_to_items() {
        let text = "\
2_0|2|0|o1-map|delta orchestration=o1 stage=map offset=0|RUNNING
2_7|2|7|o1-map|delta orchestration=o1 stage=map offset=1000|PENDING
9|9|N/A|o1-reduce-0|delta orchestration=o1 stage=reduce index=0|COMPLETING
10|10|N/A|other|my | piped | comment|RUNNING
11|11|N/A|o2-x-0|delta orchestration=o2 stage=x index=0|RUNNING
garbage
";
        let queue = parse_queue(text);
        assert_eq!(queue.len(), 5);
        assert_eq!(queue[0].item_of("o1"), Some(("map", 0)));
        assert_eq!(queue[0].state, TaskState::Running);
        assert_eq!(queue[1].item_of("o1"), Some(("map", 1007)));
        assert_eq!(queue[1].state, TaskState::Pending);
        assert_eq!(queue[2].item_of("o1"), Some(("reduce", 0)));
        assert_eq!(queue[2].state, TaskState::Other("COMPLETING".into()));
        assert_eq!(queue[2].job_id, "9");
        assert_eq!(queue[3].comment, None);
        assert_eq!(queue[3].state, TaskState::Running);
        assert_eq!(queue[4].item_of("o1"), None);
    }
}
