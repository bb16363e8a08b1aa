//! tool::process::capture — reads one child output stream into a bounded head + tail kept in
//! memory (for the model) and, optionally, a capped file on disk (for humans and audits).
//!
//! Owns: the head/tail ring logic, lazy creation of the full-output file (with sensitive
//! answers redacted as it streams), the cap note.
//! Must not: hold more than `head_bytes + tail_bytes` of a stream in memory for the model
//! (and [`SMALL_OUTPUT_BYTES`] for its file), create a file for an empty stream, replace a
//! file that exists (the file is created with `O_EXCL`; if its name is taken, the stream goes
//! to a fresh name beside it), or decide anything about process lifetime (that is
//! `process.rs`'s job).

use std::collections::VecDeque;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::redact::{SecretSet, StreamRedactor};

/// One captured output stream: what the model may see plus where the full text went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamCapture {
    /// The first `head_bytes` bytes of the stream.
    pub head: Vec<u8>,
    /// The last bytes of the stream after the head (at most `tail_bytes`).
    pub tail: Vec<u8>,
    /// Every byte the stream produced, including the ones neither kept nor written.
    pub total_bytes: u64,
    /// The full-output file, when one was requested and the stream was non-empty.
    pub file: Option<PathBuf>,
    /// True when the file stopped at the cap (a note at its end says so).
    pub file_truncated: bool,
}

impl StreamCapture {
    /// True when bytes between head and tail were dropped from memory.
    pub fn is_cut(&self) -> bool {
        self.total_bytes > (self.head.len() + self.tail.len()) as u64
    }

    /// Bytes dropped between head and tail.
    pub fn cut_bytes(&self) -> u64 {
        self.total_bytes
            .saturating_sub((self.head.len() + self.tail.len()) as u64)
    }

    /// The whole stream (lossy UTF-8) when nothing was cut; otherwise head, a
    /// `[... N bytes cut ...]` line, and tail, so a reader never mistakes a cut text for a
    /// complete one.
    pub fn text_lossy(&self) -> String {
        if !self.is_cut() {
            let mut all = self.head.clone();
            all.extend_from_slice(&self.tail);
            return String::from_utf8_lossy(&all).into_owned();
        }
        format!(
            "{}\n[... {} bytes cut ...]\n{}",
            String::from_utf8_lossy(&self.head),
            self.cut_bytes(),
            String::from_utf8_lossy(&self.tail)
        )
    }
}

/// Where and how much of one stream to keep.
#[derive(Debug, Clone)]
pub(crate) struct StreamLimits {
    pub head_bytes: usize,
    pub tail_bytes: usize,
    pub file: Option<PathBuf>,
    pub file_cap_bytes: u64,
    pub secrets: SecretSet,
}

/// The most of a stream's file text held back in memory: a stream that ends within it (most
/// tool outputs) has its file created and written in one go when it ends, instead of through
/// the async file API, whose every open, write and flush is a trip to the blocking pool (a
/// tool printing one line cost as much engine time as the rest of its call: BENCHMARKS.md).
pub(crate) const SMALL_OUTPUT_BYTES: usize = 16 * 1024;

/// Writes the full text lazily: the file only exists once the stream produced a byte. With
/// secrets, the text is redacted on its way in and the cap counts the bytes written. Up to
/// [`SMALL_OUTPUT_BYTES`] wait in `pending`; past that the file is opened and streamed to.
struct CappedFile {
    path: PathBuf,
    cap: u64,
    redactor: Option<StreamRedactor>,
    /// Bytes accepted for the file (pending or written).
    written: u64,
    truncated: bool,
    pending: Vec<u8>,
    handle: Option<tokio::fs::File>,
    /// A write error stops further writes; the capture in memory continues regardless.
    failed: bool,
}

impl CappedFile {
    fn new(path: PathBuf, cap: u64, secrets: &SecretSet) -> Self {
        Self {
            path,
            cap,
            redactor: (!secrets.is_empty()).then(|| secrets.stream()),
            written: 0,
            truncated: false,
            pending: Vec::new(),
            handle: None,
            failed: false,
        }
    }

