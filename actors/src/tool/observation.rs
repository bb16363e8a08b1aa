//! tool::observation — turns a [`ProcessOutcome`] into the text the model sees.
//!
//! Owns: the `=== STDOUT ===` / `=== STDERR ===` / `=== EXIT CODE: n ===` layout, the cut line
//! naming how much was cut and where the full text is, UTF-8-safe cutting, and the wording for
//! timeouts, signals, cancellations and start failures.
//! Must not: run processes, read the output files, or write anything to disk.

use std::path::{Path, PathBuf};

use super::process::{
    CaptureSpec, ProcessOutcome, StreamCapture, Termination, DEFAULT_HEAD_BYTES, DEFAULT_TAIL_BYTES,
};

/// How much of each stream the model sees (at the start and at the end). What the process
/// captured is the upper bound: asking for more here than was captured shows what was captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObservationLimits {
    /// Bytes shown from the start of each stream.
    pub head_bytes: usize,
    /// Bytes shown from the end of each stream.
    pub tail_bytes: usize,
}

impl Default for ObservationLimits {
    fn default() -> Self {
        Self {
            head_bytes: DEFAULT_HEAD_BYTES,
            tail_bytes: DEFAULT_TAIL_BYTES,
        }
    }
}

impl ObservationLimits {
    /// The capture settings that keep exactly what these limits show.
    pub fn capture_spec(
        &self,
        full_output: Option<(PathBuf, PathBuf)>,
        file_cap_bytes: u64,
    ) -> CaptureSpec {
        CaptureSpec {
            head_bytes: self.head_bytes,
            tail_bytes: self.tail_bytes,
            full_output,
            file_cap_bytes,
            ..CaptureSpec::default()
        }
    }
}

/// The model-facing text: a section per non-empty stream, `(no output)` when both are empty,
/// then one status line. A cut stream shows its head, a
/// `[... N bytes cut; full output: <path> ...]` line, then its tail; paths are shown relative
/// to `display_root` (the run directory). One trailing newline of each stream is dropped so
/// sections are not separated by blank lines.
pub fn format_observation(outcome: &ProcessOutcome, display_root: &Path) -> String {
    let everything_captured = ObservationLimits {
        head_bytes: usize::MAX,
        tail_bytes: usize::MAX,
    };
    format_observation_limited(outcome, display_root, everything_captured)
}

/// [`format_observation`] showing at most `limits` of each stream (for texts smaller than
/// what was captured, e.g. a hook's failure reason).
pub fn format_observation_limited(
    outcome: &ProcessOutcome,
    display_root: &Path,
    limits: ObservationLimits,
) -> String {
    let mut sections: Vec<String> = Vec::new();
    if outcome.stdout.total_bytes > 0 {
        sections.push("=== STDOUT ===".to_owned());
        sections.push(stream_text(&outcome.stdout, display_root, limits));
    }
    if outcome.stderr.total_bytes > 0 {
        sections.push("=== STDERR ===".to_owned());
        sections.push(stream_text(&outcome.stderr, display_root, limits));
    }
    let started = !matches!(outcome.termination, Termination::SpawnFailed(_));
    if sections.is_empty() && started {
        sections.push("(no output)".to_owned());
    }
    sections.push(status_line(outcome));
    sections.join("\n")
}

/// A text answer (an engine call's) as the model sees it: whole when it fits `limits`,
/// else its head, a `[... N bytes cut; full output: <path> ...]` line naming `full_file`
/// (shown relative to `display_root`) and its tail, cut between UTF-8 characters.
pub fn cut_text(
    text: &str,
    limits: ObservationLimits,
    full_file: Option<&Path>,
    display_root: &Path,
) -> String {
    let bytes = text.as_bytes();
    let keep = limits.head_bytes.saturating_add(limits.tail_bytes);
    let capture = if bytes.len() <= keep {
        StreamCapture {
            head: bytes.to_vec(),
            total_bytes: bytes.len() as u64,
            ..StreamCapture::default()
        }
    } else {
        StreamCapture {
            head: bytes[..limits.head_bytes].to_vec(),
            tail: bytes[bytes.len() - limits.tail_bytes..].to_vec(),
            total_bytes: bytes.len() as u64,
            file: full_file.map(Path::to_path_buf),
            file_truncated: false,
        }
    };
    stream_text(&capture, display_root, limits)
}

