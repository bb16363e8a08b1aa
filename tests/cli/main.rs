//! CLI-level integration tests against the built binaries (one binary).

mod ask_human;
mod continue_run;
mod crash;
mod harness;
mod list_runs;
mod run;
mod run_env;
