//! plan::executor — the plan's `executor:` key as written, and its resolution into an
//! [`ExecutorChoice`]: the runs execute in this process (`type: local`, the default) or as
//! Slurm jobs (`type: slurm`, with the partition, account, time limit, extra sbatch
//! arguments, the largest array and the `delta` binary on the nodes).
//!
//! Owns: the spellings and the checks of every `executor.*` key, worded with the key.
//! Must not: run any Slurm command (that is `cluster::slurm`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::duration::{parse_duration, DURATION_HINT};
use super::model::DurationValue;
use super::PlanError;
use crate::cluster::slurm::{SettingsError, SlurmSettings};

/// `executor:` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutorSpec {
    /// `local` (default) or `slurm`.
    #[serde(rename = "type", default)]
    pub kind: ExecutorKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// Slurm's `--time` (`30`, `1:00:00`, `1-12:00:00`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<String>,
    /// Added to every `sbatch` command line, e.g. `["--mem=2G", "--qos=batch"]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sbatch_args: Vec<String>,
    /// Largest array one `sbatch` submits (the cluster's `MaxArraySize` - 1 at most).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_array: Option<usize>,
    /// The `delta` binary as the compute nodes see it (default: this one's path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_path: Option<PathBuf>,
    /// How often the queue and the runs' files are looked at (default 1s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval: Option<DurationValue>,
}

/// `executor.type`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecutorKind {
    #[default]
    Local,
    Slurm,
}

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
