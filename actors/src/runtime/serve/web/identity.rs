//! Who this server is, so an open page never sends its token to another one: a per-start
//! pair of random values (`probe`, `proof`), and the page's start view.
//!
//! - `GET /api/identity` (with the token) is the page's login: it confirms the token (a
//!   token from a `/#token=` link is stored only once this answers 200) and hands the page
//!   the pair and the view to open on.
//! - `GET /api/identity/check` (no token; the probe in the `X-Delta-Probe` header) answers
//!   `{proof}` only to a caller that knows the probe. After any connection loss the page
//!   asks it before its token goes out again: a program that took the port after this
//!   server stopped knows neither value, answers anything else, and is sent no token.
//!
//! Why two values and not one: the check is public (it must be asked without the token), so
//! whatever it answers to anyone must not be what the page checks for. Only a caller that
//! logged in with the token learned the probe; the proof is answered only to it.
//!
//! Must not: answer the proof without the probe; derive either value from the token (the
//! check answers callers without it); keep them across starts (a restarted server is a new
//! one, and the page asks for its printed URL again).

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Serialize;

use super::rest::error_response;
use super::WebState;
use crate::token::{new_token, same_token};

/// The header that carries the probe to [`check`].
pub const PROBE_HEADER: &str = "x-delta-probe";
/// The public route of [`check`].
pub const CHECK_PATH: &str = "/api/identity/check";

/// This start's identity (see the module docs).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerIdentity {
    /// What the page sends to the check.
    probe: String,
    /// What the check answers to it.
    proof: String,
    /// The view a page opened without an address opens on: `runs` when the server was
    /// started with `-w` (its runs are why), `sessions` otherwise.
    start_view: &'static str,
}

impl ServerIdentity {
    /// A fresh identity; `shows_workspaces` when `-w` was given.
    pub fn new(shows_workspaces: bool) -> ServerIdentity {
        ServerIdentity {
            probe: new_token(),
            proof: new_token(),
            start_view: if shows_workspaces { "runs" } else { "sessions" },
        }
    }

    /// The proof, for a caller that sent the probe.
    fn answer(&self, probe: Option<&str>) -> Option<&str> {
        probe
            .filter(|given| same_token(given, &self.probe))
            .map(|_| self.proof.as_str())
    }
}

/// `GET /api/identity`: reached only with the token (the auth middleware saw to it).
pub async fn identity(state: web::Data<WebState>) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header(("Cache-Control", "no-store"))
        .json(&state.identity)
}

#[derive(Serialize)]
struct Proof<'a> {
    proof: &'a str,
}

/// `GET /api/identity/check`: public, answers the proof to the probe only.
pub async fn check(request: HttpRequest, state: web::Data<WebState>) -> HttpResponse {
    let probe = request
        .headers()
        .get(PROBE_HEADER)
        .and_then(|value| value.to_str().ok());
    match state.identity.answer(probe) {
        Some(proof) => HttpResponse::Ok()
            .insert_header(("Cache-Control", "no-store"))
            .json(Proof { proof }),
        None => error_response(
            StatusCode::UNAUTHORIZED,
            "unknown probe: this is not the delta serve the page logged in to; open the URL `delta serve` printed",
            "unknown_probe",
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_proof_is_answered_to_the_probe_only() {
        let identity = ServerIdentity::new(false);
        assert_eq!(
            identity.answer(Some(&identity.probe.clone())),
            Some(identity.proof.as_str())
        );
        assert_eq!(identity.answer(None), None);
        assert_eq!(identity.answer(Some("")), None);
        assert_eq!(identity.answer(Some(&identity.proof.clone())), None);
        let mut near = identity.probe.clone();
        near.pop();
        assert_eq!(identity.answer(Some(&near)), None);
    }

    #[test]
    fn each_start_is_a_new_identity_and_says_where_to_open() {
        let (a, b) = (ServerIdentity::new(true), ServerIdentity::new(false));
        assert_ne!(a.probe, b.probe);
        assert_ne!(a.proof, b.proof);
        assert_ne!(a.probe, a.proof);
        assert_eq!(a.start_view, "runs");
        assert_eq!(b.start_view, "sessions");
    }
}
