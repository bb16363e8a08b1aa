//! `WorkerActor`: one per `delta serve` worker and epoch. It owns the worker's output as the
//! server sees it: the raw tail of the holder's `output.log` (read from a byte offset, so a
//! restarted server resumes where the holder is), the `vt100` screen, activity detection
//! (agent workers) and the bounded fan-out to viewers. The PTY itself lives in the holder
//! process, which outlives this actor and the server.
//!
//! Attach is atomic: the `Attach` handler queues the snapshot (with the offset the next
//! output starts at) and registers the viewer in one step of the mailbox, so every later
//! `output` continues from that offset without gap or duplicate.
//!
//! Must not: block (holder I/O is tokio), write `sessions.json` (the manager does).

pub mod link;
pub mod messages;
pub mod viewers;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use actix::prelude::*;
use bytestring::ByteString;
use futures_util::StreamExt;
use regex_lite::Regex;

use self::link::{Control, TailItem};
use self::messages::{ServerMessage, WorkerNotice, WorkerNoticeKind};
use self::viewers::{ViewerFrame, ViewerQueue, Viewers, CLOSE_RESTARTED, CLOSE_STOPPED};
use crate::serve::activity::{ActivityConfig, ActivityDetector, ActivityState};
use crate::serve::screen::{WorkerScreen, TAIL_CAPACITY};
use crate::serve::ServeError;
use crate::session::pty::protocol::{Request, Response};
use crate::session::pty::TerminalSize;

/// How long the holder may take to reap a program whose output has ended.
const EXIT_SETTLE: Duration = Duration::from_secs(3);
/// How often agent workers judge silence.
const ACTIVITY_TICK: Duration = Duration::from_millis(250);

/// Where a worker's output comes from.
#[derive(Debug, Clone)]
pub enum WorkerSource {
    /// A running holder: tail its log from `from`, at most `at_most` bytes back.
    Live {
        socket: PathBuf,
        from: u64,
        at_most: Option<u64>,
    },
    /// The program exited while nobody watched: show the end of its log.
    Finished {
        log: PathBuf,
        exit_code: Option<i32>,
    },
}

pub struct WorkerSpec {
    pub session_id: String,
    pub worker_id: String,
    pub epoch: u32,
    pub source: WorkerSource,
    pub size: TerminalSize,
    /// Asking patterns; `Some` turns activity detection on (agent workers).
    pub patterns: Option<Vec<Regex>>,
    /// Text shown before this epoch's output (an earlier epoch's end and the seam).
    pub prelude: String,
    pub notices: Recipient<WorkerNotice>,
}

pub struct WorkerActor {
    /// Who the worker is and how it starts (ids, argv, holder socket, size). Set in `new`; read only.
    spec: WorkerSpec,
    /// The terminal screen rebuilt from the holder's output, for viewers that attach later;
    /// fed by each output frame, resized on viewer resize.
    screen: WorkerScreen,
    /// The pages attached to this worker's terminal; added on attach, dropped when they go.
    viewers: Viewers,
    /// The control connection to the PTY holder; set once the holder is reached, `None` before.
    control: Option<Control>,
    /// Detects working/waiting from output when the agent has patterns; cleared when the worker exits.
    activity: Option<ActivityDetector>,
    /// The last change, for viewers that attach later.
    last_activity: Option<(ActivityState, crate::serve::activity::ActivitySource)>,
    /// Set when the worker's program exits (with its exit code, if any); `None` while it runs.
    exited: Option<Option<i32>>,
    /// Set by `StopWorker`, so the holder's ending that follows is not reported as an exit.
    stopping: bool,
}

impl WorkerActor {
    pub fn new(spec: WorkerSpec) -> WorkerActor {
        let mut screen = WorkerScreen::new(spec.size.rows, spec.size.cols, 0);
        screen.set_prelude(&spec.prelude);
        let activity = spec
            .patterns
            .as_ref()
            .map(|_| ActivityDetector::new(ActivityConfig::default()));
        WorkerActor {
            spec,
            screen,
            viewers: Viewers::default(),
            control: None,
            activity,
            last_activity: None,
            exited: None,
            stopping: false,
        }
    }

