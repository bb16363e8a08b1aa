//! cluster::slurm::sbatch_options — which `sbatch` options a plan's `executor.sbatch_args`
//! may carry, judged the way sbatch's own parser (glibc `getopt_long`) reads them.
//!
//! sbatch takes any unambiguous prefix of a long option (`--wra=CMD` is `--wrap=CMD`, which
//! replaced the job script), short options with their value attached and clustered behind
//! flags (`-Jx`, `-vJx`, `-o<file>`), and the first word that is not an option as the job
//! script. A check of the option's spelling therefore misses most smuggling; this is an
//! allow-list instead. Each item of `sbatch_args` must be one complete option of
//! [`SBATCH_OPTIONS`], written in full with its value in the same item (`--mem=2G`,
//! `--hold`, `-c4`, `-Hc4`), that delta does not set itself and that does not stop delta
//! from submitting or watching the job. Nothing an item says can then reach another item or
//! the job script.
//!
//! The table is sbatch's own: every option `src/common/slurm_opt.c` gives sbatch from Slurm
//! 20.11 to 26.05, with its argument kind and short letter. The Slurm CLI tests compare it
//! with the installed `sbatch`.
//!
//! Must not: run anything.

/// Whether an option takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// A flag: `--hold`, `-H`.
    None,
    /// Always: `--mem=2G`, `-c4` (sbatch would take the next word when it is not attached).
    Required,
    /// Only when attached: `--nice` or `--nice=10` (also an option that is a flag in some
    /// Slurm versions and takes an optional value in others, like `--requeue`).
    Optional,
}

/// What delta makes of an option in `sbatch_args`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionUse {
    /// Passed to sbatch as written.
    Allowed,
    /// delta sets it on every job (script, names, arrays, output files, folder, environment,
    /// requeueing); a second value would override delta's.
    SetByDelta,
    /// It would keep delta from submitting or watching the job.
    Refused(Refusal),
}

/// Why an option delta does not set is refused anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `--help`, `--usage`, `--version`, `--autocomplete`, `--test-only`: no job is submitted.
    ExitsWithoutJob,
    /// `--wait`: sbatch returns only when the job has ended.
    WaitsForJob,
    /// `--clusters`, `--cluster`: the job goes to a cluster whose queue delta does not read.
    OtherCluster,
    /// `--export-file`, `--get-user-env`: the job's environment is delta's to set.
    JobEnvironment,
    /// `--uid`, `--gid`: the job would run as someone else.
    OtherUser,
    /// `--external`: the job runs no script.
    NoScript,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refusal::ExitsWithoutJob => "makes sbatch print something and exit without submitting the job",
            Refusal::WaitsForJob => "makes sbatch wait until the job ends, so the orchestration could neither submit nor watch other jobs meanwhile",
            Refusal::OtherCluster => "sends the job to a cluster whose queue delta does not read (its squeue and scancel ask the local cluster)",
            Refusal::JobEnvironment => "changes the job's environment, which delta sets itself (its own environment without provider keys, plus the relay's address and token)",
            Refusal::OtherUser => "runs the job as another user, who cannot write the orchestration's private folders",
            Refusal::NoScript => "submits a job that does not run the job script",
        })
    }
}

/// One option of sbatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SbatchOption {
    /// The long name, without `--`.
    pub long: &'static str,
    /// The short letter, if any.
    pub short: Option<char>,
    /// Whether it takes a value.
    pub value: ValueKind,
    /// Whether a plan may pass it.
    pub usage: OptionUse,
}

impl SbatchOption {
    /// `--job-name`, or `-J (--job-name)` when it was written short.
    fn spelled(&self, short: bool) -> String {
        match (short, self.short) {
            (true, Some(letter)) => format!("-{letter} (--{})", self.long),
            _ => format!("--{}", self.long),
        }
    }
}

const fn opt(
    long: &'static str,
    short: Option<char>,
    value: ValueKind,
    usage: OptionUse,
) -> SbatchOption {
    SbatchOption {
        long,
        short,
        value,
        usage,
    }
}

