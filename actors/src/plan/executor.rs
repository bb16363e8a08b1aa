//! plan::executor — the plan's `executor:` key (its model is in `model.rs`) resolved into an
//! [`ExecutorChoice`]: the runs execute in this process (`type: local`, the default) or as
//! Slurm jobs (`type: slurm`, with the partition, account, time limit, extra sbatch
//! arguments, the largest array and the `delta` binary on the nodes).
//!
//! Owns: the spellings and the checks of every `executor.*` key, worded with the key.
//! Must not: run any Slurm command (that is `cluster::slurm`).

use std::path::Path;

use super::model::DurationValue;
pub use super::model::{ExecutorKind, ExecutorSpec};
use super::PlanError;
use crate::cluster::slurm::{SettingsError, SlurmSettings};
use crate::duration::{parse_duration, DURATION_HINT};

/// Where a plan's runs execute, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ExecutorChoice {
    /// In this process, through the run supervisor.
    #[default]
    Local,
    /// As Slurm jobs (job arrays per stage).
    Slurm(SlurmSettings),
}

/// Resolves `spec` (absent = local); `kind` (from `--executor`) wins over `executor.type`.
/// Errors name the plan file and the `executor.*` key.
pub fn resolve_executor(
    file: &Path,
    spec: Option<&ExecutorSpec>,
    kind: Option<ExecutorKind>,
) -> Result<ExecutorChoice, PlanError> {
    let default = ExecutorSpec::default();
    let spec = spec.unwrap_or(&default);
    match kind.unwrap_or(spec.kind) {
        ExecutorKind::Local => Ok(ExecutorChoice::Local),
        ExecutorKind::Slurm => {
            let poll_interval = spec
                .poll_interval
                .as_ref()
                .map(|value| {
                    let parsed = match value {
                        DurationValue::Millis(ms) => Ok(std::time::Duration::from_millis(*ms)),
                        DurationValue::Text(text) => parse_duration(text),
                    };
                    parsed.map_err(|e| {
                        PlanError::invalid(
                            file,
                            "executor.poll_interval",
                            e.to_string(),
                            DURATION_HINT,
                        )
                    })
                })
                .transpose()?;
            SlurmSettings::new(
                spec.partition.clone(),
                spec.account.clone(),
                spec.time_limit.clone(),
                spec.sbatch_args.clone(),
                spec.max_array,
                spec.delta_path.clone(),
                poll_interval,
            )
            .map(ExecutorChoice::Slurm)
            .map_err(|e: SettingsError| {
                PlanError::invalid(file, format!("executor.{}", e.key), e.message, e.hint)
            })
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> ExecutorSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn absent_is_local_and_the_flag_wins() {
        let file = Path::new("plan.yaml");
        assert_eq!(
            resolve_executor(file, None, None).unwrap(),
            ExecutorChoice::Local
        );
        let slurm = spec("type: slurm\npartition: short\nmax_array: 500\n");
        let ExecutorChoice::Slurm(settings) = resolve_executor(file, Some(&slurm), None).unwrap()
        else {
            panic!("expected slurm");
        };
        assert_eq!(settings.partition.as_deref(), Some("short"));
        assert_eq!(settings.max_array, 500);
        assert_eq!(
            resolve_executor(file, Some(&slurm), Some(ExecutorKind::Local)).unwrap(),
            ExecutorChoice::Local
        );
        assert!(matches!(
            resolve_executor(file, None, Some(ExecutorKind::Slurm)).unwrap(),
            ExecutorChoice::Slurm(_)
        ));
    }

    #[test]
    fn bad_values_name_the_key() {
        let file = Path::new("plan.yaml");
        for (yaml, key) in [
            ("type: slurm\nmax_array: 0\n", "executor.max_array"),
            (
                "type: slurm\ntime_limit: 'soon; rm -rf /'\n",
                "executor.time_limit",
            ),
            (
                "type: slurm\nsbatch_args: ['--array=1-9']\n",
                "executor.sbatch_args[0]",
            ),
            ("type: slurm\npartition: 'a b'\n", "executor.partition"),
            (
                "type: slurm\npoll_interval: fast\n",
                "executor.poll_interval",
            ),
            (
                "type: slurm\ndelta_path: bin/delta\n",
                "executor.delta_path",
            ),
        ] {
            let error = resolve_executor(file, Some(&spec(yaml)), None).unwrap_err();
            assert_eq!(error.key(), key, "{yaml}: {error}");
            assert!(error.to_string().contains("plan.yaml"), "{error}");
        }
    }
}
