//! CLI-level integration tests against the built binaries (one binary).

mod crash;
mod harness;
mod run;