// Short names for the table's columns.
const FLAG: ValueKind = ValueKind::None;
const VALUE: ValueKind = ValueKind::Required;
const MAYBE: ValueKind = ValueKind::Optional;
const OK: OptionUse = OptionUse::Allowed;
const DELTA: OptionUse = OptionUse::SetByDelta;
const NO_JOB: OptionUse = OptionUse::Refused(Refusal::ExitsWithoutJob);
const WAITS: OptionUse = OptionUse::Refused(Refusal::WaitsForJob);
const OTHER_CLUSTER: OptionUse = OptionUse::Refused(Refusal::OtherCluster);
const JOB_ENV: OptionUse = OptionUse::Refused(Refusal::JobEnvironment);
const OTHER_USER: OptionUse = OptionUse::Refused(Refusal::OtherUser);
const NO_SCRIPT: OptionUse = OptionUse::Refused(Refusal::NoScript);

/// Every option sbatch reads (Slurm 20.11 to 26.05), in the order of their long names.
pub const SBATCH_OPTIONS: &[SbatchOption] = &[
    opt("account", Some('A'), VALUE, OK),
    opt("acctg-freq", None, VALUE, OK),
    opt("array", Some('a'), VALUE, DELTA),
    opt("autocomplete", None, VALUE, NO_JOB),
    opt("batch", None, VALUE, OK),
    opt("bb", None, VALUE, OK),
    opt("bbf", None, VALUE, OK),
    opt("begin", Some('b'), VALUE, OK),
    opt("chdir", Some('D'), VALUE, DELTA),
    opt("cluster", None, VALUE, OTHER_CLUSTER),
    opt("cluster-constraint", None, VALUE, OK),
    opt("clusters", Some('M'), VALUE, OTHER_CLUSTER),
    opt("comment", None, VALUE, DELTA),
    opt("consolidate-segments", None, FLAG, OK),
    opt("constraint", Some('C'), VALUE, OK),
    opt("container", None, VALUE, OK),
    opt("container-id", None, VALUE, OK),
    opt("context", None, VALUE, OK),
    opt("contiguous", None, FLAG, OK),
    opt("core-spec", Some('S'), VALUE, OK),
    opt("cores-per-socket", None, VALUE, OK),
    opt("cpu-freq", None, VALUE, OK),
    opt("cpus-per-gpu", None, VALUE, OK),
    opt("cpus-per-task", Some('c'), VALUE, OK),
    opt("deadline", None, VALUE, OK),
    opt("delay-boot", None, VALUE, OK),
    opt("dependency", Some('d'), VALUE, OK),
    opt("distribution", Some('m'), VALUE, OK),
    opt("error", Some('e'), VALUE, DELTA),
    opt("exclude", Some('x'), VALUE, OK),
    opt("exclusive", None, MAYBE, OK),
    opt("export", None, VALUE, DELTA),
    opt("export-file", None, VALUE, JOB_ENV),
    opt("external", None, FLAG, NO_SCRIPT),
    opt("extra", None, VALUE, OK),
    opt("extra-node-info", Some('B'), VALUE, OK),
    opt("get-user-env", None, MAYBE, JOB_ENV),
    opt("gid", None, VALUE, OTHER_USER),
    opt("gpu-bind", None, VALUE, OK),
    opt("gpu-freq", None, VALUE, OK),
    opt("gpus", Some('G'), VALUE, OK),
    opt("gpus-per-node", None, VALUE, OK),
    opt("gpus-per-socket", None, VALUE, OK),
    opt("gpus-per-task", None, VALUE, OK),
    opt("gres", None, VALUE, OK),
    opt("gres-flags", None, VALUE, OK),
    opt("help", Some('h'), FLAG, NO_JOB),
    opt("hint", None, VALUE, OK),
    opt("hold", Some('H'), FLAG, OK),
    opt("ignore-pbs", None, FLAG, OK),
    opt("input", Some('i'), VALUE, OK),
    opt("job-name", Some('J'), VALUE, DELTA),
    opt("kill-on-invalid-dep", None, VALUE, OK),
    opt("licenses", Some('L'), VALUE, OK),
    opt("mail-type", None, VALUE, OK),
    opt("mail-user", None, VALUE, OK),
    opt("mcs-label", None, VALUE, OK),
    opt("mem", None, VALUE, OK),
    opt("mem-bind", None, VALUE, OK),
    opt("mem-per-cpu", None, VALUE, OK),
    opt("mem-per-gpu", None, VALUE, OK),
    opt("mem-update", None, VALUE, OK),
    opt("mincpus", None, VALUE, OK),
    opt("network", None, VALUE, OK),
    opt("nice", None, MAYBE, OK),
    opt("no-kill", Some('k'), MAYBE, OK),
    opt("no-requeue", None, FLAG, DELTA),
    opt("nodefile", Some('F'), VALUE, OK),
    opt("nodelist", Some('w'), VALUE, OK),
    opt("nodes", Some('N'), VALUE, OK),
    opt("ntasks", Some('n'), VALUE, OK),
    opt("ntasks-per-core", None, VALUE, OK),
    opt("ntasks-per-gpu", None, VALUE, OK),
    opt("ntasks-per-node", None, VALUE, OK),
    opt("ntasks-per-socket", None, VALUE, OK),
    opt("ntasks-per-tres", None, VALUE, OK),
    opt("oom-kill-step", None, MAYBE, OK),
    opt("open-mode", None, VALUE, OK),
    opt("output", Some('o'), VALUE, DELTA),
    opt("overcommit", Some('O'), FLAG, OK),
    opt("oversubscribe", Some('s'), FLAG, OK),
    opt("parsable", None, FLAG, DELTA),
    opt("partition", Some('p'), VALUE, OK),
    opt("power", None, VALUE, OK),
    opt("prefer", None, VALUE, OK),
    opt("priority", None, VALUE, OK),
    opt("profile", None, VALUE, OK),
    opt("propagate", None, MAYBE, OK),
    opt("qos", Some('q'), VALUE, OK),
    opt("quiet", Some('Q'), FLAG, OK),
    opt("reboot", None, FLAG, OK),
    opt("requeue", None, MAYBE, DELTA),
    opt("reservation", None, VALUE, OK),
    opt("resources", None, VALUE, OK),
    opt("resv-ports", None, MAYBE, OK),
    opt("runtime", None, VALUE, OK),
    opt("segment", None, VALUE, OK),
    opt("signal", None, VALUE, OK),
    opt("sockets-per-node", None, VALUE, OK),
    opt("spread-job", None, FLAG, OK),
    opt("spread-segments", None, FLAG, OK),
    opt("stepmgr", None, FLAG, OK),
    opt("switches", None, VALUE, OK),
    opt("tasks-per-node", None, VALUE, OK),
    opt("test-only", None, FLAG, NO_JOB),
    opt("thread-spec", None, VALUE, OK),
    opt("threads-per-core", None, VALUE, OK),
    opt("time", Some('t'), VALUE, OK),
    opt("time-min", None, VALUE, OK),
    opt("tmp", None, VALUE, OK),
    opt("tres-bind", None, VALUE, OK),
    opt("tres-per-task", None, VALUE, OK),
    opt("uid", None, VALUE, OTHER_USER),
    opt("usage", None, FLAG, NO_JOB),
    opt("use-min-nodes", None, FLAG, OK),
    opt("verbose", Some('v'), FLAG, OK),
    opt("version", Some('V'), FLAG, NO_JOB),
    opt("wait", Some('W'), FLAG, WAITS),
    opt("wait-all-nodes", None, VALUE, OK),
    opt("wckey", None, VALUE, OK),
    opt("wrap", None, VALUE, DELTA),
];

