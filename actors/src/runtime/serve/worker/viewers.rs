//! A worker's viewers (WebSocket clients): each has an unbounded queue whose *bytes* are
//! bounded by a shared counter. A viewer whose queue is over the limit stops receiving output
//! and is sent one `Resync` marker; when its writer has drained everything before that marker,
//! it asks the worker for a fresh snapshot. So a slow viewer costs at most the limit in
//! memory and never stalls the PTY or the other viewers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytestring::ByteString;
use tokio::sync::mpsc;

/// Bytes a viewer may have queued before it is switched to a fresh snapshot.
pub const VIEWER_QUEUE_BYTES: usize = 2 * 1024 * 1024;

/// WebSocket close codes.
pub const CLOSE_STOPPED: u16 = 1000;
pub const CLOSE_RESTARTED: u16 = 4001;

#[derive(Debug)]
pub enum ViewerFrame {
    Text(ByteString),
    /// Everything before this was dropped-behind output: ask for a snapshot now.
    Resync,
    Close {
        code: u16,
        reason: &'static str,
    },
}

/// The sending end a WebSocket hands to its worker.
#[derive(Debug, Clone)]
pub struct ViewerQueue {
    pub frames: mpsc::UnboundedSender<ViewerFrame>,
    /// Bytes queued and not yet written to the socket (the writer subtracts).
    pub queued: Arc<AtomicUsize>,
}

impl ViewerQueue {
    pub fn new() -> (ViewerQueue, mpsc::UnboundedReceiver<ViewerFrame>) {
        let (frames, receiver) = mpsc::unbounded_channel();
        (
            ViewerQueue {
                frames,
                queued: Arc::new(AtomicUsize::new(0)),
            },
            receiver,
        )
    }

    /// Queues text regardless of the limit (snapshots); `false` when the viewer is gone.
    pub fn push(&self, text: ByteString) -> bool {
        self.queued.fetch_add(text.len(), Ordering::Relaxed);
        self.frames.send(ViewerFrame::Text(text)).is_ok()
    }

    /// The writer's side: `text` was written.
    pub fn written(queued: &AtomicUsize, text: &ByteString) {
        queued.fetch_sub(text.len(), Ordering::Relaxed);
    }
}

struct Viewer {
    queue: ViewerQueue,
    lagging: bool,
}

#[derive(Default)]
pub struct Viewers {
    next_id: u64,
    viewers: HashMap<u64, Viewer>,
}

impl Viewers {
    pub fn add(&mut self, queue: ViewerQueue) -> u64 {
        self.next_id += 1;
        self.viewers.insert(
            self.next_id,
            Viewer {
                queue,
                lagging: false,
            },
        );
        self.next_id
    }

    pub fn remove(&mut self, id: u64) {
        self.viewers.remove(&id);
    }

    pub fn is_empty(&self) -> bool {
        self.viewers.is_empty()
    }

    /// Sends `text` to every viewer that keeps up; switches the others to a resync.
    pub fn broadcast(&mut self, text: &ByteString) {
        self.viewers.retain(|_, viewer| {
            if viewer.lagging {
                return true;
            }
            if viewer.queue.queued.load(Ordering::Relaxed) + text.len() > VIEWER_QUEUE_BYTES {
                viewer.lagging = true;
                return viewer.queue.frames.send(ViewerFrame::Resync).is_ok();
            }
            viewer.queue.push(text.clone())
        });
    }

    /// A lagging viewer caught up: give it `snapshot` and output again.
    pub fn resync(&mut self, id: u64, snapshot: ByteString) {
        if let Some(viewer) = self.viewers.get_mut(&id) {
            viewer.lagging = false;
            if !viewer.queue.push(snapshot) {
                self.viewers.remove(&id);
            }
        }
    }

    /// Sends a close frame to every viewer and forgets them.
    pub fn close_all(&mut self, code: u16, reason: &'static str) {
        for (_, viewer) in self.viewers.drain() {
            let _ = viewer
                .queue
                .frames
                .send(ViewerFrame::Close { code, reason });
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_viewer_is_switched_to_resync_and_the_others_keep_receiving() {
        let mut viewers = Viewers::default();
        let (fast, mut fast_rx) = ViewerQueue::new();
        let (slow, mut slow_rx) = ViewerQueue::new();
        viewers.add(fast.clone());
        let slow_id = viewers.add(slow.clone());
        let chunk = ByteString::from("x".repeat(64 * 1024));
        let rounds = VIEWER_QUEUE_BYTES / chunk.len() + 5;
        for _ in 0..rounds {
            viewers.broadcast(&chunk);
            // The fast viewer's writer keeps up.
            while let Ok(ViewerFrame::Text(text)) = fast_rx.try_recv() {
                ViewerQueue::written(&fast.queued, &text);
            }
        }
        let mut texts = 0;
        let mut resync = false;
        while let Ok(frame) = slow_rx.try_recv() {
            match frame {
                ViewerFrame::Text(_) => texts += 1,
                ViewerFrame::Resync => resync = true,
                ViewerFrame::Close { .. } => panic!("not closed"),
            }
        }
        assert!(resync);
        assert_eq!(texts, VIEWER_QUEUE_BYTES / chunk.len());
        assert!(slow.queued.load(Ordering::Relaxed) <= VIEWER_QUEUE_BYTES);
        slow.queued.store(0, Ordering::Relaxed);
        viewers.resync(slow_id, ByteString::from("snapshot"));
        viewers.broadcast(&chunk);
        assert!(matches!(slow_rx.try_recv(), Ok(ViewerFrame::Text(t)) if t == "snapshot"));
        assert!(matches!(slow_rx.try_recv(), Ok(ViewerFrame::Text(_))));
    }
}
