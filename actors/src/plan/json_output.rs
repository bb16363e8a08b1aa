//! `output: json`: how a run's final answer is read as JSON. Real models often wrap the JSON
//! in a Markdown code fence, with a sentence before or after it ("Here is the plan:
//! ```json … ``` Let me know…"); exactly one such fenced block is taken as the JSON.
//!
//! Must not: guess beyond that (no JSON picked out of free text, no choice between two
//! blocks): an answer that is not one JSON value or one fenced JSON block is a failure the
//! plan's `retries` can retry with the reason.

use serde_json::Value;

/// A code fence: a line starting with three backticks.
const FENCE: &str = "```";

/// Parses a run's answer for `output: json`: the whole answer (surrounding whitespace
/// ignored) when it is JSON, or else the content of its one fenced code block marked
/// `json` or unmarked (text around the block is ignored). Zero or several such blocks, or
/// a block that is not JSON, is an error saying which (worded to follow "the result is
/// not valid JSON (…)").
pub fn parse_json_output(text: &str) -> Result<Value, String> {
    let trimmed = text.trim();
    let whole = match serde_json::from_str(trimmed) {
        Ok(value) => return Ok(value),
        Err(error) => error,
    };
    let blocks = json_blocks(trimmed);
    match blocks.as_slice() {
        [] => Err(format!(
            "{whole}, and it holds no ```json block either; output: json expects e.g. {{\"steps\": [...]}}, alone or in one ```json fenced block"
        )),
        [block] => serde_json::from_str(block.trim()).map_err(|error| {
            format!(
                "its ```json block does not parse: {error}; output: json expects e.g. {{\"steps\": [...]}}"
            )
        }),
        several => Err(format!(
            "it holds {} fenced JSON blocks and output: json takes exactly one (answer with a single JSON value, or a single ```json block)",
            several.len()
        )),
    }
}

/// The contents of the answer's fenced code blocks marked `json` (any case) or unmarked,
/// in order. A fence opens on a line starting with ``` (after indentation) and closes on
/// the next line that is only ```; a fence on one line (```json {"a": 1}```) counts too.
/// Blocks marked with another language are skipped; an unclosed block is not a block.
fn json_blocks(text: &str) -> Vec<&str> {
    let mut blocks = Vec::new();
    let mut lines = LineSpans::new(text);
    while let Some((line, _, end)) = lines.next() {
        let Some(info) = line.trim_start().strip_prefix(FENCE) else {
            continue;
        };
        // A one-line block: ```json {"a": 1}```
        if let Some(inline) = info.trim_end().strip_suffix(FENCE) {
            if let Some(content) = json_content(inline) {
                blocks.push(content);
            }
            continue;
        }
        let is_json = info.trim().is_empty() || info.trim().eq_ignore_ascii_case("json");
        let content_start = end;
        let mut closed = None;
        for (inner, start, _) in lines.by_ref() {
            if inner.trim() == FENCE {
                closed = Some(start);
                break;
            }
        }
        match closed {
            Some(content_end) if is_json => blocks.push(&text[content_start..content_end]),
            Some(_) => {}
            None => break,
        }
    }
    blocks
}

/// The JSON of a one-line block's inside (`json {"a": 1}` or ` {"a": 1}`), or `None` when
/// it is marked with another language.
fn json_content(inline: &str) -> Option<&str> {
    let rest = match inline.get(..4) {
        Some(tag) if tag.eq_ignore_ascii_case("json") => &inline[4..],
        _ => inline,
    };
    let first = rest.trim_start().chars().next()?;
    // An unmarked block starts with the JSON itself; anything else is a language tag.
    (rest.starts_with(char::is_whitespace) || "{[\"-0123456789tfn".contains(first)).then_some(rest)
}

/// The lines of a text with their byte spans (start of the line, start of the next).
struct LineSpans<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> LineSpans<'a> {
    fn new(text: &'a str) -> Self {
        LineSpans { text, at: 0 }
    }
}

impl<'a> Iterator for LineSpans<'a> {
    type Item = (&'a str, usize, usize);

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.text.len() {
            return None;
        }
        let start = self.at;
        let rest = &self.text[start..];
        let (line, end) = match rest.find('\n') {
            Some(newline) => (&rest[..newline], start + newline + 1),
            None => (rest, self.text.len()),
        };
        self.at = end;
        Some((line.strip_suffix('\r').unwrap_or(line), start, end))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plain_json_and_a_fence_around_the_whole_answer_parse() {
        assert_eq!(parse_json_output(" {\"a\": 1}\n").unwrap(), json!({"a": 1}));
        assert_eq!(
            parse_json_output("```json\n[1, 2]\n```").unwrap(),
            json!([1, 2])
        );
        assert_eq!(parse_json_output("```\n\"x\"\n```").unwrap(), json!("x"));
        assert_eq!(
            parse_json_output("```JSON\r\n{\"a\": 2}\r\n```\r\n").unwrap(),
            json!({"a": 2})
        );
        assert_eq!(
            parse_json_output("```json {\"a\": 3}```").unwrap(),
            json!({"a": 3})
        );
    }

    /// Issue 25 item 6: the plan-execute example's planner failed twice on a reply whose
    /// JSON was in a fenced block between two sentences, as many real models answer.
    #[test]
    fn one_fenced_json_block_with_text_around_it_is_the_json() {
        let reply = "Here is the plan:\n\n```json\n{\"steps\": [\"a\", \"b\"]}\n```\n\nLet me know if you want changes.";
        assert_eq!(
            parse_json_output(reply).unwrap(),
            json!({"steps": ["a", "b"]})
        );
        let unmarked = "Plan:\n  ```\n  [1, 2]\n  ```\nDone.";
        assert_eq!(parse_json_output(unmarked).unwrap(), json!([1, 2]));
        // A block in another language is not the JSON, and does not count against one.
        let with_code = "Run:\n```bash\nls\n```\nResult:\n```json\n{\"ok\": true}\n```";
        assert_eq!(parse_json_output(with_code).unwrap(), json!({"ok": true}));
    }

    #[test]
    fn zero_several_or_broken_blocks_are_errors_that_say_which() {
        let none = parse_json_output("Here you go: {}").unwrap_err();
        assert!(none.contains("no ```json block"), "{none}");
        let two = parse_json_output("A:\n```json\n1\n```\nB:\n```json\n2\n```").unwrap_err();
        assert!(
            two.contains("2 fenced JSON blocks") && two.contains("exactly one"),
            "{two}"
        );
        let broken = parse_json_output("Plan:\n```json\n{\"a\": \n```").unwrap_err();
        assert!(broken.contains("```json block does not parse"), "{broken}");
        let unclosed = parse_json_output("Plan:\n```json\n{\"a\": 1}").unwrap_err();
        assert!(unclosed.contains("no ```json block"), "{unclosed}");
        let other = parse_json_output("```python\nprint(1)\n```").unwrap_err();
        assert!(other.contains("no ```json block"), "{other}");
    }
}