/// Why one item of `sbatch_args` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SbatchArgError {
    /// A word that is not an option (`job.sh`, `:`, `-`, `--`): sbatch stops reading options
    /// there and takes it (or the word after `--`) as the job script.
    #[error("{arg:?} is not an option: sbatch would stop reading options there and take what follows as the job script")]
    NotAnOption {
        /// The item.
        arg: String,
    },
    /// An option delta sets on every job, however it is spelled.
    #[error("{arg:?} is {option}, which delta sets on every job")]
    SetByDelta {
        /// The item.
        arg: String,
        /// The option as sbatch reads it (`--wrap`, `-J (--job-name)`).
        option: String,
    },
    /// An option that would keep delta from submitting or watching the job.
    #[error("{arg:?} is {option}, which {reason}")]
    Refused {
        /// The item.
        arg: String,
        /// The option as sbatch reads it.
        option: String,
        /// What it would do.
        reason: Refusal,
    },
    /// A long option cut short: sbatch would read it as one of `candidates` (or refuse it
    /// when there are several).
    #[error("{arg:?} abbreviates {}: sbatch would read it as {}", candidates.join(" or "), if candidates.len() == 1 { "that option" } else { "one of them" })]
    Abbreviation {
        /// The item.
        arg: String,
        /// The options it is a prefix of, `--` included.
        candidates: Vec<String>,
        /// One of them is set by delta or refused.
        reaches_a_delta_option: bool,
    },
    /// No sbatch option (of Slurm 20.11 to 26.05) has this name or letter.
    #[error("{arg:?}: {option} is not an sbatch option")]
    Unknown {
        /// The item.
        arg: String,
        /// The unknown option (`--frobnicate`, `-f`).
        option: String,
    },
    /// An option that takes a value, without it: sbatch would take the next item instead.
    #[error("{arg:?}: {option} takes a value, which must be in the same item (sbatch would take the next argument as its value)")]
    MissingValue {
        /// The item.
        arg: String,
        /// The option.
        option: String,
    },
    /// A flag given a value (`--hold=1`), or a value attached to a short option whose value
    /// is optional (`-kx`).
    #[error("{arg:?}: {option} takes no value here")]
    UnexpectedValue {
        /// The item.
        arg: String,
        /// The option.
        option: String,
    },
}

