//! The async side of the PTY holder protocol for `delta serve`: one-off requests, a
//! persistent control connection that keeps a worker's inputs and resizes in order, and the
//! raw `tail` stream of the holder's `output.log` from a byte offset. Blocking I/O never runs
//! on an arbiter here: everything is tokio.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::Stream;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

use crate::session::pty::protocol::{decode_frame, encode_frame, Request, Response, MAX_FRAME};

/// How long a holder has to answer a control request.
const REPLY_LIMIT: Duration = Duration::from_secs(5);
/// Largest read from the tail stream.
const TAIL_READ: usize = 64 * 1024;

async fn write_frame(
    stream: &mut (impl AsyncWriteExt + Unpin),
    request: &Request,
) -> io::Result<()> {
    stream.write_all(&encode_frame(request)?).await
}

async fn read_frame(input: &mut (impl AsyncBufReadExt + Unpin)) -> io::Result<Response> {
    let mut line = Vec::new();
    input.take(MAX_FRAME).read_until(b'\n', &mut line).await?;
    decode_frame(&line)?.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the holder closed the connection",
        )
    })
}

type Pending = (Request, Option<oneshot::Sender<io::Result<Response>>>);

/// A worker's ordered line to its holder: requests are sent one after the other on one
/// connection (reconnected when it breaks), so keystrokes never overtake each other.
#[derive(Clone)]
pub struct Control {
    queue: mpsc::UnboundedSender<Pending>,
}

impl Control {
    /// Spawns the connection task on the current runtime.
    pub fn spawn(socket: PathBuf) -> Control {
        let (queue, mut requests) = mpsc::unbounded_channel::<Pending>();
        tokio::spawn(async move {
            let mut connection: Option<(
                BufReader<tokio::net::unix::OwnedReadHalf>,
                tokio::net::unix::OwnedWriteHalf,
            )> = None;
            while let Some((request, reply)) = requests.recv().await {
                let exchange = async {
                    if connection.is_none() {
                        let (read, write) = UnixStream::connect(&socket).await?.into_split();
                        connection = Some((BufReader::new(read), write));
                    }
                    let Some((input, output)) = connection.as_mut() else {
                        return Err(io::Error::other("no connection"));
                    };
                    write_frame(output, &request).await?;
                    read_frame(input).await
                };
                let answer = match tokio::time::timeout(REPLY_LIMIT, exchange).await {
                    Ok(answer) => answer,
                    Err(_) => Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the holder did not answer",
                    )),
                };
                if answer.is_err() {
                    connection = None;
                }
                if let Some(reply) = reply {
                    let _ = reply.send(answer);
                }
            }
        });
        Control { queue }
    }

    /// Queues a request without waiting for its answer.
    pub fn send(&self, request: Request) {
        let _ = self.queue.send((request, None));
    }

    /// Queues a request and waits for its answer.
    pub async fn ask(&self, request: Request) -> io::Result<Response> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send((request, Some(reply)))
            .map_err(|_| io::Error::other("the worker's control line is closed"))?;
        answer
            .await
            .map_err(|_| io::Error::other("the worker's control line is closed"))?
    }
}

/// What the tail stream yields.
#[derive(Debug)]
pub enum TailItem {
    Bytes(Vec<u8>),
    /// The program exited and the whole log was sent.
    End,
    Failed(String),
}

/// An opened tail: where it starts, how long the log was then, and the bytes from `start` on.
pub struct Tail<S> {
    pub start: u64,
    pub logged: u64,
    pub items: S,
}

/// Opens a tail from `from` (at most `at_most` bytes back from the end).
pub async fn open_tail(
    socket: &Path,
    from: u64,
    at_most: Option<u64>,
) -> io::Result<Tail<impl Stream<Item = TailItem> + Unpin>> {
    let mut stream = UnixStream::connect(socket).await?;
    write_frame(&mut stream, &Request::Tail { from, at_most }).await?;
    let mut input = BufReader::with_capacity(TAIL_READ, stream);
    let (start, logged) = match tokio::time::timeout(REPLY_LIMIT, read_frame(&mut input)).await {
        Ok(Ok(Response::Tailing { from, logged })) => (from, logged),
        Ok(Ok(Response::Error { message })) => return Err(io::Error::other(message)),
        Ok(Ok(other)) => return Err(io::Error::other(format!("unexpected reply {other:?}"))),
        Ok(Err(e)) => return Err(e),
        Err(_) => {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the holder did not answer",
            ))
        }
    };
    let items = Box::pin(futures_util::stream::unfold(
        Some(input),
        |state| async move {
            let mut input = state?;
            let mut buffer = vec![0u8; TAIL_READ];
            match input.read(&mut buffer).await {
                Ok(0) => Some((TailItem::End, None)),
                Ok(read) => {
                    buffer.truncate(read);
                    Some((TailItem::Bytes(buffer), Some(input)))
                }
                Err(e) => Some((TailItem::Failed(e.to_string()), None)),
            }
        },
    ));
    Ok(Tail {
        start,
        logged,
        items,
    })
}
