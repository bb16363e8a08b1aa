//! The bounds delta puts on what an MCP server sends: the size of one message, the tools of
//! one server, the pages of its tool list, and the size of the tool schemas a run offers the
//! model (a warning, not a refusal).
//!
//! Why: a server's tool list used to be taken whole. 100,000 tools cost 1.7 GiB and 45 s per
//! run and made every model request 15 MB; a server that never ended its pagination grew
//! until its start limit; an answer over the SDK's 16 MiB line limit was dropped by the SDK
//! and the call waited out its `timeout_ms` as "no answer".
//!
//! Owns [`MessageCap`], the reader between a server's stdout and the SDK that fails the
//! session the moment a message passes [`MAX_MESSAGE_BYTES`], so every call in flight ends
//! at once naming the limit. Must not: speak the protocol or decide what a run offers.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::watch;

/// The most bytes of one message (one line of JSON-RPC) delta reads from a server: the MCP
/// SDK's own line limit (`rmcp`'s `DEFAULT_MAX_LINE_LENGTH`), which drops longer lines.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// The most tools delta offers of one server. The largest public servers list about a
/// hundred; a model chooses poorly among hundreds, and OpenAI refuses requests with more
/// than 128 functions.
pub const MAX_TOOLS_PER_SERVER: usize = 1000;

/// The most pages of a server's tool list delta reads (`tools/list` with a cursor): ten
/// tools a page reaches [`MAX_TOOLS_PER_SERVER`]; a server that never ends its list stops
/// here.
pub const MAX_TOOL_PAGES: usize = 100;

/// Above this many bytes of tool definitions (the JSON of every tool a run offers from its
/// MCP servers), the run warns once: they are sent with every model request.
pub const SCHEMA_WARNING_BYTES: usize = 256 * 1024;

/// Why a session ended when a message passed [`MAX_MESSAGE_BYTES`], for the call's error.
pub fn oversized_message() -> String {
    format!(
        "the server sent a message of more than {} MiB, the most delta reads of one MCP \
         message; the session was ended and the server is started again at the next call",
        MAX_MESSAGE_BYTES / (1024 * 1024)
    )
}

/// A server's stdout, passed through to the MCP SDK unchanged until one line (one message)
/// passes `max` bytes: then it fails every read (the SDK ends the session, and every call
/// in flight with it) and sets its flag, which the calls watch to say why at once.
pub struct MessageCap<R> {
    inner: R,
    max: usize,
    /// Bytes of the line being read so far.
    line: usize,
    over: watch::Sender<bool>,
}

impl<R: AsyncRead + Unpin> MessageCap<R> {
    /// `inner` capped at `max` bytes a line ([`MAX_MESSAGE_BYTES`]; smaller in tests); the
    /// receiver turns `true` when a line passes.
    pub fn new(inner: R, max: usize) -> (MessageCap<R>, watch::Receiver<bool>) {
        let (over, watching) = watch::channel(false);
        (
            MessageCap {
                inner,
                max,
                line: 0,
                over,
            },
            watching,
        )
    }

    /// The length of the line in progress after `bytes`, or `None` when a line in them
    /// passes the cap.
    fn after(&self, bytes: &[u8]) -> Option<usize> {
        let mut line = self.line;
        for piece in bytes.split_inclusive(|&b| b == b'\n') {
            let ends = piece.last() == Some(&b'\n');
            let content = piece.len() - usize::from(ends);
            // A line of `max` bytes does not fit with its newline either (the SDK counts it).
            if line + content >= self.max {
                return None;
            }
            line = if ends { 0 } else { line + content };
        }
        Some(line)
    }

    fn refused() -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, oversized_message())
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for MessageCap<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if *self.over.borrow() {
            return Poll::Ready(Err(Self::refused()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {}
            other => return other,
        }
        match self.after(&buf.filled()[before..]) {
            Some(line) => {
                self.line = line;
                Poll::Ready(Ok(()))
            }
            None => {
                buf.set_filled(before);
                self.over.send_replace(true);
                Poll::Ready(Err(Self::refused()))
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn read_all(input: Vec<u8>, max: usize) -> (io::Result<Vec<u8>>, bool) {
        let (mut capped, over) = MessageCap::new(&input[..], max);
        let mut out = Vec::new();
        let read = capped.read_to_end(&mut out).await.map(|_| out);
        let flagged = *over.borrow();
        (read, flagged)
    }

    #[tokio::test]
    async fn lines_within_the_cap_pass_unchanged_and_one_over_it_fails_the_read() {
        let fits = b"0123456789\nabc\n0123456789".to_vec();
        let (read, over) = read_all(fits.clone(), 11).await;
        assert_eq!(read.unwrap(), fits);
        assert!(!over);
        // 11 bytes before a newline: the line with its newline is over 11.
        let (read, over) = read_all(b"ok\n01234567890\n".to_vec(), 11).await;
        let error = read.unwrap_err();
        assert!(over);
        assert!(error.to_string().contains("16 MiB"), "{error}");
        // A line that never ends is refused once it reaches the cap.
        let (read, over) = read_all(vec![b'x'; 100], 11).await;
        assert!(read.is_err() && over);
    }
}
