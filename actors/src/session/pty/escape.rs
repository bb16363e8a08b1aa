//! Escape parsing for `write` input (implementation plan §1.4): `\n \r \t \b \f \v`,
//! `\xHH` (a raw byte), `\uHHHH` (a character, UTF-8 encoded) and `\\`. Unknown or partial
//! escapes stay literal; real NUL bytes pass through unchanged. Pure, no I/O.

/// Turns the escape sequences of `input` into bytes, in one left-to-right pass.
pub fn parse_escapes(input: &str) -> Vec<u8> {
    let bytes = input.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' || i + 1 >= bytes.len() {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let simple = match bytes[i + 1] {
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            b'b' => Some(0x08),
            b'f' => Some(0x0c),
            b'v' => Some(0x0b),
            b'\\' => Some(b'\\'),
            _ => None,
        };
        if let Some(byte) = simple {
            out.push(byte);
            i += 2;
            continue;
        }
        match bytes[i + 1] {
            b'x' => {
                if let Some(value) = hex(bytes, i + 2, 2) {
                    out.push(value as u8);
                    i += 4;
                    continue;
                }
            }
            b'u' => {
                if let Some(ch) = hex(bytes, i + 2, 4).and_then(char::from_u32) {
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                    i += 6;
                    continue;
                }
            }
            _ => {}
        }
        out.push(b'\\');
        i += 1;
    }
    out
}

fn hex(bytes: &[u8], start: usize, len: usize) -> Option<u32> {
    let digits = bytes.get(start..start + len)?;
    if !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn standard_escapes() {
        assert_eq!(parse_escapes(r"hello\nworld"), b"hello\nworld");
        assert_eq!(parse_escapes(r"\r\t\b\f\v"), b"\r\t\x08\x0c\x0b");
    }

    #[test]
    fn hex_and_unicode_escapes() {
        assert_eq!(parse_escapes(r"\x1b[A"), b"\x1b[A");
        assert_eq!(parse_escapes(r"\u001b"), b"\x1b");
        assert_eq!(parse_escapes(r"\u00e9"), "é".as_bytes());
        assert_eq!(parse_escapes(r"\xff"), vec![0xff]);
    }

    #[test]
    fn escaped_backslashes_stay_literal() {
        assert_eq!(parse_escapes(r"\\n"), b"\\n");
        assert_eq!(parse_escapes(r"a\\\nb"), b"a\\\nb");
    }

    #[test]
    fn partial_unknown_and_trailing_escapes_stay_literal() {
        assert_eq!(parse_escapes(r"\x1"), b"\\x1");
        assert_eq!(parse_escapes(r"\u001"), b"\\u001");
        assert_eq!(parse_escapes(r"\q"), b"\\q");
        assert_eq!(parse_escapes("end\\"), b"end\\");
        assert_eq!(parse_escapes(""), b"");
        assert_eq!(parse_escapes("a\0b"), b"a\0b");
        assert_eq!(parse_escapes(r"\ud800"), b"\\ud800");
    }
}
