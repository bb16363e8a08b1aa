//! `GET /ws/dashboard`: the server-wide feed. The first frame is a full `sync` (schema
//! version, sessions, workspaces); then every dashboard event as it happens. A subscriber
//! that falls behind the broadcast backlog is sent a full `sync` again instead.

use actix_web::{web, HttpRequest, HttpResponse};
use actix_ws::Message;
use futures_util::StreamExt;
use tokio::sync::broadcast::error::RecvError;

use super::rest::error_response;
use super::WebState;
use crate::runtime::serve::events::DashboardSync;
use crate::runtime::serve::messages::SubscribeDashboard;
use crate::runtime::serve::watcher::Views;

async fn full_sync(
    state: &WebState,
) -> Option<(
    String,
    tokio::sync::broadcast::Receiver<crate::runtime::serve::events::DashboardEvent>,
)> {
    let (mut sync, events): (DashboardSync, _) =
        state.manager.send(SubscribeDashboard).await.ok()?;
    sync.workspaces = state.watcher.send(Views).await.unwrap_or_default();
    Some((serde_json::to_string(&sync).ok()?, events))
}

pub async fn dashboard_socket(
    request: HttpRequest,
    body: web::Payload,
    state: web::Data<WebState>,
) -> HttpResponse {
    let Some((first, mut events)) = full_sync(&state).await else {
        return error_response(
            actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
            "the server is stopping",
            "unavailable",
        );
    };
    let (response, mut session, stream) = match super::ws::upgrade(&request, body) {
        Ok(parts) => parts,
        Err(refused) => return *refused,
    };
    let state = state.into_inner();
    actix_web::rt::spawn(async move {
        let mut stream = stream.max_frame_size(64 * 1024);
        if session.text(first).await.is_err() {
            return;
        }
        // The client's Close, answered with its own code.
        let mut answer = None;
        loop {
            tokio::select! {
                event = events.recv() => {
                    let text = match event {
                        Ok(event) => serde_json::to_string(&event).unwrap_or_default(),
                        Err(RecvError::Lagged(_)) => match full_sync(&state).await {
                            Some((text, fresh)) => { events = fresh; text }
                            None => break,
                        },
                        Err(RecvError::Closed) => break,
                    };
                    if session.text(text).await.is_err() {
                        break;
                    }
                }
                message = stream.next() => match message {
                    Some(Ok(Message::Ping(bytes))) => {
                        if session.pong(&bytes).await.is_err() { break; }
                    }
                    Some(Ok(Message::Close(reason))) => {
                        answer = reason;
                        break;
                    }
                    None | Some(Err(_)) => break,
                    Some(Ok(_)) => {}
                },
            }
        }
        let _ = session.close(answer).await;
    });
    response
}