impl SbatchArgError {
    /// How to write the item instead.
    pub fn hint(&self) -> String {
        const DELTA_SETS: &str = "remove it: delta writes the job script and sets the job names, arrays, output files, working folder, environment and requeueing itself";
        match self {
            SbatchArgError::NotAnOption { .. } => {
                "write each option as one list item with its value attached, e.g. \"--mem=2G\"".into()
            }
            SbatchArgError::SetByDelta { .. } => DELTA_SETS.into(),
            SbatchArgError::Refused { .. } => "remove it (docs/plan.md, `executor.sbatch_args`)".into(),
            SbatchArgError::Abbreviation {
                reaches_a_delta_option: true,
                ..
            } => DELTA_SETS.into(),
            SbatchArgError::Abbreviation { candidates, .. } => format!(
                "write the option in full ({})",
                candidates.join(", ")
            ),
            SbatchArgError::Unknown { .. } => {
                "check the spelling against `sbatch --help`; options are written in full, e.g. \"--cpus-per-task=4\"".into()
            }
            SbatchArgError::MissingValue { option, .. } => {
                let long = option
                    .rsplit("(--")
                    .next()
                    .map_or(option.as_str(), |s| s.trim_end_matches(')'))
                    .trim_start_matches("--");
                format!("write the value in the same item: \"--{long}=VALUE\"")
            }
            SbatchArgError::UnexpectedValue { .. } => {
                "give the flag alone, or the value with the long option (\"--no-kill=off\")".into()
            }
        }
    }
}

fn by_long(name: &str) -> Option<&'static SbatchOption> {
    SBATCH_OPTIONS.iter().find(|o| o.long == name)
}

fn by_short(letter: char) -> Option<&'static SbatchOption> {
    SBATCH_OPTIONS.iter().find(|o| o.short == Some(letter))
}

/// Refuses what delta sets or refuses; `Ok` for an allowed option.
fn judge(arg: &str, option: &SbatchOption, short: bool) -> Result<(), SbatchArgError> {
    match option.usage {
        OptionUse::Allowed => Ok(()),
        OptionUse::SetByDelta => Err(SbatchArgError::SetByDelta {
            arg: arg.to_owned(),
            option: option.spelled(short),
        }),
        OptionUse::Refused(reason) => Err(SbatchArgError::Refused {
            arg: arg.to_owned(),
            option: option.spelled(short),
            reason,
        }),
    }
}

/// Checks one item of `executor.sbatch_args` (already known to be non-empty, bounded and
/// free of control characters): one complete option, spelled in full, that a plan may pass.
pub fn check_sbatch_arg(arg: &str) -> Result<(), SbatchArgError> {
    if let Some(long) = arg.strip_prefix("--") {
        return check_long(arg, long);
    }
    match arg.strip_prefix('-') {
        Some(letters) if !letters.is_empty() => check_short_cluster(arg, letters),
        _ => Err(SbatchArgError::NotAnOption {
            arg: arg.to_owned(),
        }),
    }
}