/// True only when the program exited by itself with code 0.
pub fn is_success(outcome: &ProcessOutcome) -> bool {
    outcome.termination == Termination::Exited(0)
}

fn status_line(outcome: &ProcessOutcome) -> String {
    match &outcome.termination {
        Termination::Exited(code) => format!("=== EXIT CODE: {code} ==="),
        Termination::Signaled(signal) => format!("=== KILLED BY SIGNAL {signal} ==="),
        Termination::TimedOut => format!(
            "=== TIMED OUT after {} ms (process group killed) ===",
            outcome.timeout.as_millis()
        ),
        Termination::Cancelled => "=== CANCELLED (process group killed) ===".to_owned(),
        Termination::SpawnFailed(reason) => format!("=== FAILED TO START: {reason} ==="),
    }
}

fn stream_text(stream: &StreamCapture, display_root: &Path, limits: ObservationLimits) -> String {
    let (head, tail) = visible_parts(stream, limits);
    if (head.len() + tail.len()) as u64 >= stream.total_bytes {
        let mut all = head;
        all.extend_from_slice(&tail);
        return without_one_trailing_newline(String::from_utf8_lossy(&all).into_owned());
    }
    let head = &head[..utf8_prefix_len(&head)];
    let tail = &tail[utf8_suffix_start(&tail)..];
    let cut = stream.total_bytes - head.len() as u64 - tail.len() as u64;
    let location = match &stream.file {
        Some(file) => {
            let shown = file.strip_prefix(display_root).unwrap_or(file);
            if stream.file_truncated {
                format!(
                    "; full output (capped, see its last line): {}",
                    shown.display()
                )
            } else {
                format!("; full output: {}", shown.display())
            }
        }
        None => String::new(),
    };
    format!(
        "{}\n[... {cut} bytes cut{location} ...]\n{}",
        String::from_utf8_lossy(head),
        without_one_trailing_newline(String::from_utf8_lossy(tail).into_owned())
    )
}

/// The head and tail to show: what was captured, trimmed to `limits`. A stream that was not
/// cut during capture is one contiguous text (head ++ tail), split afresh.
fn visible_parts(stream: &StreamCapture, limits: ObservationLimits) -> (Vec<u8>, Vec<u8>) {
    if stream.is_cut() {
        let head = &stream.head[..stream.head.len().min(limits.head_bytes)];
        let tail = &stream.tail[stream.tail.len() - stream.tail.len().min(limits.tail_bytes)..];
        return (head.to_vec(), tail.to_vec());
    }
    let mut all = stream.head.clone();
    all.extend_from_slice(&stream.tail);
    if all.len() <= limits.head_bytes.saturating_add(limits.tail_bytes) {
        return (all, Vec::new());
    }
    let tail = all[all.len() - limits.tail_bytes..].to_vec();
    all.truncate(limits.head_bytes);
    (all, tail)
}

fn without_one_trailing_newline(mut text: String) -> String {
    if text.ends_with('\n') {
        text.pop();
    }
    text
}

/// The length of the longest prefix that does not end inside a multi-byte character.
fn utf8_prefix_len(bytes: &[u8]) -> usize {
    let mut end = bytes.len();
    // A UTF-8 character is at most 4 bytes: only the last 3 can be an incomplete one.
    for back in 1..=3.min(bytes.len()) {
        let index = bytes.len() - back;
        let byte = bytes[index];
        if byte & 0b1100_0000 == 0b1000_0000 {
            continue; // continuation byte: look further back for the lead byte
        }
        let width = match byte {
            b if b & 0b1000_0000 == 0 => 1,
            b if b & 0b1110_0000 == 0b1100_0000 => 2,
            b if b & 0b1111_0000 == 0b1110_0000 => 3,
            b if b & 0b1111_1000 == 0b1111_0000 => 4,
            _ => 1,
        };
        if index + width > bytes.len() {
            end = index;
        }
        break;
    }
    end
}

