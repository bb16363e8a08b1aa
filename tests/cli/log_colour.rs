//! CLI test of issue 24 item 19 (second half): log and error lines on stderr carry no ANSI
//! colour codes when stderr is not a terminal (a file or a pipe), so a saved log reads as
//! plain text. `NO_COLOR` on a terminal is covered by the binary's unit test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use crate::orchestrate::delta_in;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn log_lines_written_to_a_file_carry_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("stderr.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let agent = repo_root().join("examples/agents/hello-world");
    let status = delta_in(dir.path())
        .env("DELTA_LOG", "debug")
        .args(["run", "--agent"])
        .arg(&agent)
        .args(["-m", "hi", "-y", "-w", "ws", "--llm-script"])
        .arg(agent.join("llm-script.yaml"))
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let text = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        text.lines().any(|line| line.contains("DEBUG")),
        "the run logged nothing at debug level:\n{text}"
    );
    assert!(
        !text.contains('\u{1b}'),
        "colour codes in a log written to a file:\n{text:?}"
    );
}
