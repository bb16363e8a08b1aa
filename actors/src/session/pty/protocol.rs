//! The holder protocol: one compact JSON object per line in each direction (JSON escapes
//! newlines, so a line is a frame and large writes/reads are safe). A connection may carry
//! several requests; `follow` answers with a stream of `output` frames ended by `end`.
//! Owns the message types and framing only, not the socket lifecycle.

use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};

/// Largest frame accepted (a 1 MiB buffer is at most ~6 MiB of escaped JSON).
pub const MAX_FRAME: u64 = 64 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    /// Liveness and status.
    Ping,
    /// Bytes for the program's terminal input.
    Write { data: Vec<u8> },
    /// Take the buffered output. With `timeout_ms`, wait up to that long while nothing is
    /// buffered; with `wait`, wait without limit. `lines` keeps only the last N lines.
    Read {
        #[serde(default)]
        timeout_ms: Option<u64>,
        #[serde(default)]
        wait: bool,
        #[serde(default)]
        lines: Option<usize>,
    },
    /// Stream output as it arrives until the program exits and the buffer is drained.
    Follow,
    /// Stop the program (SIGTERM, up to 5 s, SIGKILL) and the holder.
    Shutdown,
    /// Change the terminal size the program sees (SIGWINCH).
    Resize { cols: u16, rows: u16 },
    /// Stream `output.log` from byte offset `from` (or from at most `at_most` bytes before its
    /// end, whichever is later), without consuming the buffer `read` takes from. The reply is
    /// one `tailing` frame saying where the stream starts, then the connection carries raw
    /// output bytes (no more frames) until the program has exited and everything was sent.
    Tail {
        from: u64,
        #[serde(default)]
        at_most: Option<u64>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Response {
    Pong {
        session_id: String,
        alive: bool,
        pid: Option<u32>,
        #[serde(default)]
        exit_code: Option<i32>,
    },
    Written {
        bytes: usize,
    },
    Output {
        data: String,
    },
    /// End of a `follow` stream.
    End,
    /// Start of a `tail` stream: raw bytes from offset `from` follow; `logged` bytes were in
    /// `output.log` when the stream started.
    Tailing {
        from: u64,
        logged: u64,
    },
    Ok,
    /// The program exited and nothing is left to read.
    Dead,
    Error {
        message: String,
    },
}

/// The one codec of the holder protocol, used by the blocking client and holder here and by
/// `delta serve`'s async link (`runtime/serve/worker/link.rs`): a frame is one JSON message and a
/// newline (JSON escapes every newline inside strings), at most `MAX_FRAME` bytes.
pub fn encode_frame<T: Serialize>(message: &T) -> std::io::Result<Vec<u8>> {
    let mut line = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    line.push(b'\n');
    Ok(line)
}

/// Decodes what a reader got with `read_until(b'\n')` over at most `MAX_FRAME` bytes: empty is a
/// clean end of stream (`Ok(None)`); without its newline the frame was torn or too large.
pub fn decode_frame<T: for<'de> Deserialize<'de>>(line: &[u8]) -> std::io::Result<Option<T>> {
    if line.is_empty() {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame truncated or larger than the limit of {MAX_FRAME} bytes"),
        ));
    }
    serde_json::from_slice(line)
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Writes one frame and flushes.
pub fn write_frame<T: Serialize>(out: &mut impl Write, message: &T) -> std::io::Result<()> {
    out.write_all(&encode_frame(message)?)?;
    out.flush()
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
pub fn read_frame<T: for<'de> Deserialize<'de>>(
    input: &mut impl BufRead,
) -> std::io::Result<Option<T>> {
    let mut line = Vec::new();
    std::io::Read::take(input.by_ref(), MAX_FRAME).read_until(b'\n', &mut line)?;
    decode_frame(&line)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_even_with_newlines_and_large_payloads() {
        let big = "line\n".repeat(200_000);
        let mut wire = Vec::new();
        write_frame(
            &mut wire,
            &Request::Write {
                data: b"a\nb".to_vec(),
            },
        )
        .unwrap();
        write_frame(&mut wire, &Response::Output { data: big.clone() }).unwrap();
        assert_eq!(wire.iter().filter(|b| **b == b'\n').count(), 2);
        let mut input = std::io::Cursor::new(wire);
        let first: Request = read_frame(&mut input).unwrap().unwrap();
        assert_eq!(
            first,
            Request::Write {
                data: b"a\nb".to_vec()
            }
        );
        let second: Response = read_frame(&mut input).unwrap().unwrap();
        assert_eq!(second, Response::Output { data: big });
        assert!(read_frame::<Request>(&mut input).unwrap().is_none());
    }

    #[test]
    fn a_truncated_frame_is_an_error() {
        let mut input = std::io::Cursor::new(b"{\"type\":\"ping\"".to_vec());
        assert!(read_frame::<Request>(&mut input).is_err());
    }

    #[test]
    fn an_oversized_frame_is_refused() {
        // A newline only after MAX_FRAME bytes: the reader stops at the limit and refuses the frame.
        let mut wire = vec![b'"'; MAX_FRAME as usize];
        wire.push(b'\n');
        let mut input = std::io::Cursor::new(wire);
        let error = read_frame::<Request>(&mut input).unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
        assert!(
            error.to_string().contains("larger than the limit"),
            "{error}"
        );
    }

    #[test]
    fn a_torn_frame_is_refused_by_the_codec() {
        let whole = encode_frame(&Request::Follow).unwrap();
        let torn = &whole[..whole.len() - 3];
        assert!(decode_frame::<Request>(torn).is_err());
        assert_eq!(
            decode_frame::<Request>(&whole).unwrap(),
            Some(Request::Follow)
        );
        assert!(decode_frame::<Request>(b"").unwrap().is_none());
    }
}
