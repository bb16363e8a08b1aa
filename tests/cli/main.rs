//! CLI-level integration tests against the built binaries (one binary).
mod bench;
mod hooks;
mod init_expand;

mod ask_human;
mod continue_run;
mod crash;
mod harness;
mod list_runs;
mod orchestrate;
mod orchestrate_crash;
mod run;
mod run_env;
mod secrets;
mod sessions;
mod sessions_pty;
mod tool_spawner;