fn check_long(arg: &str, long: &str) -> Result<(), SbatchArgError> {
    let (name, value) = match long.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (long, None),
    };
    if name.is_empty() {
        return Err(SbatchArgError::NotAnOption {
            arg: arg.to_owned(),
        });
    }
    let Some(option) = by_long(name) else {
        // getopt_long takes a unique prefix for the option it starts, so an abbreviation
        // of `--wrap` is `--wrap`: refused, naming what it would be read as.
        let candidates: Vec<&SbatchOption> = SBATCH_OPTIONS
            .iter()
            .filter(|o| o.long.starts_with(name))
            .collect();
        if candidates.is_empty() {
            return Err(SbatchArgError::Unknown {
                arg: arg.to_owned(),
                option: format!("--{name}"),
            });
        }
        return Err(SbatchArgError::Abbreviation {
            arg: arg.to_owned(),
            reaches_a_delta_option: candidates.iter().any(|o| o.usage != OptionUse::Allowed),
            candidates: candidates.iter().map(|o| format!("--{}", o.long)).collect(),
        });
    };
    judge(arg, option, false)?;
    match (option.value, value) {
        (ValueKind::Required, None) => Err(SbatchArgError::MissingValue {
            arg: arg.to_owned(),
            option: option.spelled(false),
        }),
        (ValueKind::None, Some(_)) => Err(SbatchArgError::UnexpectedValue {
            arg: arg.to_owned(),
            option: option.spelled(false),
        }),
        _ => Ok(()),
    }
}

