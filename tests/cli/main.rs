//! CLI-level integration tests against the built binaries (one binary).
mod hooks;
mod init_expand;

mod crash;
mod harness;
mod run;