    fn notify(&self, kind: WorkerNoticeKind) {
        self.spec.notices.do_send(WorkerNotice {
            session_id: self.spec.session_id.clone(),
            worker_id: self.spec.worker_id.clone(),
            epoch: self.spec.epoch,
            kind,
        });
    }

    fn encode(message: &ServerMessage<'_>) -> ByteString {
        ByteString::from(serde_json::to_string(message).unwrap_or_default())
    }

    fn snapshot_frame(&mut self) -> ByteString {
        let snapshot = self.screen.snapshot();
        Self::encode(&ServerMessage::History {
            data: &snapshot.data,
            offset: snapshot.offset,
            epoch: self.spec.epoch,
            kind: snapshot.kind,
        })
    }

    fn exit_frame(&self, exit_code: Option<i32>) -> ByteString {
        Self::encode(&ServerMessage::Exit {
            exit_code,
            signal: None,
            epoch: self.spec.epoch,
        })
    }

    fn take_output(&mut self, bytes: &[u8]) {
        let Some(chunk) = self.screen.push(bytes) else {
            return;
        };
        if let Some(change) = self
            .activity
            .as_mut()
            .and_then(|a| a.on_output(Instant::now()))
        {
            self.activity_changed(change);
        }
        if self.viewers.is_empty() {
            return;
        }
        let frame = Self::encode(&ServerMessage::Output {
            data: &chunk.data,
            offset: chunk.offset,
            end: chunk.end,
            epoch: self.spec.epoch,
        });
        self.viewers.broadcast(&frame);
    }

    fn activity_changed(
        &mut self,
        (state, source): (ActivityState, crate::serve::activity::ActivitySource),
    ) {
        self.last_activity = Some((state, source));
        let frame = Self::encode(&ServerMessage::Activity { state, source });
        self.viewers.broadcast(&frame);
        self.notify(WorkerNoticeKind::Activity { state, source });
    }

    fn finish(&mut self, exit_code: Option<i32>) {
        self.exited = Some(exit_code);
        // An exited program is neither active nor asking: detection stops here.
        self.activity = None;
        self.last_activity = None;
        let frame = self.exit_frame(exit_code);
        self.viewers.broadcast(&frame);
        self.viewers.close_all(CLOSE_STOPPED, "the program exited");
    }

    fn start_live(
        &mut self,
        ctx: &mut Context<Self>,
        socket: PathBuf,
        from: u64,
        at_most: Option<u64>,
    ) {
        self.control = Some(Control::spawn(socket.clone()));
        // The log already written when the tail opens is read before any viewer is let in,
        // so the first snapshot after a server restart already shows the history.
        let opening = async move {
            let tail = link::open_tail(&socket, from, at_most).await?;
            let mut items = tail.items;
            let mut backlog = Vec::new();
            let mut ended = None;
            while (backlog.len() as u64) < tail.logged.saturating_sub(tail.start) {
                match items.next().await {
                    Some(TailItem::Bytes(bytes)) => backlog.extend_from_slice(&bytes),
                    Some(other) => {
                        ended = Some(other);
                        break;
                    }
                    None => break,
                }
            }
            let rest = futures_util::stream::iter(ended).chain(items);
            Ok::<_, std::io::Error>((tail.start, backlog, rest))
        };
        ctx.wait(opening.into_actor(self).map(|opened, actor, ctx| match opened {
            Ok((start, backlog, rest)) => {
                if start > 0 && start == actor.screen.end() {
                    // A reopened tail continues this screen; unfinished bytes come again.
                    actor.screen.drop_pending();
                } else {
                    let prelude = actor.screen.prelude().to_string();
                    actor.screen =
                        WorkerScreen::new(actor.spec.size.rows, actor.spec.size.cols, start);
                    actor.screen.set_prelude(&prelude);
                }
                actor.take_output(&backlog);
                ctx.add_stream(rest);
            }
            Err(e) => {
                tracing::warn!(worker = %actor.spec.worker_id, "cannot tail the holder: {e}");
                actor.notify(WorkerNoticeKind::HolderLost);
            }
        }));
    }

