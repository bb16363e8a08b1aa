//! What the relay must never repeat about its upstream: the API key, and the user-info and
//! query values of the base URL (`https://user:pass@host/v1?key=...`). [`UpstreamSecrets`]
//! replaces each with [`REDACTED`] in any text (an upstream error body quoting
//! `Bearer sk-...`, a transport error naming the URL); [`shown_url`] is the base URL as it
//! may be printed.
//!
//! Spellings searched: as is, JSON-escaped, and percent-encoded/decoded (a URL's parts come
//! percent-encoded, and errors print them either way). Values shorter than
//! [`MIN_SECRET_CHARS`] are only hidden in [`shown_url`]:
//! searched in free text they would blot out ordinary words.
//!
//! Must not: print or log anything, or keep the secrets anywhere but in the matcher.

use std::borrow::Cow;

use aho_corasick::{AhoCorasick, MatchKind};

use crate::llm::endpoint::percent_decode;
use crate::redact::MIN_SECRET_CHARS;

/// What a secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// The secrets of one upstream, compiled for search.
pub struct UpstreamSecrets {
    matcher: Option<AhoCorasick>,
    longest: usize,
}

impl std::fmt::Debug for UpstreamSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamSecrets")
            .field("longest", &self.longest)
            .finish_non_exhaustive()
    }
}

impl UpstreamSecrets {
    /// The secrets of the endpoint at `base_url` called with `api_key`.
    pub fn new(base_url: &str, api_key: Option<&str>) -> Self {
        let mut values: Vec<String> = Vec::new();
        if let Some(key) = api_key {
            values.push(key.to_owned());
        }
        if let Ok(url) = reqwest::Url::parse(base_url) {
            let user = url.username();
            let password = url.password().unwrap_or("");
            if !password.is_empty() {
                values.push(format!("{user}:{password}"));
                values.push(password.to_owned());
            }
            values.push(user.to_owned());
            if let Some(query) = url.query() {
                values.push(query.to_owned());
                for pair in query.split('&') {
                    let value = pair.split_once('=').map_or(pair, |(_, value)| value);
                    values.push(value.to_owned());
                }
            }
        }
        let mut patterns: Vec<String> = Vec::new();
        for value in values {
            if percent_decode(&value, true).chars().count() < MIN_SECRET_CHARS {
                continue;
            }
            for spelling in spellings(&value) {
                if !patterns.contains(&spelling) {
                    patterns.push(spelling);
                }
            }
        }
        let longest = patterns.iter().map(String::len).max().unwrap_or(0);
        let matcher = (!patterns.is_empty())
            .then(|| {
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(&patterns)
                    .ok()
            })
            .flatten();
        UpstreamSecrets { matcher, longest }
    }

    /// `text` with every secret replaced by [`REDACTED`].
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match &self.matcher {
            Some(matcher) if matcher.is_match(text) => {
                Cow::Owned(matcher.replace_all(text, &vec![REDACTED; matcher.patterns_len()]))
            }
            _ => Cow::Borrowed(text),
        }
    }

    /// `bytes` with every secret replaced by [`REDACTED`].
    pub fn redact_bytes<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        match &self.matcher {
            Some(matcher) if matcher.is_match(bytes) => Cow::Owned(
                matcher
                    .replace_all_bytes(bytes, &vec![REDACTED.as_bytes(); matcher.patterns_len()]),
            ),
            _ => Cow::Borrowed(bytes),
        }
    }

    /// The length in bytes of the longest spelling searched for (0: none).
    pub fn longest(&self) -> usize {
        self.longest
    }
}

/// The ways `value` may be written in an error text.
fn spellings(value: &str) -> Vec<String> {
    let mut out = vec![value.to_owned()];
    if let Ok(json) = serde_json::to_string(value) {
        out.push(json[1..json.len() - 1].to_owned());
    }
    out.push(percent_decode(value, true));
    out.push(percent_encode(value));
    out.dedup();
    out
}

fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `base_url` as it may be printed: user-info and every query value replaced by
/// [`REDACTED`]; a URL that does not parse is not shown at all.
pub fn shown_url(base_url: &str) -> String {
    let Ok(mut url) = reqwest::Url::parse(base_url) else {
        return "(an invalid URL)".to_owned();
    };
    if !url.username().is_empty() || url.password().is_some() {
        let _ = url.set_username(REDACTED);
        let _ = url.set_password(None);
    }
    if let Some(query) = url.query() {
        let hidden: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) => format!("{name}={REDACTED}"),
                None => REDACTED.to_owned(),
            })
            .collect();
        url.set_query(Some(&hidden.join("&")));
    }
    // The URL type percent-encodes the brackets it was given; show them plainly.
    url.to_string().replace("%5BREDACTED%5D", REDACTED)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_key_user_info_and_query_values_are_redacted_in_any_spelling() {
        let secrets = UpstreamSecrets::new(
            "https://bob:p%40ss-word@llm.example/v1?api-key=q-secret-1&api-version=2024",
            Some("sk-live-0123456789"),
        );
        let text = "upstream said: Bearer sk-live-0123456789; url https://bob:p%40ss-word@llm.example/v1/chat/completions?api-key=q-secret-1 pass p@ss-word";
        let out = secrets.redact(text);
        for secret in [
            "sk-live-0123456789",
            "p%40ss-word",
            "p@ss-word",
            "q-secret-1",
        ] {
            assert!(!out.contains(secret), "{secret} in {out}");
        }
        assert!(out.contains("Bearer [REDACTED]"), "{out}");
        assert!(out.contains("llm.example"), "{out}");
        let bytes = secrets.redact_bytes(br#"{"error":{"message":"bad key sk-live-0123456789"}}"#);
        assert_eq!(&*bytes, br#"{"error":{"message":"bad key [REDACTED]"}}"#);
        assert_eq!(
            secrets.redact("nothing here"),
            Cow::Borrowed("nothing here")
        );
    }

    #[test]
    fn short_values_are_not_searched_in_free_text() {
        let secrets = UpstreamSecrets::new("http://a:b@host/v1?x=1", None);
        assert_eq!(secrets.redact("a b 1 host"), "a b 1 host");
        assert_eq!(secrets.longest(), 0);
    }

    #[test]
    fn the_shown_url_hides_user_info_and_query_values() {
        assert_eq!(
            shown_url("https://bob:pw@llm.example/v1?api-key=s3cret&v=2"),
            "https://[REDACTED]@llm.example/v1?api-key=[REDACTED]&v=[REDACTED]"
        );
        assert_eq!(
            shown_url("http://127.0.0.1:8080/v1"),
            "http://127.0.0.1:8080/v1"
        );
        assert_eq!(shown_url("not a url sk-123"), "(an invalid URL)");
    }
}
