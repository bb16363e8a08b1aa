//! `GET /ws/session/{sessionId}/worker/{workerId}`: one viewer of a worker. Client messages
//! `input`, `resize`, `image`; the first server message is the snapshot (`history` with its
//! offset), then `output`, `activity`, `exit`. The writer forwards the worker's frames in
//! order; when the worker marks it lagging it asks for a fresh snapshot once its queue is
//! drained. Close codes: 1000 stopped (do not reconnect), 4001 restarted (reconnect); a
//! client's Close is answered at once with its own code.

use std::path::PathBuf;

use actix::Addr;
use actix_web::{web, HttpRequest, HttpResponse};
use actix_ws::{CloseCode, CloseReason, Message};
use base64::Engine;
use futures_util::StreamExt;
use serde::Deserialize;

use super::rest::{error_response, serve_error};
use super::WebState;
use crate::runtime::serve::messages::FindWorker;
use crate::runtime::serve::worker::messages::ServerMessage;
use crate::runtime::serve::worker::viewers::{ViewerFrame, ViewerQueue};
use crate::runtime::serve::worker::{Attach, Detach, Input, Resize, Resync, WorkerActor};

/// Largest client frame (an image message carries base64).
pub const MAX_CLIENT_FRAME: usize = 16 * 1024 * 1024;
/// Largest decoded image.
pub const MAX_IMAGE_BYTES: usize = 10 * 1024 * 1024;
/// Largest `input` text per message.
pub const MAX_WS_INPUT: usize = 64 * 1024;
pub const MAX_COLS: u16 = 1000;
pub const MAX_ROWS: u16 = 500;

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum ClientMessage {
    Input {
        data: String,
    },
    Resize {
        cols: u16,
        rows: u16,
    },
    #[serde(rename_all = "camelCase")]
    Image {
        data: String,
        mime_type: String,
    },
}

/// Upgrades `request` to a WebSocket answered with the page's subprotocol (the token, which
/// came in the offered ones, is never echoed), or the 400 to send instead.
pub(super) fn upgrade(
    request: &HttpRequest,
    body: web::Payload,
) -> Result<(HttpResponse, actix_ws::Session, actix_ws::MessageStream), Box<HttpResponse>> {
    let (mut response, session, stream) = actix_ws::handle(request, body).map_err(|e| {
        Box::new(error_response(
            actix_web::http::StatusCode::BAD_REQUEST,
            &format!("not a WebSocket upgrade: {e}"),
            "bad_upgrade",
        ))
    })?;
    super::auth::accept_subprotocol(request, &mut response);
    Ok((response, session, stream))
}

fn error_frame(error: &str, code: &str) -> String {
    serde_json::to_string(&ServerMessage::Error { error, code }).unwrap_or_default()
}

pub async fn worker_socket(
    request: HttpRequest,
    body: web::Payload,
    path: web::Path<(String, String)>,
    state: web::Data<WebState>,
) -> HttpResponse {
    let (session_id, worker_id) = path.into_inner();
    let worker = match state
        .manager
        .send(FindWorker {
            session_id,
            worker_id,
        })
        .await
    {
        Ok(Ok(worker)) => worker,
        Ok(Err(e)) => return serve_error(&e),
        Err(e) => {
            return error_response(
                actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
                &e.to_string(),
                "unavailable",
            )
        }
    };
    let (response, session, stream) = match upgrade(&request, body) {
        Ok(parts) => parts,
        Err(refused) => return *refused,
    };
    let (queue, frames) = ViewerQueue::new();
    let queued = queue.queued.clone();
    let Ok(viewer) = worker.send(Attach(queue)).await else {
        let _ = session
            .close(Some(CloseReason {
                code: CloseCode::Away,
                description: Some("the worker stopped".into()),
            }))
            .await;
        return response;
    };
    actix_web::rt::spawn(write_frames(
        session.clone(),
        frames,
        queued,
        worker.clone(),
        viewer,
    ));
    let images = state.images_dir.clone();
    actix_web::rt::spawn(read_messages(
        session,
        stream.max_frame_size(MAX_CLIENT_FRAME),
        worker,
        viewer,
        images,
    ));
    response
}

