//! cluster::slurm::settings — [`SlurmSettings`]: how this plan's jobs are submitted, checked
//! once when the plan loads. Every value that reaches an `sbatch` argument is bounded and
//! restricted to the characters Slurm itself accepts there, so a plan cannot smuggle an
//! option (or, in `--dry-run`'s printed commands, a shell word) into the command line;
//! `sbatch_args` items go through the allow-list of [`super::sbatch_options`].
//!
//! Must not: run anything.

use std::path::PathBuf;
use std::time::Duration;

/// The largest array one `sbatch` submits unless the plan says (Slurm's default
/// `MaxArraySize` is 1001: indices 0..=1000).
pub const DEFAULT_MAX_ARRAY: usize = 1000;
/// How often the queue and the runs' files are looked at unless the plan says.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// The range of `executor.max_array` (Slurm caps `MaxArraySize` at 4,000,001).
pub const MAX_ARRAY: std::ops::RangeInclusive<usize> = 1..=4_000_000;
/// The range of `executor.poll_interval`.
pub const POLL_INTERVAL: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(600);
/// At most this many `executor.sbatch_args`, each at most [`ARG_LEN`] bytes.
pub const SBATCH_ARGS: usize = 64;
/// The longest one of `executor.sbatch_args`, in bytes.
pub const ARG_LEN: usize = 1024;

/// How a plan's runs are submitted to Slurm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmSettings {
    /// `--partition`; `None` = the cluster's default partition.
    pub partition: Option<String>,
    /// `--account` to charge; `None` = the user's default account.
    pub account: Option<String>,
    /// `--time`, in Slurm's own format.
    pub time_limit: Option<String>,
    /// Added to every `sbatch` after delta's own options.
    pub sbatch_args: Vec<String>,
    /// The largest array index + 1 per `sbatch` (items beyond go into further arrays).
    pub max_array: usize,
    /// The `delta` binary on the nodes; `None` = this process's own executable.
    pub delta_path: Option<PathBuf>,
    /// How often the queue and the runs' result files are read (100 ms to 10 min; default
    /// [`DEFAULT_POLL_INTERVAL`]).
    pub poll_interval: Duration,
}

impl Default for SlurmSettings {
    fn default() -> Self {
        SlurmSettings {
            partition: None,
            account: None,
            time_limit: None,
            sbatch_args: Vec::new(),
            max_array: DEFAULT_MAX_ARRAY,
            delta_path: None,
            poll_interval: DEFAULT_POLL_INTERVAL,
        }
    }
}

/// A value that cannot be used: the `executor.*` key it came from, why, and a hint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("executor.{key}: {message} (hint: {hint})")]
pub struct SettingsError {
    /// The key below `executor.`, e.g. `max_array` or `sbatch_args[2]`.
    pub key: String,
    /// What is wrong with the value.
    pub message: String,
    /// How to write it instead.
    pub hint: String,
}

fn error(key: impl Into<String>, message: impl Into<String>, hint: &str) -> SettingsError {
    SettingsError {
        key: key.into(),
        message: message.into(),
        hint: hint.to_owned(),
    }
}

impl SlurmSettings {
    /// Checks every value; `None`s take the defaults.
    pub fn new(
        partition: Option<String>,
        account: Option<String>,
        time_limit: Option<String>,
        sbatch_args: Vec<String>,
        max_array: Option<usize>,
        delta_path: Option<PathBuf>,
        poll_interval: Option<Duration>,
    ) -> Result<SlurmSettings, SettingsError> {
        for (key, value) in [("partition", &partition), ("account", &account)] {
            if let Some(value) = value {
                check_name(key, value)?;
            }
        }
        if let Some(limit) = &time_limit {
            check_time_limit(limit)?;
        }
        if sbatch_args.len() > SBATCH_ARGS {
            return Err(error(
                "sbatch_args",
                format!("{} arguments (at most {SBATCH_ARGS})", sbatch_args.len()),
                "pass fewer sbatch options",
            ));
        }
        for (i, arg) in sbatch_args.iter().enumerate() {
            check_sbatch_arg(i, arg)?;
        }
        let max_array = max_array.unwrap_or(DEFAULT_MAX_ARRAY);
        if !MAX_ARRAY.contains(&max_array) {
            return Err(error(
                "max_array",
                format!("{max_array} is out of range (allowed 1..=4000000)"),
                "use the cluster's MaxArraySize minus 1 (`scontrol show config | grep MaxArraySize`)",
            ));
        }
        if let Some(path) = &delta_path {
            if !path.is_absolute() {
                return Err(error(
                    "delta_path",
                    format!("{} is not an absolute path", path.display()),
                    "give the path of the delta binary as the compute nodes see it, e.g. /shared/bin/delta",
                ));
            }
        }
        let poll_interval = poll_interval.unwrap_or(DEFAULT_POLL_INTERVAL);
        if !POLL_INTERVAL.contains(&poll_interval) {
            return Err(error(
                "poll_interval",
                format!("{} ms is out of range", poll_interval.as_millis()),
                "use 100ms to 10m",
            ));
        }
        Ok(SlurmSettings {
            partition,
            account,
            time_limit,
            sbatch_args,
            max_array,
            delta_path,
            poll_interval,
        })
    }
}