/// The index of the first byte that is not a continuation byte (at most 3 skipped).
fn utf8_suffix_start(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .take(3)
        .position(|byte| byte & 0b1100_0000 != 0b1000_0000)
        .unwrap_or(0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_long_engine_answer_is_cut_between_characters_and_names_its_full_file() {
        let limits = ObservationLimits {
            head_bytes: 4,
            tail_bytes: 4,
        };
        let root = Path::new("/run");
        assert_eq!(cut_text("short\n", limits, None, root), "short");
        let text = "ab\u{e9}cd-middle-\u{e9}xyz";
        let shown = cut_text(text, limits, Some(Path::new("/run/io/t/1.output")), root);
        assert_eq!(
            shown,
            format!(
                "ab\u{e9}\n[... {} bytes cut; full output: io/t/1.output ...]\nxyz",
                text.len() - 4 - 3
            )
        );
    }
    use std::path::PathBuf;
    use std::time::Duration;

    fn stream(text: &str) -> StreamCapture {
        StreamCapture {
            head: text.as_bytes().to_vec(),
            total_bytes: text.len() as u64,
            ..StreamCapture::default()
        }
    }

    fn outcome(
        termination: Termination,
        stdout: StreamCapture,
        stderr: StreamCapture,
    ) -> ProcessOutcome {
        ProcessOutcome {
            exit_code: match termination {
                Termination::Exited(code) => Some(code),
                _ => None,
            },
            termination,
            stdout,
            stderr,
            duration: Duration::from_millis(5),
            pid: Some(1),
            timeout: Duration::from_millis(300_000),
        }
    }

    #[test]
    fn both_sections_and_exit_code() {
        let text = format_observation(
            &outcome(
                Termination::Exited(1),
                stream("hello world\n"),
                stream("oops\n"),
            ),
            Path::new("/run"),
        );
        assert_eq!(
            text,
            "=== STDOUT ===\nhello world\n=== STDERR ===\noops\n=== EXIT CODE: 1 ==="
        );
    }

    #[test]
    fn no_output_line_when_both_empty() {
        let text = format_observation(
            &outcome(
                Termination::Exited(0),
                StreamCapture::default(),
                StreamCapture::default(),
            ),
            Path::new("/run"),
        );
        assert_eq!(text, "(no output)\n=== EXIT CODE: 0 ===");
    }

    #[test]
    fn timeout_signal_cancel_and_spawn_failure_wording() {
        let empty = StreamCapture::default;
        let timed_out = format_observation(
            &outcome(Termination::TimedOut, stream("partial"), empty()),
            Path::new("/"),
        );
        assert_eq!(
            timed_out,
            "=== STDOUT ===\npartial\n=== TIMED OUT after 300000 ms (process group killed) ==="
        );
        let killed = format_observation(
            &outcome(Termination::Signaled(9), empty(), empty()),
            Path::new("/"),
        );
        assert!(killed.ends_with("=== KILLED BY SIGNAL 9 ==="));
        let cancelled = format_observation(
            &outcome(Termination::Cancelled, empty(), empty()),
            Path::new("/"),
        );
        assert!(cancelled.ends_with("=== CANCELLED (process group killed) ==="));
        let failed = format_observation(
            &outcome(
                Termination::SpawnFailed("No such file or directory: foo".into()),
                empty(),
                empty(),
            ),
            Path::new("/"),
        );
        assert_eq!(
            failed,
            "=== FAILED TO START: No such file or directory: foo ==="
        );
    }

    #[test]
    fn cut_stream_names_the_count_and_the_relative_file() {
        let captured = StreamCapture {
            head: b"HEAD".to_vec(),
            tail: b"TAIL\n".to_vec(),
            total_bytes: 109,
            file: Some(PathBuf::from("/runs/r1/io/tool_executions/c1/stdout.log")),
            file_truncated: false,
        };
        let text = format_observation(
            &outcome(Termination::Exited(0), captured, StreamCapture::default()),
            Path::new("/runs/r1"),
        );
        assert_eq!(
            text,
            "=== STDOUT ===\nHEAD\n[... 100 bytes cut; full output: io/tool_executions/c1/stdout.log ...]\nTAIL\n=== EXIT CODE: 0 ==="
        );
    }

    #[test]
    fn capped_file_is_mentioned() {
        let captured = StreamCapture {
            head: b"a".to_vec(),
            tail: b"b".to_vec(),
            total_bytes: 10,
            file: Some(PathBuf::from("/r/out.log")),
            file_truncated: true,
        };
        let text = format_observation(
            &outcome(Termination::Exited(0), captured, StreamCapture::default()),
            Path::new("/r"),
        );
        assert!(text
            .contains("[... 8 bytes cut; full output (capped, see its last line): out.log ...]"));
    }

    #[test]
    fn cuts_happen_at_utf8_boundaries_and_count_the_dropped_bytes() {
        // "é" is 2 bytes, "€" is 3: head ends inside "€", tail starts inside "é".
        let head = "ab€".as_bytes()[..4].to_vec();
        let tail = "é!".as_bytes()[1..].to_vec();
        let captured = StreamCapture {
            head,
            tail,
            total_bytes: 20,
            file: None,
            file_truncated: false,
        };
        let text = format_observation(
            &outcome(Termination::Exited(0), captured, StreamCapture::default()),
            Path::new("/"),
        );
        assert_eq!(
            text,
            "=== STDOUT ===\nab\n[... 17 bytes cut ...]\n!\n=== EXIT CODE: 0 ==="
        );
    }

    #[test]
    fn utf8_helpers_keep_complete_characters() {
        assert_eq!(utf8_prefix_len("a€".as_bytes()), 4);
        assert_eq!(utf8_prefix_len(&"a€".as_bytes()[..3]), 1);
        assert_eq!(utf8_prefix_len(&"😀".as_bytes()[..3]), 0);
        assert_eq!(utf8_suffix_start(&"😀x".as_bytes()[2..]), 2);
        assert_eq!(utf8_suffix_start(b"plain"), 0);
    }

    #[test]
    fn limited_view_cuts_further_with_exact_counts() {
        let limits = ObservationLimits {
            head_bytes: 3,
            tail_bytes: 2,
        };
        let whole = format_observation_limited(
            &outcome(
                Termination::Exited(0),
                stream("abcdefghij"),
                StreamCapture::default(),
            ),
            Path::new("/"),
            limits,
        );
        assert_eq!(
            whole,
            "=== STDOUT ===\nabc\n[... 5 bytes cut ...]\nij\n=== EXIT CODE: 0 ==="
        );
        let already_cut = StreamCapture {
            head: b"HEAD".to_vec(),
            tail: b"TAIL".to_vec(),
            total_bytes: 100,
            file: None,
            file_truncated: false,
        };
        let text = format_observation_limited(
            &outcome(
                Termination::Exited(0),
                already_cut,
                StreamCapture::default(),
            ),
            Path::new("/"),
            limits,
        );
        assert_eq!(
            text,
            "=== STDOUT ===\nHEA\n[... 95 bytes cut ...]\nIL\n=== EXIT CODE: 0 ==="
        );
        let short = format_observation_limited(
            &outcome(
                Termination::Exited(0),
                stream("abcde"),
                StreamCapture::default(),
            ),
            Path::new("/"),
            limits,
        );
        assert_eq!(short, "=== STDOUT ===\nabcde\n=== EXIT CODE: 0 ===");
    }

    #[test]
    fn limits_build_the_matching_capture_spec() {
        let limits = ObservationLimits {
            head_bytes: 10,
            tail_bytes: 20,
        };
        let spec = limits.capture_spec(None, 99);
        assert_eq!(
            (spec.head_bytes, spec.tail_bytes, spec.file_cap_bytes),
            (10, 20, 99)
        );
    }

    #[test]
    fn success_only_for_exit_zero() {
        let empty = StreamCapture::default;
        assert!(is_success(&outcome(
            Termination::Exited(0),
            empty(),
            empty()
        )));
        assert!(!is_success(&outcome(
            Termination::Exited(2),
            empty(),
            empty()
        )));
        assert!(!is_success(&outcome(
            Termination::TimedOut,
            empty(),
            empty()
        )));
    }
}
