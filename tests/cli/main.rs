//! CLI-level integration tests against the built binaries (one binary).

mod continue_run;
mod crash;
mod harness;
mod run;
mod list_runs;