    fn start_finished(&mut self, log: PathBuf, exit_code: Option<i32>) {
        if let Ok(bytes) = read_end(&log, TAIL_CAPACITY as u64) {
            self.screen.push(&bytes);
        }
        self.exited = Some(exit_code);
    }
}

/// Why a tail stream ended.
enum TailEnd {
    Exited(Option<i32>),
    /// The holder does not answer.
    Lost,
    /// The holder still says the program runs (the tail broke for another reason).
    StillRunning,
}

/// Asks the holder why the tail ended. The log ends when the PTY is closed, a moment before
/// the holder has reaped the program, so "alive" is asked again for up to [`EXIT_SETTLE`].
async fn ending(control: &Control) -> TailEnd {
    let deadline = tokio::time::Instant::now() + EXIT_SETTLE;
    loop {
        match control.ask(Request::Ping).await {
            Ok(Response::Pong {
                alive: false,
                exit_code,
                ..
            }) => return TailEnd::Exited(exit_code),
            Ok(Response::Pong { alive: true, .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(Response::Pong { alive: true, .. }) => return TailEnd::StillRunning,
            _ => return TailEnd::Lost,
        }
    }
}

/// The last `limit` bytes of a file.
fn read_end(path: &std::path::Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = crate::bounded_read::open(path, crate::bounded_read::Links::Refuse)?;
    let length = file.metadata()?.len();
    file.seek(SeekFrom::Start(length.saturating_sub(limit)))?;
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes)?;
    Ok(bytes)
}

impl Actor for WorkerActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        match self.spec.source.clone() {
            WorkerSource::Live {
                socket,
                from,
                at_most,
            } => self.start_live(ctx, socket, from, at_most),
            WorkerSource::Finished { log, exit_code } => self.start_finished(log, exit_code),
        }
        if self.activity.is_some() {
            ctx.run_interval(ACTIVITY_TICK, |actor, _| {
                let patterns = actor.spec.patterns.as_deref().unwrap_or(&[]);
                let screen = &mut actor.screen;
                let change = actor
                    .activity
                    .as_mut()
                    .and_then(|a| a.on_tick(Instant::now(), patterns, || screen.bottom_rows()));
                if let Some(change) = change {
                    actor.activity_changed(change);
                }
            });
        }
    }
}

impl StreamHandler<TailItem> for WorkerActor {
    fn handle(&mut self, item: TailItem, ctx: &mut Self::Context) {
        match item {
            TailItem::Bytes(bytes) => self.take_output(&bytes),
            TailItem::End | TailItem::Failed(_) => {
                if let TailItem::Failed(reason) = &item {
                    // The holder is asked below whether the program ended or it is gone.
                    tracing::debug!(worker = %self.spec.worker_id, "tail of the holder's log broke: {reason}");
                }
                let Some(control) = self.control.clone() else {
                    return;
                };
                let asking = async move { ending(&control).await };
                ctx.spawn(asking.into_actor(self).map(|end, actor, ctx| {
                    if actor.stopping {
                        return;
                    }
                    match end {
                        TailEnd::Exited(exit_code) => {
                            actor.finish(exit_code);
                            actor.notify(WorkerNoticeKind::Exited { exit_code });
                        }
                        TailEnd::Lost => actor.notify(WorkerNoticeKind::HolderLost),
                        TailEnd::StillRunning => {
                            let WorkerSource::Live { socket, .. } = actor.spec.source.clone() else {
                                return;
                            };
                            tracing::warn!(worker = %actor.spec.worker_id, "the tail ended while the program runs; reopening it");
                            let from = actor.screen.end();
                            actor.start_live(ctx, socket, from, None);
                        }
                    }
                }));
            }
        }
    }

    fn finished(&mut self, _: &mut Self::Context) {}
}