/// `-x`, `-c4`, `-Hc4`: flags, then at most one option taking the rest of the item as its
/// value, as getopt reads a cluster of short options.
fn check_short_cluster(arg: &str, letters: &str) -> Result<(), SbatchArgError> {
    for (at, letter) in letters.char_indices() {
        let Some(option) = by_short(letter) else {
            return Err(SbatchArgError::Unknown {
                arg: arg.to_owned(),
                option: format!("-{letter}"),
            });
        };
        judge(arg, option, true)?;
        let rest = &letters[at + letter.len_utf8()..];
        match option.value {
            ValueKind::None => continue,
            ValueKind::Required if rest.is_empty() => {
                return Err(SbatchArgError::MissingValue {
                    arg: arg.to_owned(),
                    option: option.spelled(true),
                })
            }
            ValueKind::Required => return Ok(()),
            // `-k` takes an attached value as optional: `-kJx` would be `--no-kill=Jx`
            // here and a flag then `-Jx` for a parser that saw `k` as a flag. Refused.
            ValueKind::Optional if !rest.is_empty() => {
                return Err(SbatchArgError::UnexpectedValue {
                    arg: arg.to_owned(),
                    option: option.spelled(true),
                })
            }
            ValueKind::Optional => return Ok(()),
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn refused(arg: &str) -> SbatchArgError {
        check_sbatch_arg(arg).expect_err(arg)
    }

    #[test]
    fn every_prefix_of_a_delta_option_is_refused() {
        for option in SBATCH_OPTIONS
            .iter()
            .filter(|o| o.usage != OptionUse::Allowed)
        {
            for end in 1..=option.long.len() {
                let prefix = &option.long[..end];
                for arg in [format!("--{prefix}"), format!("--{prefix}=x")] {
                    assert!(check_sbatch_arg(&arg).is_err(), "{arg} passed");
                }
            }
        }
    }

    #[test]
    fn the_attached_and_clustered_short_forms_of_delta_options_are_refused() {
        for option in SBATCH_OPTIONS
            .iter()
            .filter(|o| o.usage != OptionUse::Allowed)
        {
            let Some(letter) = option.short else { continue };
            for arg in [
                format!("-{letter}"),
                format!("-{letter}x"),
                format!("-{letter}/tmp/f"),
                format!("-v{letter}x"),
                format!("-HQ{letter}x"),
            ] {
                assert!(check_sbatch_arg(&arg).is_err(), "{arg} passed");
            }
        }
    }

    #[test]
    fn the_reported_smuggling_forms_name_the_option_sbatch_reads() {
        assert!(matches!(
            refused("--wra=touch /tmp/owned"),
            SbatchArgError::Abbreviation { ref candidates, reaches_a_delta_option: true, .. } if candidates == &["--wrap"]
        ));
        assert!(
            matches!(refused("-Jx"), SbatchArgError::SetByDelta { ref option, .. } if option == "-J (--job-name)")
        );
        assert!(
            matches!(refused("-o/tmp/f"), SbatchArgError::SetByDelta { ref option, .. } if option == "-o (--output)")
        );
        assert!(matches!(
            refused("--arr=1-9"),
            SbatchArgError::Abbreviation {
                reaches_a_delta_option: true,
                ..
            }
        ));
        assert!(matches!(
            refused("--chd=/"),
            SbatchArgError::Abbreviation {
                reaches_a_delta_option: true,
                ..
            }
        ));
        assert!(matches!(refused("-vJx"), SbatchArgError::SetByDelta { .. }));
        assert!(matches!(
            refused("--wait"),
            SbatchArgError::Refused {
                reason: Refusal::WaitsForJob,
                ..
            }
        ));
        assert!(matches!(
            refused("-M other"),
            SbatchArgError::Refused {
                reason: Refusal::OtherCluster,
                ..
            }
        ));
    }

    #[test]
    fn words_that_end_the_options_are_refused() {
        for arg in ["job.sh", ":", "-", "--", "--=x", "2G"] {
            assert!(
                matches!(refused(arg), SbatchArgError::NotAnOption { .. }),
                "{arg}"
            );
        }
    }

    #[test]
    fn a_value_must_be_attached_and_a_flag_has_none() {
        assert!(matches!(
            refused("--mem"),
            SbatchArgError::MissingValue { .. }
        ));
        assert!(refused("--mem").hint().contains("\"--mem=VALUE\""));
        assert!(matches!(refused("-c"), SbatchArgError::MissingValue { .. }));
        assert!(refused("-c").hint().contains("\"--cpus-per-task=VALUE\""));
        assert!(matches!(
            refused("--hold=1"),
            SbatchArgError::UnexpectedValue { .. }
        ));
        assert!(matches!(
            refused("-kJx"),
            SbatchArgError::UnexpectedValue { .. }
        ));
        assert!(matches!(
            refused("--frobnicate=1"),
            SbatchArgError::Unknown { .. }
        ));
        assert!(matches!(refused("-f"), SbatchArgError::Unknown { .. }));
        assert!(matches!(
            refused("--cpus-per-t=4"),
            SbatchArgError::Abbreviation {
                reaches_a_delta_option: false,
                ..
            }
        ));
    }

    #[test]
    fn ordinary_options_pass() {
        for arg in [
            "--mem=2G",
            "--cpus-per-task=4",
            "-c4",
            "-Hc4",
            "--hold",
            "-H",
            "-k",
            "--no-kill",
            "--nice",
            "--nice=10",
            "--gres=gpu:1",
            "--constraint=a&b",
            "--qos=short",
            "--time=10",
            "--partition=debug",
            "--tres-per-task=cpu=2",
            "--mail-user=a@b.c",
        ] {
            assert_eq!(check_sbatch_arg(arg), Ok(()), "{arg}");
        }
    }

    #[test]
    fn no_allowed_name_is_a_prefix_of_a_delta_option() {
        // Such a name would be read as the delta option by an sbatch that lacks it.
        for allowed in SBATCH_OPTIONS
            .iter()
            .filter(|o| o.usage == OptionUse::Allowed)
        {
            for other in SBATCH_OPTIONS
                .iter()
                .filter(|o| o.usage != OptionUse::Allowed)
            {
                assert!(
                    !other.long.starts_with(allowed.long),
                    "--{} is a prefix of --{}",
                    allowed.long,
                    other.long
                );
            }
        }
    }

    #[test]
    fn the_table_is_sorted_and_has_no_duplicate() {
        for pair in SBATCH_OPTIONS.windows(2) {
            assert!(
                pair[0].long < pair[1].long,
                "{} / {}",
                pair[0].long,
                pair[1].long
            );
        }
        let mut letters: Vec<char> = SBATCH_OPTIONS.iter().filter_map(|o| o.short).collect();
        let count = letters.len();
        letters.sort_unstable();
        letters.dedup();
        assert_eq!(letters.len(), count);
    }
}
