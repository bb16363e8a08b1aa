//! Unit tests of the redactor: spellings, overlaps, idempotence, restoring, JSON values and
//! streams cut anywhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use super::*;

const CANARY: &str = "canary-7f3a9c";

fn one(value: &str) -> SecretSet {
    SecretSet::new([("call_1", value)])
}

#[test]
fn every_occurrence_is_replaced_by_the_marker() {
    let set = one(CANARY);
    let text = format!("pw {CANARY}, again {CANARY}!");
    let redacted = set.redact(&text);
    assert_eq!(
        redacted,
        format!("pw {m}, again {m}!", m = marker("call_1"))
    );
    assert_eq!(set.restore(&redacted), text);
}

#[test]
fn text_without_secrets_is_borrowed_unchanged() {
    let set = one(CANARY);
    assert!(matches!(set.redact("nothing here"), Cow::Borrowed(_)));
    assert!(matches!(
        SecretSet::default().redact(CANARY),
        Cow::Borrowed(_)
    ));
    assert!(matches!(set.restore("nothing here"), Cow::Borrowed(_)));
}

#[test]
fn overlapping_secrets_take_the_longest_match() {
    let set = SecretSet::new([("short", "abcd"), ("long", "abcd-efgh")]);
    let redacted = set.redact("x abcd-efgh y abcd z");
    assert_eq!(
        redacted,
        format!("x {} y {} z", marker("long"), marker("short"))
    );
    assert_eq!(set.restore(&redacted), "x abcd-efgh y abcd z");
}

#[test]
fn answers_shorter_than_the_minimum_are_not_searched_but_restore() {
    let set = SecretSet::new([("call_1", "abc")]);
    assert_eq!(set.redact("abc abc"), "abc abc");
    assert_eq!(set.restore(&marker("call_1")), "abc");
    assert_eq!(MIN_SECRET_CHARS, 4);
    let four = SecretSet::new([("call_1", "abcd")]);
    assert_eq!(four.redact("abcd"), marker("call_1"));
}

#[test]
fn redacting_twice_changes_nothing_even_when_the_secret_is_in_the_marker_text() {
    for secret in ["answer", "secrets", "REDACTED", "call_1"] {
        let set = one(secret);
        let text = format!("a {secret} b");
        let once = set.redact(&text).into_owned();
        assert_eq!(once, format!("a {} b", marker("call_1")));
        assert_eq!(set.redact(&once), once, "secret {secret}");
        assert_eq!(set.restore(&once), text, "secret {secret}");
    }
}

#[test]
fn unknown_markers_are_left_alone() {
    let set = one(CANARY);
    let text = format!("{} and {MARKER_PREFIX}", marker("other"));
    assert_eq!(set.restore(&text), text);
}

#[test]
fn json_escaped_secrets_inside_serialised_text_are_found_and_restored_exactly() {
    let secret = "pa\"ss\\wörd/<&>\n";
    let set = one(secret);
    let arguments = serde_json::to_string(&json!({"pw": secret})).unwrap();
    let redacted = set.redact(&arguments);
    assert!(!redacted.contains("pa\\\"ss"), "{redacted}");
    assert_eq!(set.restore(&redacted), arguments);
    // Twice: JSON text holding JSON text.
    let nested = serde_json::to_string(&json!({"inner": arguments})).unwrap();
    let redacted = set.redact(&nested);
    assert!(!redacted.contains("pa\\\\\\\"ss"), "{redacted}");
    assert_eq!(set.restore(&redacted), nested);
}

#[test]
fn other_encoders_spellings_are_found() {
    let secret = "clé/<hidden>&";
    let set = one(secret);
    let spellings = [
        "cl\\u00e9/<hidden>&",             // Python json.dumps
        "cl\\u00E9/<hidden>&",             // upper-case hex
        "clé\\/<hidden>&",                 // PHP
        "clé/\\u003chidden\\u003e\\u0026", // Go
    ];
    for spelled in spellings {
        let redacted = set.redact(&format!("{{\"v\":\"{spelled}\"}}")).into_owned();
        assert!(redacted.contains(MARKER_PREFIX), "{spelled}: {redacted}");
        assert!(!redacted.contains("hidden"), "{spelled}: {redacted}");
        // Restored to the canonical spelling: the same JSON string.
        let back: Value = serde_json::from_str(&set.restore(&redacted)).unwrap();
        assert_eq!(back["v"], secret);
    }
}