    async fn write(&mut self, chunk: &[u8]) {
        if self.failed || chunk.is_empty() {
            return;
        }
        if self.written >= self.cap {
            self.truncated = true;
            return;
        }
        match self.redactor.as_mut() {
            Some(redactor) => {
                let redacted = redactor.feed(chunk);
                self.write_capped(&redacted).await;
            }
            None => self.write_capped(chunk).await,
        }
    }

    async fn write_capped(&mut self, chunk: &[u8]) {
        if chunk.is_empty() {
            return;
        }
        let room = self.cap.saturating_sub(self.written);
        let take = usize::try_from(room).unwrap_or(usize::MAX).min(chunk.len());
        if take < chunk.len() {
            self.truncated = true;
        }
        if take == 0 {
            return;
        }
        let chunk = &chunk[..take];
        self.written += take as u64;
        if self.handle.is_none() && self.pending.len() + chunk.len() <= SMALL_OUTPUT_BYTES {
            self.pending.extend_from_slice(chunk);
            return;
        }
        if self.handle.is_none() {
            match create_output_file(&mut self.path) {
                Ok(file) => self.handle = Some(tokio::fs::File::from_std(file)),
                Err(error) => {
                    tracing::warn!(path = %self.path.display(), %error, "cannot create tool output file");
                    self.failed = true;
                    return;
                }
            }
        }
        let pending = std::mem::take(&mut self.pending);
        if let Some(handle) = self.handle.as_mut() {
            for part in [pending.as_slice(), chunk] {
                if let Err(error) = handle.write_all(part).await {
                    tracing::warn!(path = %self.path.display(), %error, "cannot write tool output file");
                    self.failed = true;
                    return;
                }
            }
        }
    }

    /// Flushes and, when capped, appends a note naming the cap and the real size.
    async fn finish(mut self, total_bytes: u64) -> (Option<PathBuf>, bool) {
        if let Some(redactor) = self.redactor.take() {
            if !self.failed {
                self.write_capped(&redactor.finish()).await;
            }
        }
        let note = self.truncated.then(|| {
            format!(
                "\n[delta: output capped at {} bytes; the stream produced {} bytes]\n",
                self.cap, total_bytes
            )
        });
        let Some(mut handle) = self.handle.take() else {
            if self.pending.is_empty() || self.failed {
                return (None, false);
            }
            // The whole text is here: one create and one write, on this thread.
            let mut text = std::mem::take(&mut self.pending);
            text.extend_from_slice(note.as_deref().unwrap_or_default().as_bytes());
            let written = create_output_file(&mut self.path)
                .and_then(|mut file| std::io::Write::write_all(&mut file, &text));
            return match written {
                Ok(()) => (Some(self.path), self.truncated),
                Err(error) => {
                    tracing::warn!(path = %self.path.display(), %error, "cannot write tool output file");
                    (None, false)
                }
            };
        };
        if let Some(note) = note {
            if let Err(error) = handle.write_all(note.as_bytes()).await {
                tracing::warn!(path = %self.path.display(), %error, "cannot write cap note");
            }
        }
        if let Err(error) = handle.flush().await {
            tracing::warn!(path = %self.path.display(), %error, "cannot flush tool output file");
        }
        (Some(self.path), self.truncated)
    }
}

/// Creates the full-output file at `path`, private (0600) like the record beside it, never
/// over an existing one: if the name is taken (a file an earlier process left), the stream
/// goes to a fresh name beside it, and `path` is updated to say so. On this thread: the run
/// folder's other files (journal, records) are written from the run's thread too.
fn create_output_file(path: &mut PathBuf) -> std::io::Result<std::fs::File> {
    let create = |path: &Path| {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
    };
    // The folder is made only when missing (the first output of a run): a `mkdir` that
    // finds it there costs nearly as much as the file's own creation.
    let created = match create(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match path.parent() {
            Some(parent) => {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(parent)?;
                create(path)
            }
            None => Err(e),
        },
        other => other,
    };
    match created {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            *path = fresh_sibling(path);
            create(path)
        }
        other => other,
    }
}