async fn write_frames(
    mut session: actix_ws::Session,
    mut frames: tokio::sync::mpsc::UnboundedReceiver<ViewerFrame>,
    queued: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    worker: Addr<WorkerActor>,
    viewer: u64,
) {
    while let Some(frame) = frames.recv().await {
        match frame {
            ViewerFrame::Text(text) => {
                ViewerQueue::written(&queued, &text);
                if session.text(text).await.is_err() {
                    break;
                }
            }
            ViewerFrame::Resync => worker.do_send(Resync(viewer)),
            ViewerFrame::Close { code, reason } => {
                let reason = CloseReason {
                    code: CloseCode::Other(code),
                    description: Some(reason.into()),
                };
                let reason = if code == 1000 {
                    CloseReason {
                        code: CloseCode::Normal,
                        ..reason
                    }
                } else {
                    reason
                };
                let _ = session.close(Some(reason)).await;
                return;
            }
        }
    }
    worker.do_send(Detach(viewer));
    let _ = session.close(None).await;
}

async fn read_messages(
    mut session: actix_ws::Session,
    mut stream: actix_ws::MessageStream,
    worker: Addr<WorkerActor>,
    viewer: u64,
    images: PathBuf,
) {
    while let Some(Ok(message)) = stream.next().await {
        match message {
            Message::Text(text) => {
                let reply = match serde_json::from_str::<ClientMessage>(&text) {
                    Ok(message) => handle(message, &worker, &images).await,
                    Err(e) => Some(error_frame(
                        &format!("invalid message: {e}; expected {{\"type\": \"input\"|\"resize\"|\"image\", ...}}"),
                        "bad_message",
                    )),
                };
                if let Some(reply) = reply {
                    if session.text(reply).await.is_err() {
                        break;
                    }
                }
            }
            Message::Ping(bytes) if session.pong(&bytes).await.is_err() => break,
            Message::Close(reason) => {
                // Answer the closing handshake at once, echoing the client's code.
                let _ = session.close(reason).await;
                worker.do_send(Detach(viewer));
                return;
            }
            _ => {}
        }
    }
    worker.do_send(Detach(viewer));
}

async fn handle(
    message: ClientMessage,
    worker: &Addr<WorkerActor>,
    images: &std::path::Path,
) -> Option<String> {
    match message {
        ClientMessage::Input { data } => {
            if data.len() > MAX_WS_INPUT {
                return Some(error_frame(
                    &format!("input is {} bytes, more than {MAX_WS_INPUT}", data.len()),
                    "too_large",
                ));
            }
            match worker.send(Input(data)).await {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(error_frame(&e.to_string(), e.code())),
                Err(_) => Some(error_frame("the worker stopped", "stopped")),
            }
        }
        ClientMessage::Resize { cols, rows } => {
            if !(2..=MAX_COLS).contains(&cols) || !(2..=MAX_ROWS).contains(&rows) {
                return Some(error_frame(
                    &format!("resize {cols}x{rows} is out of bounds (cols 2-{MAX_COLS}, rows 2-{MAX_ROWS})"),
                    "bad_resize",
                ));
            }
            // Awaited, not fire-and-forget: a client spamming resizes waits for each one, so
            // the worker's mailbox holds at most one per viewer instead of growing unbounded.
            match worker.send(Resize { cols, rows }).await {
                Ok(_) => None,
                Err(_) => Some(error_frame("the worker stopped", "stopped")),
            }
        }
        ClientMessage::Image { data, mime_type } => match save_image(images, &data, &mime_type) {
            // The agent reads the picture from the path typed into its prompt.
            Ok(path) => match worker.send(Input(format!("{} ", path.display()))).await {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(error_frame(&e.to_string(), e.code())),
                Err(_) => Some(error_frame("the worker stopped", "stopped")),
            },
            Err((error, code)) => Some(error_frame(&error, code)),
        },
    }
}

/// Decodes a pasted image into `<state>/images/<uuid>.<ext>` (0600).
fn save_image(
    dir: &std::path::Path,
    data: &str,
    mime_type: &str,
) -> Result<PathBuf, (String, &'static str)> {
    let extension = match mime_type {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        other => return Err((format!("unsupported image type `{other}`; use image/png, image/jpeg, image/gif or image/webp"), "bad_image")),
    };
    if data.len() > MAX_IMAGE_BYTES * 4 / 3 + 4 {
        return Err((
            format!("image is larger than {MAX_IMAGE_BYTES} bytes"),
            "too_large",
        ));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| (format!("image data is not base64: {e}"), "bad_image"))?;
    crate::session::files::create_private_dir(dir).map_err(|e| (e.to_string(), "io"))?;
    let path = dir.join(format!("{}.{extension}", uuid::Uuid::new_v4().simple()));
    crate::session::files::replace_private(&path, &bytes).map_err(|e| (e.to_string(), "io"))?;
    Ok(path)
}
