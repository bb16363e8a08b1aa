//! cluster::slurm::sbatch — a stage's runs to submit, as `sbatch` command lines.
//!
//! Shapes: one run is a plain job; several are job arrays whose task ids are the items'
//! indices less the array's offset (so `squeue` shows `<job>_<task>`), chunked so that no
//! task id reaches `max_array` (items from `k * max_array` on go into an array with offset
//! `k * max_array`), each throttled with `%P` (`P` = the plan's `max_parallel`).
//!
//! Identity: the job name is `<orchestration>-<stage>` for an array and
//! `<orchestration>-<stage>-<index>` for a plain job (unpadded: a run id pads the index, so
//! names are for reading, not matching); the comment
//! `delta orchestration=<id> stage=<stage> offset=<k>` (or `index=<i>`) lets a resumed
//! orchestration find its jobs still queued or running and adopt them.
//!
//! The job script is one `exec` line: `delta exec-planned <orchestration dir> <stage>
//! <item>`; the compute node reads the planned run from the orchestration's folder. No task
//! text, no secret, no long argv.
//!
//! Must not: run anything (`commands` does), or put anything but ids and paths in a job.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::settings::SlurmSettings;

/// Where the jobs' stdout/stderr go: `<orchestration dir>/slurm/logs`.
pub fn logs_dir(orchestration_dir: &Path) -> PathBuf {
    orchestration_dir.join("slurm").join("logs")
}

/// What every job of one orchestration shares.
#[derive(Debug, Clone, Copy)]
pub struct JobTemplate<'a> {
    /// Goes into every job's name and comment, so `squeue` shows whose a job is and a
    /// resumed orchestration finds its jobs.
    pub orchestration_id: &'a str,
    /// The orchestration's folder on the shared filesystem: the job script passes it to
    /// `delta exec-planned`, and the jobs' output goes to its `slurm/logs`.
    pub orchestration_dir: &'a Path,
    /// The jobs' working directory (the plan's shared workspace).
    pub workspace: &'a Path,
    /// The `delta` binary as the nodes see it.
    pub delta_path: &'a Path,
    /// The `%P` throttle of every array.
    pub max_parallel: usize,
}

/// One job or job array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmissionShape {
    /// A plain job for the item `index`.
    Single {
        /// The item's index in the stage.
        index: usize,
    },
    /// An array whose task `t` runs the item `offset + t`; `indices` are the items.
    Array {
        /// Subtracted from an item to give its task id: a multiple of `max_array`.
        offset: usize,
        /// The items' indices in the stage (not task ids), ascending.
        indices: Vec<usize>,
    },
}

/// One `sbatch` to run: its arguments (after the program name) and the job script it reads
/// on stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submission {
    /// The stage whose items it runs (`probe` for the `--check` job).
    pub stage: String,
    /// A plain job or an array, and which items it runs.
    pub shape: SubmissionShape,
    /// The `sbatch` arguments, `--parsable` first and the plan's `sbatch_args` last.
    pub args: Vec<String>,
    /// The job script, a `#!/bin/sh` text that `sbatch` reads on stdin.
    pub script: String,
}

impl Submission {
    /// The items this submission runs.
    pub fn indices(&self) -> Vec<usize> {
        match &self.shape {
            SubmissionShape::Single { index } => vec![*index],
            SubmissionShape::Array { indices, .. } => indices.clone(),
        }
    }

    /// The Slurm id of the task running `index`, given the id `sbatch --parsable` printed:
    /// `<job>_<task>` in an array, `<job>` for a plain job.
    pub fn task_job_id(&self, job_id: &str, index: usize) -> String {
        match &self.shape {
            SubmissionShape::Single { .. } => job_id.to_owned(),
            SubmissionShape::Array { offset, .. } => format!("{job_id}_{}", index - offset),
        }
    }

    /// The command as a shell snippet (`--dry-run`): `sbatch ... <<'DELTA_JOB'` + script.
    pub fn shell_text(&self) -> String {
        let mut words = vec!["sbatch".to_owned()];
        words.extend(self.args.iter().cloned());
        format!(
            "{} <<'DELTA_JOB'\n{}DELTA_JOB\n",
            shell_words::join(words),
            self.script
        )
    }
}

/// The job name of a stage's arrays.
pub fn array_job_name(orchestration_id: &str, stage: &str) -> String {
    format!("{orchestration_id}-{stage}")
}

/// Where a submission's items start: what its comment records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemBase {
    /// An array: item = offset + task id.
    Offset(usize),
    /// A plain job for this item.
    Index(usize),
}

/// A delta job's comment, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobComment {
    /// The orchestration that submitted the job.
    pub orchestration_id: String,
    /// The stage whose items the job runs.
    pub stage: String,
    /// How a task's item is found: the array offset plus its task id, or the item itself.
    pub base: ItemBase,
}

/// The prefix of every delta job comment.
const COMMENT_TAG: &str = "delta";

