//! CLI-level integration tests against the built binaries (one binary).
mod init_expand;
mod orchestrate;
mod orchestrate_crash;