/// `<stem>_<random>.<ext>` beside `path`: where a stream goes when an earlier process left a
/// file under its name (the record names the file the stream went to).
fn fresh_sibling(path: &Path) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let random = uuid::Uuid::new_v4().simple().to_string();
    let name = match path.extension() {
        Some(extension) => format!("{stem}_{random}.{}", extension.to_string_lossy()),
        None => format!("{stem}_{random}"),
    };
    path.with_file_name(name)
}

/// The most one read of a tool's pipe takes.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Reads `reader` until EOF or until `stop` fires (a daemon may keep the pipe open after
/// the leader exits), returning what was captured so far.
pub(crate) async fn capture_stream<R>(
    reader: Option<R>,
    limits: StreamLimits,
    stop: CancellationToken,
) -> StreamCapture
where
    R: AsyncRead + Unpin,
{
    let mut head: Vec<u8> = Vec::new();
    let mut tail: VecDeque<u8> = VecDeque::new();
    let mut total_bytes: u64 = 0;
    let mut file = limits
        .file
        .clone()
        .map(|path| CappedFile::new(path, limits.file_cap_bytes, &limits.secrets));
    if let Some(mut reader) = reader {
        // Not zero-filled: `read_buf` reads into the spare capacity, so a tool that prints
        // nothing (most calls print little) does not pay for clearing 64 KiB per stream.
        let mut buffer: Vec<u8> = Vec::with_capacity(READ_CHUNK_BYTES);
        loop {
            buffer.clear();
            let read = tokio::select! {
                biased;
                read = reader.read_buf(&mut buffer) => read,
                () = stop.cancelled() => break,
            };
            let chunk = match read {
                Ok(0) | Err(_) => break,
                Ok(n) => &buffer[..n],
            };
            total_bytes += chunk.len() as u64;
            keep_head_and_tail(chunk, &mut head, &mut tail, &limits);
            if let Some(file) = file.as_mut() {
                file.write(chunk).await;
            }
        }
    }
    let (file, file_truncated) = match file {
        Some(file) => file.finish(total_bytes).await,
        None => (None, false),
    };
    StreamCapture {
        head,
        tail: tail.into_iter().collect(),
        total_bytes,
        file,
        file_truncated,
    }
}