/// The `--comment` of a delta job: `delta orchestration=<id> stage=<stage> offset=<k>` (an
/// array) or `... index=<i>` (a plain job).
pub fn job_comment(orchestration_id: &str, stage: &str, base: ItemBase) -> String {
    let base = match base {
        ItemBase::Offset(offset) => format!("offset={offset}"),
        ItemBase::Index(index) => format!("index={index}"),
    };
    format!("{COMMENT_TAG} orchestration={orchestration_id} stage={stage} {base}")
}

/// Reads back [`job_comment`]; `None` for any other job's comment.
pub fn parse_job_comment(comment: &str) -> Option<JobComment> {
    let mut words = comment.split_whitespace();
    if words.next()? != COMMENT_TAG {
        return None;
    }
    let (mut orchestration_id, mut stage, mut base) = (None, None, None);
    for word in words {
        match word.split_once('=')? {
            ("orchestration", id) => orchestration_id = Some(id.to_owned()),
            ("stage", s) => stage = Some(s.to_owned()),
            ("offset", n) => base = Some(ItemBase::Offset(n.parse().ok()?)),
            ("index", n) => base = Some(ItemBase::Index(n.parse().ok()?)),
            _ => return None,
        }
    }
    Some(JobComment {
        orchestration_id: orchestration_id?,
        stage: stage?,
        base: base?,
    })
}