#[test]
fn shell_quoted_secrets_in_a_command_line_are_found() {
    let secret = "it's hidden";
    let set = one(secret);
    let line = shell_words::join(["echo", secret]);
    let redacted = set.redact(&line);
    assert!(!redacted.contains("hidden"), "{redacted}");
    assert_eq!(set.restore(&redacted), line);
}

#[test]
fn json_values_are_redacted_in_strings_and_keys_and_restored() {
    let set = one(CANARY);
    let original = json!({
        "request": {"messages": [{"role": "tool", "content": format!("pw is {CANARY}")}]},
        CANARY: [CANARY, 7, null],
    });
    let mut value = original.clone();
    set.redact_json(&mut value);
    let text = value.to_string();
    assert!(!text.contains(CANARY), "{text}");
    assert_eq!(text.matches(&marker("call_1")).count(), 3, "{text}");
    set.restore_json(&mut value);
    assert_eq!(value, original);
}

#[test]
fn load_dir_reads_the_secret_files_by_name() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("call_1_0"), CANARY).unwrap();
    let set = SecretSet::load_dir(dir.path());
    assert_eq!(set.get("call_1_0"), Some(CANARY));
    assert!(SecretSet::load_dir(&dir.path().join("missing")).is_empty());
}

#[test]
fn a_redactor_applies_secrets_added_later_to_later_snapshots() {
    let redactor = Redactor::default();
    let before = redactor.snapshot();
    redactor.add("call_9", CANARY);
    assert_eq!(before.redact(CANARY), CANARY);
    assert_eq!(redactor.snapshot().redact(CANARY), marker("call_9"));
    assert!(!format!("{redactor:?}").contains(CANARY));
}

#[test]
fn secret_ids_are_safe_file_names() {
    assert_eq!(secret_id("call_1-a"), "call_1-a");
    assert_eq!(secret_id("../x y"), "___x_y");
    assert_eq!(secret_id(""), "_");
}

fn stream_in_chunks(set: &SecretSet, data: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut stream = set.stream();
    let mut out = Vec::new();
    let mut rest = data;
    for size in cuts.iter().cycle().take(10_000) {
        if rest.is_empty() {
            break;
        }
        let (chunk, after) = rest.split_at((*size).min(rest.len()));
        out.extend(stream.feed(chunk));
        rest = after;
    }
    out.extend(stream.feed(rest));
    out.extend(stream.finish());
    out
}

#[test]
fn a_secret_straddling_two_reads_is_redacted() {
    let set = SecretSet::new([("a", "abcd"), ("b", CANARY)]);
    let data = format!("xx{CANARY}yy abcd {CANARY}");
    for cut in 1..data.len() {
        let out = stream_in_chunks(&set, data.as_bytes(), &[cut]);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            set.redact(&data),
            "cut at {cut}"
        );
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

    /// Any text around the secret in any spelling: redacting removes it, restoring gives
    /// the text back, redacting again changes nothing.
    #[test]
    fn redact_then_restore_round_trips(
        before in "[a-z \\\\\"]{0,20}",
        after in "[a-z \\\\\"]{0,20}",
        secret in "[a-zé \\\\\"]{4,12}",
        escaped in proptest::prelude::any::<bool>(),
    ) {
        let set = one(&secret);
        let spelled = if escaped { forms::json_escape(&secret) } else { secret.clone() };
        let text = format!("{before}{spelled}{after}");
        let redacted = set.redact(&text).into_owned();
        proptest::prop_assert!(!redacted.contains(&spelled));
        proptest::prop_assert_eq!(set.redact(&redacted).into_owned(), redacted.clone());
        // Exact: every spelling these characters can form is the canonical one.
        proptest::prop_assert_eq!(set.restore(&redacted).into_owned(), text);
    }

    /// A stream cut anywhere is redacted exactly as the whole text.
    #[test]
    fn any_chunking_redacts_like_the_whole(
        parts in proptest::collection::vec("[a-z -]{0,6}|canary-7f3a9c|ab\"cd", 0..12),
        cuts in proptest::collection::vec(1usize..20, 1..10),
    ) {
        let set = SecretSet::new([("c", CANARY), ("q", "ab\"cd")]);
        let data = parts.concat();
        let out = stream_in_chunks(&set, data.as_bytes(), &cuts);
        let text = String::from_utf8(out).unwrap();
        proptest::prop_assert!(!text.contains(CANARY));
        proptest::prop_assert_eq!(text, set.redact(&data).into_owned());
    }
}
