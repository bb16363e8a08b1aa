//! Reading a relay request's body within [`RelayLimits`]: a declared size over the cap is
//! answered 413 before a byte is read; otherwise the body's share of the memory for bodies is
//! reserved first (its declared size, or the cap when undeclared), so a caller past that
//! memory waits with its body unread (held back by TCP) instead of filling the relay. The
//! whole body must arrive within [`BODY_DEADLINE`].
//!
//! Why reserve before reading: reserving chunk by chunk lets two half-read bodies each wait
//! for memory the other holds. Reserving the whole share at once cannot deadlock, since no
//! share exceeds the total (checked by `RelayConfig::validate`).
//!
//! Must not: read a body before the caller is authenticated (the route checks first), or log it.

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::refuse;
use crate::relay::RelayLimits;

/// The longest a caller may take to send its body.
pub(super) const BODY_DEADLINE: Duration = Duration::from_secs(60);

/// The memory for bodies is counted in units of this many bytes.
const UNIT: usize = 1024;

/// The memory for request bodies, all callers together.
pub(super) struct BodyMemory {
    units: Arc<Semaphore>,
    limits: RelayLimits,
}

impl BodyMemory {
    pub(super) fn new(limits: RelayLimits) -> Self {
        BodyMemory {
            units: Arc::new(Semaphore::new(units(limits.max_body_memory))),
            limits,
        }
    }
}

/// A body's share of the memory, given back when dropped.
pub(super) struct BodyShare {
    _units: OwnedSemaphorePermit,
}

fn units(bytes: usize) -> usize {
    bytes.div_ceil(UNIT).max(1)
}

/// The caller's body, or the answer to give it instead.
pub(super) async fn read(
    request: &HttpRequest,
    mut payload: web::Payload,
    memory: &BodyMemory,
) -> Result<(Bytes, BodyShare), HttpResponse> {
    let max_body = memory.limits.max_body;
    let too_large = || {
        refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "request body larger than the relay's limit of {max_body} bytes (hint: the \
                 relay's --max-body raises it)"
            ),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    if declared.is_some_and(|len| len > max_body) {
        return Err(too_large());
    }
    let reserved = units(declared.unwrap_or(max_body));
    let mut share = Arc::clone(&memory.units)
        .acquire_many_owned(u32::try_from(reserved).unwrap_or(u32::MAX))
        .await
        .map_err(|_| refuse(StatusCode::SERVICE_UNAVAILABLE, "the relay is stopping"))?;
    let reading = async {
        let mut body = BytesMut::with_capacity(declared.unwrap_or(0));
        while let Some(chunk) = payload.next().await {
            let chunk = chunk.map_err(|e| {
                refuse(
                    StatusCode::BAD_REQUEST,
                    &format!("cannot read the request body: {e}"),
                )
            })?;
            if body.len() + chunk.len() > max_body {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body.freeze())
    };
    let body = tokio::time::timeout(BODY_DEADLINE, reading)
        .await
        .map_err(|_| {
            refuse(
                StatusCode::REQUEST_TIMEOUT,
                &format!(
                    "the request body did not arrive within {} s",
                    BODY_DEADLINE.as_secs()
                ),
            )
        })??;
    // An undeclared length reserved the cap: give back what the body did not use.
    let used = units(body.len());
    if used < reserved {
        drop(share.split(reserved - used));
    }
    Ok((body, BodyShare { _units: share }))
}