/// `[0, 1, 2, 5, 7, 8]` → `0-2,5,7-8` (sorted, deduplicated first).
pub fn array_spec(ids: &[usize]) -> String {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < ids.len() {
        let start = ids[i];
        let mut end = start;
        while i + 1 < ids.len() && ids[i + 1] == end + 1 {
            i += 1;
            end = ids[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            let _ = write!(out, "{start}");
        } else {
            let _ = write!(out, "{start}-{end}");
        }
        i += 1;
    }
    out
}

/// The `sbatch` commands that run `indices` of `stage`: one plain job for a single item,
/// else one array per `max_array`-wide block of item indices.
pub fn plan_submissions(
    settings: &SlurmSettings,
    template: &JobTemplate<'_>,
    stage: &str,
    indices: &[usize],
) -> Vec<Submission> {
    let mut indices = indices.to_vec();
    indices.sort_unstable();
    indices.dedup();
    if let [index] = indices[..] {
        let shape = SubmissionShape::Single { index };
        return vec![submission(settings, template, stage, shape)];
    }
    let width = settings.max_array.max(1);
    let mut out: Vec<Submission> = Vec::new();
    for chunk in indices.chunk_by(|a, b| a / width == b / width) {
        let offset = chunk[0] / width * width;
        let shape = SubmissionShape::Array {
            offset,
            indices: chunk.to_vec(),
        };
        out.push(submission(settings, template, stage, shape));
    }
    out
}

fn submission(
    settings: &SlurmSettings,
    template: &JobTemplate<'_>,
    stage: &str,
    shape: SubmissionShape,
) -> Submission {
    let logs = logs_dir(template.orchestration_dir);
    let mut args = vec!["--parsable".to_owned()];
    let (name, base, output, item) = match &shape {
        SubmissionShape::Single { index } => (
            format!("{}-{stage}-{index}", template.orchestration_id),
            ItemBase::Index(*index),
            logs.join(format!("{stage}-{index}-%j.out")),
            index.to_string(),
        ),
        SubmissionShape::Array { offset, indices } => {
            let ids: Vec<usize> = indices.iter().map(|i| i - offset).collect();
            args.push(format!(
                "--array={}%{}",
                array_spec(&ids),
                template.max_parallel.max(1)
            ));
            let item = if *offset == 0 {
                "\"$SLURM_ARRAY_TASK_ID\"".to_owned()
            } else {
                format!("\"$((SLURM_ARRAY_TASK_ID + {offset}))\"")
            };
            (
                array_job_name(template.orchestration_id, stage),
                ItemBase::Offset(*offset),
                logs.join(format!("{stage}-%A_%a.out")),
                item,
            )
        }
    };
    args.push(format!("--job-name={name}"));
    args.push(format!(
        "--comment={}",
        job_comment(template.orchestration_id, stage, base)
    ));
    args.push(format!("--output={}", output.display()));
    args.push(format!("--chdir={}", template.workspace.display()));
    // delta retries and resumes runs itself; a requeue behind its back would run one twice.
    args.push("--no-requeue".to_owned());
    // The environment is the one sbatch was started with, which delta has cleared of keys.
    args.push("--export=ALL".to_owned());
    if let Some(partition) = &settings.partition {
        args.push(format!("--partition={partition}"));
    }
    if let Some(account) = &settings.account {
        args.push(format!("--account={account}"));
    }
    if let Some(limit) = &settings.time_limit {
        args.push(format!("--time={limit}"));
    }
    args.extend(settings.sbatch_args.iter().cloned());
    let script = format!(
        "#!/bin/sh\n# delta orchestration {id}, stage {stage}: the planned run of one item (docs/scale-out.md)\nexec {delta} exec-planned {dir} {stage_word} {item}\n",
        id = template.orchestration_id,
        delta = shell_words::quote(&template.delta_path.to_string_lossy()),
        dir = shell_words::quote(&template.orchestration_dir.to_string_lossy()),
        stage_word = shell_words::quote(stage),
    );
    Submission {
        stage: stage.to_owned(),
        shape,
        args,
        script,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn template<'a>(dir: &'a Path, ws: &'a Path, delta: &'a Path) -> JobTemplate<'a> {
        JobTemplate {
            orchestration_id: "wc-20260101-000000-ab12",
            orchestration_dir: dir,
            workspace: ws,
            delta_path: delta,
            max_parallel: 8,
        }
    }

    #[test]
    fn array_spec_compresses_runs_of_ids() {
        assert_eq!(array_spec(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(array_spec(&[3]), "3");
        assert_eq!(array_spec(&[9, 8, 8, 1]), "1,8-9");
        assert_eq!(array_spec(&[]), "");
    }

    #[test]
    fn a_fan_out_is_one_throttled_array_named_after_the_stage() {
        let (dir, ws, delta) = (
            Path::new("/ws/.delta/orchestrations/o"),
            Path::new("/ws"),
            Path::new("/opt/delta"),
        );
        let subs = plan_submissions(
            &SlurmSettings::default(),
            &template(dir, ws, delta),
            "map",
            &(0..20).collect::<Vec<_>>(),
        );
        assert_eq!(subs.len(), 1);
        let args = &subs[0].args;
        assert!(args.contains(&"--array=0-19%8".to_owned()), "{args:?}");
        assert!(args.contains(&"--job-name=wc-20260101-000000-ab12-map".to_owned()));
        assert!(args.contains(
            &"--comment=delta orchestration=wc-20260101-000000-ab12 stage=map offset=0".to_owned()
        ));
        assert!(args.contains(&"--no-requeue".to_owned()));
        assert_eq!(
            subs[0].script,
            "#!/bin/sh\n# delta orchestration wc-20260101-000000-ab12, stage map: the planned run of one item (docs/scale-out.md)\nexec /opt/delta exec-planned /ws/.delta/orchestrations/o map \"$SLURM_ARRAY_TASK_ID\"\n"
        );
        assert_eq!(subs[0].task_job_id("41", 7), "41_7");
    }

    #[test]
    fn items_past_max_array_go_into_offset_arrays() {
        let settings = SlurmSettings {
            max_array: 1000,
            ..SlurmSettings::default()
        };
        let (dir, ws, delta) = (Path::new("/o"), Path::new("/ws"), Path::new("/d"));
        let indices: Vec<usize> = (0..2500).collect();
        let subs = plan_submissions(&settings, &template(dir, ws, delta), "work", &indices);
        let arrays: Vec<&str> = subs
            .iter()
            .map(|s| {
                s.args
                    .iter()
                    .find(|a| a.starts_with("--array="))
                    .unwrap()
                    .as_str()
            })
            .collect();
        assert_eq!(
            arrays,
            ["--array=0-999%8", "--array=0-999%8", "--array=0-499%8"]
        );
        assert!(subs[2]
            .script
            .contains("\"$((SLURM_ARRAY_TASK_ID + 2000))\""));
        assert_eq!(subs[2].task_job_id("9", 2001), "9_1");
        assert_eq!(subs.iter().map(|s| s.indices().len()).sum::<usize>(), 2500);
        assert!(subs[1].args.iter().any(|a| a.ends_with("offset=1000")));
    }

    #[test]
    fn a_single_run_is_a_plain_job_named_after_the_run() {
        let settings = SlurmSettings {
            partition: Some("short".into()),
            account: Some("lab".into()),
            time_limit: Some("30".into()),
            sbatch_args: vec!["--mem=1G".into()],
            ..SlurmSettings::default()
        };
        let (dir, ws, delta) = (Path::new("/o"), Path::new("/w s"), Path::new("/d"));
        let subs = plan_submissions(&settings, &template(dir, ws, delta), "reduce", &[0]);
        assert_eq!(subs.len(), 1);
        assert_eq!(subs[0].shape, SubmissionShape::Single { index: 0 });
        let args = &subs[0].args;
        assert!(!args.iter().any(|a| a.starts_with("--array")));
        for expected in [
            "--job-name=wc-20260101-000000-ab12-reduce-0",
            "--partition=short",
            "--account=lab",
            "--time=30",
            "--mem=1G",
            "--chdir=/w s",
        ] {
            assert!(
                args.contains(&expected.to_owned()),
                "{expected} in {args:?}"
            );
        }
        assert!(subs[0].script.ends_with(" reduce 0\n"));
        assert_eq!(subs[0].task_job_id("5", 0), "5");
        assert!(subs[0].shell_text().contains("'--chdir=/w s'"));
    }

    #[test]
    fn comments_read_back() {
        for base in [ItemBase::Offset(2000), ItemBase::Index(3)] {
            let text = job_comment("o-1", "map", base);
            assert_eq!(
                parse_job_comment(&text),
                Some(JobComment {
                    orchestration_id: "o-1".into(),
                    stage: "map".into(),
                    base
                })
            );
        }
        assert_eq!(parse_job_comment("(null)"), None);
        assert_eq!(parse_job_comment("delta orchestration=o stage=s"), None);
        assert_eq!(
            parse_job_comment("delta orchestration=o stage=s offset=x"),
            None
        );
    }
}
