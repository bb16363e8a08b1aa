//! CLI-level integration tests against the built binaries (one binary).
mod bench;
mod hooks;
mod init_expand;

mod ask_human;
mod continue_compat;
mod continue_run;
mod crash;
mod env_precedence;
mod hangs;
mod harness;
mod list_orchestrations;
mod list_runs;
mod orchestrate;
mod orchestrate_bad_plans;
mod orchestrate_crash;
mod orchestrate_interrupt;
mod path_ids;
mod run;
mod run_env;
mod run_lock;
mod secrets;
mod serve;
mod sessions;
mod sessions_pty;
mod tool_spawner;
mod unwritable;
