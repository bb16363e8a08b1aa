//! CLI-level integration tests against the built binaries (one binary).
mod init_expand;

mod crash;
mod harness;
mod run;
mod sessions;
mod sessions_pty;
