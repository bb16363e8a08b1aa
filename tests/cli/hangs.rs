//! Inputs that used to hang `delta` (issue 11): a context file that is a FIFO, and a model
//! endpoint that accepts connections and never answers (or stalls mid-response). Each must
//! end the command promptly with an error naming the cause; every command is bounded by the
//! harness's timeout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use crate::harness::*;

/// Regression: a context source that is a FIFO blocked the run forever (no writer ever
/// came), and neither the timeout nor SIGTERM could end it. It now fails the run at once.
#[test]
fn run_with_a_fifo_context_file_fails_promptly_naming_the_source() {
    let case = Case::new("fifo", "", &json!({"steps": [{"answer": "never asked"}]}));
    let fifo = case.work_dir().join("notes.md");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    std::fs::write(
        case.agent_dir().join("context.yaml"),
        format!(
            "{CONTEXT_YAML}  - type: file\n    id: team_notes\n    path: '${{CWD}}/notes.md'\n"
        ),
    )
    .unwrap();
    let out = case.run("r-fifo", "read the notes", &[]);
    out.assert_code(1);
    let result = out.json();
    assert_eq!(result["status"], "FAILED");
    assert_eq!(result["error"]["type"], "context_error");
    let message = result["error"]["message"].as_str().unwrap();
    for phrase in [
        "'team_notes'",
        "notes.md",
        "FIFO",
        "not a regular file",
        "hint:",
    ] {
        assert!(message.contains(phrase), "{phrase}: {message}");
    }
    assert!(out.stderr.contains("FIFO"), "{}", out.stderr);
    assert_eq!(case.mock.stats()["requests_total"], 0);
}
