//! Semantic key names (`write-key`) to the bytes a terminal sends. Pure table, no I/O.

/// The bytes for `name` (case-insensitive), or `None` for an unknown key.
///
/// `enter` is CR, which is what a terminal sends: canonical-mode programs see it as a newline
/// (the tty's ICRNL), raw-mode programs (menus, readline) see the real Enter key.
pub fn key_bytes(name: &str) -> Option<Vec<u8>> {
    let name = name.to_ascii_lowercase();
    if let Some(letter) = name.strip_prefix("ctrl+") {
        let byte = match letter.as_bytes() {
            [b] if b.is_ascii_lowercase() => *b - b'a' + 1,
            _ => return None,
        };
        return Some(vec![byte]);
    }
    let bytes: &[u8] = match name.as_str() {
        "arrow_up" => b"\x1b[A",
        "arrow_down" => b"\x1b[B",
        "arrow_right" => b"\x1b[C",
        "arrow_left" => b"\x1b[D",
        "enter" => b"\r",
        "tab" => b"\t",
        "escape" => b"\x1b",
        "space" => b" ",
        "backspace" => b"\x7f",
        "f1" => b"\x1bOP",
        "f2" => b"\x1bOQ",
        "f3" => b"\x1bOR",
        "f4" => b"\x1bOS",
        "f5" => b"\x1b[15~",
        "f6" => b"\x1b[17~",
        "f7" => b"\x1b[18~",
        "f8" => b"\x1b[19~",
        "f9" => b"\x1b[20~",
        "f10" => b"\x1b[21~",
        "f11" => b"\x1b[23~",
        "f12" => b"\x1b[24~",
        "home" => b"\x1b[H",
        "end" => b"\x1b[F",
        "page_up" => b"\x1b[5~",
        "page_down" => b"\x1b[6~",
        "delete" => b"\x1b[3~",
        "insert" => b"\x1b[2~",
        _ => return None,
    };
    Some(bytes.to_vec())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_full_table_is_present() {
        let mut names: Vec<String> = [
            "arrow_up",
            "arrow_down",
            "arrow_left",
            "arrow_right",
            "enter",
            "tab",
            "escape",
            "space",
            "backspace",
            "home",
            "end",
            "page_up",
            "page_down",
            "delete",
            "insert",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        names.extend((1..=12).map(|n| format!("f{n}")));
        names.extend(('a'..='z').map(|c| format!("ctrl+{c}")));
        assert_eq!(names.len(), 53);
        for name in &names {
            assert!(key_bytes(name).is_some(), "{name}");
        }
    }

    #[test]
    fn control_keys_map_to_their_codes() {
        assert_eq!(key_bytes("ctrl+c").unwrap(), vec![3]);
        assert_eq!(key_bytes("CTRL+Z").unwrap(), vec![0x1a]);
        assert_eq!(key_bytes("arrow_down").unwrap(), b"\x1b[B");
        assert_eq!(key_bytes("f12").unwrap(), b"\x1b[24~");
        for bad in ["ctrl+1", "ctrl+", "f13", "arrowdown", ""] {
            assert!(key_bytes(bad).is_none(), "{bad}");
        }
    }
}