/// Partition and account names: what Slurm accepts, nothing a shell or an option parser
/// would read differently.
fn check_name(key: &str, value: &str) -> Result<(), SettingsError> {
    let valid = !value.is_empty()
        && value.len() <= 128
        && !value.starts_with('-')
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ','));
    if valid {
        Ok(())
    } else {
        Err(error(
            key,
            format!("{value:?} is not a Slurm {key} name"),
            "use letters, digits, '_', '-', '.' (and ',' between several), up to 128 characters",
        ))
    }
}

/// Slurm's `--time` forms: minutes, `MM:SS`, `HH:MM:SS`, `D-HH[:MM[:SS]]`, or `UNLIMITED`.
fn check_time_limit(value: &str) -> Result<(), SettingsError> {
    let valid = value.eq_ignore_ascii_case("unlimited")
        || value.eq_ignore_ascii_case("infinite")
        || (!value.is_empty()
            && value.len() <= 16
            && value.starts_with(|c: char| c.is_ascii_digit())
            && value
                .chars()
                .all(|c| c.is_ascii_digit() || matches!(c, ':' | '-'))
            && value.matches('-').count() <= 1
            && value.matches(':').count() <= 2);
    if valid {
        Ok(())
    } else {
        Err(error(
            "time_limit",
            format!("{value:?} is not a Slurm time limit"),
            "write minutes (30), HH:MM:SS (1:30:00) or D-HH:MM:SS (1-12:00:00)",
        ))
    }
}

fn check_sbatch_arg(index: usize, arg: &str) -> Result<(), SettingsError> {
    let key = format!("sbatch_args[{index}]");
    if arg.is_empty() || arg.len() > ARG_LEN || arg.chars().any(char::is_control) {
        return Err(error(
            key,
            format!("{arg:?} is empty, longer than {ARG_LEN} bytes, or has control characters"),
            "write each option as one list item, e.g. \"--mem=2G\"",
        ));
    }
    super::sbatch_options::check_sbatch_arg(arg).map_err(|problem| SettingsError {
        hint: problem.hint(),
        message: problem.to_string(),
        key,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn with_time(limit: &str) -> Result<SlurmSettings, SettingsError> {
        SlurmSettings::new(None, None, Some(limit.into()), vec![], None, None, None)
    }

    #[test]
    fn slurm_time_forms_are_accepted_and_others_refused() {
        for ok in ["30", "10:00", "1:30:00", "1-12", "1-12:00:00", "UNLIMITED"] {
            assert!(with_time(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-1", "1h", "1:2:3:4", "1-2-3", "30 --wrap=x"] {
            assert_eq!(with_time(bad).unwrap_err().key, "time_limit", "{bad}");
        }
    }

    #[test]
    fn owned_options_and_option_smuggling_are_refused() {
        let args = |a: &str| {
            SlurmSettings::new(None, None, None, vec![a.into()], None, None, None)
                .map_err(|e| e.key)
        };
        assert!(args("--mem=2G").is_ok());
        assert_eq!(args("--export=ALL").unwrap_err(), "sbatch_args[0]");
        assert_eq!(args("-J").unwrap_err(), "sbatch_args[0]");
        assert_eq!(args("--mem=1G\n--wrap=x").unwrap_err(), "sbatch_args[0]");
        let named = SlurmSettings::new(
            Some("--wrap=x".into()),
            None,
            None,
            vec![],
            None,
            None,
            None,
        );
        assert_eq!(named.unwrap_err().key, "partition");
    }

    #[test]
    fn defaults_apply() {
        let settings = SlurmSettings::new(None, None, None, vec![], None, None, None).unwrap();
        assert_eq!(settings, SlurmSettings::default());
    }
}
