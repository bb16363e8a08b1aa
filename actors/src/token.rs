//! token — the bearer tokens of delta's own servers (`delta serve`, the relay): a fresh random
//! one, and the comparison every check uses.
//!
//! Why here, below both servers: the relay is compiled without `delta serve` (feature
//! `relay` without `serve`), and both must compare tokens the same way.
//!
//! Must not: log, print or store a token; compare with `==` (it stops at the first
//! difference, which a caller can time).

/// Compares without stopping at the first difference.
pub fn same_token(given: &str, token: &str) -> bool {
    same_bytes(given.as_bytes(), token.as_bytes())
}

/// [`same_token`] for bytes (a hex-decoded subprotocol token).
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let mut difference = a.len() ^ b.len();
    for (i, byte) in b.iter().enumerate() {
        difference |= (a.get(i).copied().unwrap_or(0) ^ byte) as usize;
    }
    difference == 0
}

/// A fresh random token (32 hex digits).
pub fn new_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_token_matches_whatever_its_length() {
        assert!(same_token("abc/123:@x", "abc/123:@x"));
        assert!(!same_token("abc/123:@y", "abc/123:@x"));
        assert!(!same_token("abc/123:@", "abc/123:@x"));
        assert!(!same_token("abc/123:@xx", "abc/123:@x"));
        assert!(!same_token("", "abc"));
    }

    #[test]
    fn new_tokens_are_32_hex_digits_and_differ() {
        let (a, b) = (new_token(), new_token());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