/// Registers a viewer; its first frame is the snapshot.
#[derive(Message)]
#[rtype(result = "u64")]
pub struct Attach(pub ViewerQueue);

impl Handler<Attach> for WorkerActor {
    type Result = u64;

    fn handle(&mut self, Attach(queue): Attach, _: &mut Self::Context) -> u64 {
        queue.push(self.snapshot_frame());
        if let Some((state, source)) = self.last_activity {
            queue.push(Self::encode(&ServerMessage::Activity { state, source }));
        }
        if let Some(exit_code) = self.exited {
            queue.push(self.exit_frame(exit_code));
            let _ = queue.frames.send(ViewerFrame::Close {
                code: CLOSE_STOPPED,
                reason: "the program exited",
            });
            return 0;
        }
        self.viewers.add(queue)
    }
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct Detach(pub u64);

impl Handler<Detach> for WorkerActor {
    type Result = ();
    fn handle(&mut self, Detach(id): Detach, _: &mut Self::Context) {
        self.viewers.remove(id);
    }
}

/// A lagging viewer drained its queue and wants a fresh snapshot.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Resync(pub u64);

impl Handler<Resync> for WorkerActor {
    type Result = ();
    fn handle(&mut self, Resync(id): Resync, _: &mut Self::Context) {
        let snapshot = self.snapshot_frame();
        self.viewers.resync(id, snapshot);
    }
}

/// Text for the program (keystrokes, a pasted block, an orchestrator's answer).
#[derive(Message)]
#[rtype(result = "Result<(), ServeError>")]
pub struct Input(pub String);

impl Handler<Input> for WorkerActor {
    type Result = ResponseFuture<Result<(), ServeError>>;

    fn handle(&mut self, Input(text): Input, _: &mut Self::Context) -> Self::Result {
        if let Some(activity) = self.activity.as_mut() {
            activity.on_input(Instant::now());
        }
        let control = match (&self.control, self.exited) {
            (Some(control), None) => control.clone(),
            _ => {
                return Box::pin(async {
                    Err(ServeError::Conflict(
                        "the worker's program has exited; restart it first".into(),
                    ))
                })
            }
        };
        Box::pin(async move {
            match control
                .ask(Request::Write {
                    data: text.into_bytes(),
                })
                .await
            {
                Ok(Response::Written { .. }) => Ok(()),
                Ok(Response::Dead) => Err(ServeError::Conflict(
                    "the worker's program has exited".into(),
                )),
                Ok(other) => Err(ServeError::Worker(format!("the holder answered {other:?}"))),
                Err(e) => Err(ServeError::Worker(format!(
                    "cannot reach the worker's holder: {e}"
                ))),
            }
        })
    }
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct Resize {
    pub cols: u16,
    pub rows: u16,
}

impl Handler<Resize> for WorkerActor {
    type Result = ();
    fn handle(&mut self, Resize { cols, rows }: Resize, _: &mut Self::Context) {
        self.spec.size = TerminalSize { cols, rows };
        self.screen.resize(rows, cols);
        if let Some(control) = &self.control {
            control.send(Request::Resize { cols, rows });
        }
    }
}

/// Why a worker actor stops: its viewers get close code 1000 (stopped) or 4001 (restarted).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopWorker {
    pub restarted: bool,
}

impl Handler<StopWorker> for WorkerActor {
    type Result = ();
    fn handle(&mut self, stop: StopWorker, ctx: &mut Self::Context) {
        self.stopping = true;
        if stop.restarted {
            self.viewers
                .close_all(CLOSE_RESTARTED, "the worker restarted");
        } else {
            self.viewers
                .close_all(CLOSE_STOPPED, "the worker was deleted");
        }
        ctx.stop();
    }
}

/// The end of this epoch's screen as plain text, to carry into the next epoch.
#[derive(Message)]
#[rtype(result = "String")]
pub struct History;

impl Handler<History> for WorkerActor {
    type Result = String;
    fn handle(&mut self, _: History, _: &mut Self::Context) -> String {
        self.screen.snapshot_text()
    }
}
