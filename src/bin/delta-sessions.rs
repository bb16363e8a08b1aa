//! `delta-sessions`: thin entry point (not implemented yet).
#![allow(clippy::print_stderr)]

fn main() {
    eprintln!("delta-sessions: not implemented yet");
    std::process::exit(2);
}