fn keep_head_and_tail(
    chunk: &[u8],
    head: &mut Vec<u8>,
    tail: &mut VecDeque<u8>,
    limits: &StreamLimits,
) {
    let head_room = limits.head_bytes.saturating_sub(head.len());
    let (to_head, rest) = chunk.split_at(head_room.min(chunk.len()));
    head.extend_from_slice(to_head);
    if limits.tail_bytes == 0 || rest.is_empty() {
        return;
    }
    let rest = if rest.len() > limits.tail_bytes {
        tail.clear();
        &rest[rest.len() - limits.tail_bytes..]
    } else {
        rest
    };
    let overflow = (tail.len() + rest.len()).saturating_sub(limits.tail_bytes);
    tail.drain(..overflow);
    tail.extend(rest.iter().copied());
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn limits(head: usize, tail: usize, file: Option<PathBuf>, cap: u64) -> StreamLimits {
        StreamLimits {
            head_bytes: head,
            tail_bytes: tail,
            file,
            file_cap_bytes: cap,
            secrets: SecretSet::default(),
        }
    }

    async fn capture(bytes: &[u8], limits: StreamLimits) -> StreamCapture {
        capture_stream(Some(bytes), limits, CancellationToken::new()).await
    }

    #[tokio::test]
    async fn keeps_everything_when_it_fits() {
        let captured = capture(b"hello world", limits(8, 8, None, 0)).await;
        assert!(!captured.is_cut());
        assert_eq!(captured.text_lossy(), "hello world");
        assert_eq!(captured.total_bytes, 11);
    }

    #[tokio::test]
    async fn cuts_the_middle_with_exact_counts() {
        let data: Vec<u8> = (0..100u8).collect();
        let captured = capture(&data, limits(10, 20, None, 0)).await;
        assert_eq!(captured.head, (0..10u8).collect::<Vec<_>>());
        assert_eq!(captured.tail, (80..100u8).collect::<Vec<_>>());
        assert_eq!(captured.cut_bytes(), 70);
        assert!(captured.text_lossy().contains("[... 70 bytes cut ...]"));
    }

    #[test]
    fn tail_ring_keeps_the_last_bytes_across_small_chunks() {
        let limits = limits(2, 3, None, 0);
        let (mut head, mut tail) = (Vec::new(), VecDeque::new());
        for chunk in [&b"ab"[..], b"cd", b"e", b"fgh", b"i"] {
            keep_head_and_tail(chunk, &mut head, &mut tail, &limits);
        }
        assert_eq!(head, b"ab");
        assert_eq!(tail.into_iter().collect::<Vec<_>>(), b"ghi");
    }

    proptest::proptest! {
        /// Any data in any chunking: head is the first bytes, tail the last bytes after the
        /// head, and nothing in between is kept.
        #[test]
        fn head_and_tail_match_the_data(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            cuts in proptest::collection::vec(1usize..80, 1..20),
            head_bytes in 0usize..100,
            tail_bytes in 0usize..100,
        ) {
            let limits = limits(head_bytes, tail_bytes, None, 0);
            let (mut head, mut tail) = (Vec::new(), VecDeque::new());
            let mut rest = &data[..];
            for size in cuts.iter().cycle().take(1000) {
                if rest.is_empty() {
                    break;
                }
                let (chunk, after) = rest.split_at((*size).min(rest.len()));
                keep_head_and_tail(chunk, &mut head, &mut tail, &limits);
                rest = after;
            }
            keep_head_and_tail(rest, &mut head, &mut tail, &limits);
            let head_len = head_bytes.min(data.len());
            let tail_start = head_len.max(data.len().saturating_sub(tail_bytes));
            proptest::prop_assert_eq!(&head[..], &data[..head_len]);
            proptest::prop_assert_eq!(tail.into_iter().collect::<Vec<_>>(), data[tail_start..].to_vec());
        }
    }

    #[tokio::test]
    async fn empty_stream_creates_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("io/stdout.log");
        let captured = capture(b"", limits(8, 8, Some(path.clone()), 100)).await;
        assert_eq!(captured.file, None);
        assert!(!path.exists());
    }

    #[tokio::test]
    async fn file_is_capped_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("io/stdout.log");
        let captured = capture(&[b'x'; 1000], limits(8, 8, Some(path.clone()), 100)).await;
        assert!(captured.file_truncated);
        let written = std::fs::read_to_string(&path).unwrap();
        assert!(written.starts_with(&"x".repeat(100)));
        assert!(written.contains("capped at 100 bytes; the stream produced 1000 bytes"));
        assert_eq!(captured.total_bytes, 1000);
    }

    /// A reader that returns its data in fixed-size pieces, so a secret straddles reads.
    struct Trickle<'a> {
        data: &'a [u8],
        piece: usize,
    }

    impl tokio::io::AsyncRead for Trickle<'_> {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let n = self.piece.min(self.data.len()).min(buf.remaining());
            buf.put_slice(&self.data[..n]);
            self.data = &self.data[n..];
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn secrets_straddling_reads_never_reach_the_file_but_stay_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stdout.log");
        let data = b"start canary-77 middle canary-77 end";
        let mut with_secrets = limits(1000, 0, Some(path.clone()), 1000);
        with_secrets.secrets = SecretSet::new([("call_1", "canary-77")]);
        for piece in [1, 3, 7, 64] {
            let reader = Trickle { data, piece };
            let captured =
                capture_stream(Some(reader), with_secrets.clone(), CancellationToken::new()).await;
            assert_eq!(captured.head, data, "the model's copy is the real text");
            let written = std::fs::read_to_string(&path).unwrap();
            let marker = crate::redact::marker("call_1");
            assert_eq!(
                written,
                format!("start {marker} middle {marker} end"),
                "pieces of {piece}"
            );
        }
    }

    #[tokio::test]
    async fn the_cap_counts_redacted_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stdout.log");
        let marker = crate::redact::marker("c");
        let cap = 2 + marker.len() as u64 + 12;
        let mut capped = limits(8, 8, Some(path.clone()), cap);
        capped.secrets = SecretSet::new([("c", "canary-77")]);
        let captured = capture(b"abcanary-77cdefghijklmnopqrstuvwxyz", capped).await;
        assert!(captured.file_truncated);
        let written = std::fs::read_to_string(&path).unwrap();
        assert!(
            written.starts_with(&format!(
                "ab{marker}cdefghijklmn\n[delta: output capped at {cap} bytes; the stream produced 35 bytes]"
            )),
            "{written}"
        );
    }

    /// A file an earlier process left under the stream's name is kept; the stream goes to a
    /// fresh name beside it, which the capture reports.
    #[tokio::test]
    async fn an_existing_output_file_is_never_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("20261125T000000.000Z_echo.stdout");
        std::fs::write(&path, "earlier").unwrap();
        let got = capture(b"new text", limits(64, 64, Some(path.clone()), 1024)).await;
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "earlier");
        let file = got.file.unwrap();
        assert_ne!(file, path);
        assert_eq!(file.parent(), path.parent());
        assert!(file.to_string_lossy().ends_with(".stdout"), "{file:?}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "new text");
    }

    #[tokio::test]
    async fn file_below_cap_is_complete() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stdout.log");
        let captured = capture(b"abc", limits(1, 1, Some(path.clone()), 100)).await;
        assert!(!captured.file_truncated);
        assert_eq!(std::fs::read(&path).unwrap(), b"abc");
    }

    /// The first output of a run makes its private folder (`io/tool_executions/`).
    #[tokio::test]
    async fn a_missing_output_folder_is_made_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("io/tool_executions");
        let path = folder.join("x.stdout");
        let captured = capture(b"text", limits(8, 8, Some(path.clone()), 100)).await;
        assert_eq!(captured.file.as_deref(), Some(path.as_path()));
        assert_eq!(std::fs::read(&path).unwrap(), b"text");
        let mode = std::fs::metadata(&folder).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    /// A short stream's file is written in one go when the stream ends (no file while it
    /// runs), private; a stream past [`SMALL_OUTPUT_BYTES`] has its file while it runs.
    #[tokio::test]
    async fn a_short_streams_file_is_written_when_it_ends_and_a_long_ones_while_it_runs() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        // The short stream goes through a one-byte pipe: once all but its last byte are
        // written, the capture has read them, and would have created its file by then.
        for (name, size, pipe_bytes, exists_while_running) in [
            ("short.stdout", 100, 1, false),
            ("long.stdout", SMALL_OUTPUT_BYTES + 1, 64 * 1024, true),
        ] {
            let path = dir.path().join(name);
            let (mut writer, reader) = tokio::io::duplex(pipe_bytes);
            let capturing = tokio::spawn(capture_stream(
                Some(reader),
                limits(10, 10, Some(path.clone()), u64::MAX),
                CancellationToken::new(),
            ));
            let data = vec![b'x'; size];
            writer.write_all(&data).await.unwrap();
            writer.flush().await.unwrap();
            if exists_while_running {
                // Written as it arrives: wait for it rather than for a fixed time.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) < size as u64 {
                    assert!(std::time::Instant::now() < deadline, "{name} never filled");
                    tokio::task::yield_now().await;
                }
            } else {
                assert!(!path.exists(), "{name} exists before the stream ended");
            }
            drop(writer);
            let captured = capturing.await.unwrap();
            assert_eq!(captured.file.as_deref(), Some(path.as_path()));
            assert_eq!(std::fs::read(&path).unwrap(), data, "{name}");
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{name}");
        }
    }

    #[tokio::test]
    async fn a_stream_longer_than_one_read_reaches_the_file_whole_and_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stdout.log");
        let data: Vec<u8> = (0..3 * READ_CHUNK_BYTES + 17)
            .map(|i| (i % 251) as u8)
            .collect();
        let (mut writer, reader) = tokio::io::duplex(4096);
        let feed = data.clone();
        let writing = tokio::spawn(async move { writer.write_all(&feed).await });
        let captured = capture_stream(
            Some(reader),
            limits(10, 10, Some(path.clone()), u64::MAX),
            CancellationToken::new(),
        )
        .await;
        writing.await.unwrap().unwrap();
        assert_eq!(captured.total_bytes, data.len() as u64);
        assert_eq!(captured.head, data[..10]);
        assert_eq!(captured.tail, data[data.len() - 10..]);
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }
}
