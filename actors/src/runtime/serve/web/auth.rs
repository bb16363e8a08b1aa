//! Who may talk to `delta serve`. Every API request and WebSocket carries the server's token:
//! - REST (the page and scripts): `Authorization: Bearer <token>`;
//! - WebSockets from the page (a browser cannot set headers on them): the subprotocol
//!   `delta.token.<token in lower-case hex>` offered beside [`SUBPROTOCOL`]. The server
//!   answers with [`SUBPROTOCOL`] alone, so the token is never echoed. Hex because a
//!   subprotocol must be an HTTP token and a fixed token may hold `/`, `:` or `@`. Scripts may
//!   send `Authorization` on the upgrade instead.
//!
//! Authentication happens before the upgrade, in the same check as REST, so an
//! unauthenticated client never holds a socket (a first message within a deadline would).
//!
//! The page itself (`/`, `/assets/...`) is public: it holds no data. It takes the token from
//! the URL's fragment (`/#token=...`, never sent to a server) into `localStorage` once the
//! server confirmed it. So is the identity check ([`super::identity`]), which the page asks
//! without its token to learn whether this is still the server it logged in to.
//!
//! Must not: accept a token from a cookie or a query string. Cookies are scoped by host, not
//! port, so every other server on 127.0.0.1 the user opens would receive one; a query string
//! is logged and was an open redirect (`//host/?token=`). Requests with an `Origin` from
//! another site are refused, token or not.

use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpRequest, HttpResponse};

use crate::token::{same_bytes, same_token};

/// The subprotocol the page speaks, and the only one the server ever answers with.
pub const SUBPROTOCOL: &str = "delta.v1";
/// The prefix of the subprotocol that carries the token (hex-encoded) on a WebSocket upgrade.
pub const TOKEN_SUBPROTOCOL_PREFIX: &str = "delta.token.";

/// What to do with a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    Unauthorized,
    ForeignOrigin,
}

fn bearer(request: &HttpRequest) -> Option<&str> {
    request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
}

/// Every subprotocol the client offered (`Sec-WebSocket-Protocol` may repeat and lists
/// comma-separated values).
fn offered_subprotocols(request: &HttpRequest) -> impl Iterator<Item = &str> {
    request
        .headers()
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The token as the page offers it on a WebSocket upgrade.
fn subprotocol_token(request: &HttpRequest, token: &str) -> bool {
    offered_subprotocols(request)
        .filter_map(|protocol| protocol.strip_prefix(TOKEN_SUBPROTOCOL_PREFIX))
        .filter_map(decode_hex)
        .any(|given| same_bytes(&given, token.as_bytes()))
}

/// An `Origin` that is not this server's own (scheme-less host:port compare with `Host`).
fn foreign_origin(request: &HttpRequest) -> bool {
    let Some(origin) = request
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
    else {
        return false;
    };
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .unwrap_or("");
    host.is_empty() || origin_host != host
}

/// The page and its scripts: served to anyone, they hold no data (the token arrives in the
/// URL's fragment, which the browser never sends); and the identity check, which answers
/// only a caller that knows the probe.
fn is_public(path: &str) -> bool {
    path == "/" || path.starts_with("/assets/") || path == super::identity::CHECK_PATH
}

pub fn judge(request: &HttpRequest, token: &str) -> Verdict {
    if foreign_origin(request) {
        return Verdict::ForeignOrigin;
    }
    if is_public(request.path())
        || bearer(request).is_some_and(|given| same_token(given, token))
        || subprotocol_token(request, token)
    {
        return Verdict::Allowed;
    }
    Verdict::Unauthorized
}

/// Answers a WebSocket upgrade with [`SUBPROTOCOL`] when the client offered it (a browser
/// that offered subprotocols fails the connection unless the server picks one); never with
/// the token's own subprotocol.
pub fn accept_subprotocol(request: &HttpRequest, response: &mut HttpResponse) {
    if offered_subprotocols(request).any(|protocol| protocol == SUBPROTOCOL) {
        response.headers_mut().insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static(SUBPROTOCOL),
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    fn hex(text: &str) -> String {
        text.bytes().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn bearer_and_subprotocol_tokens_are_accepted() {
        let token = "abc/123:@x";
        let request = TestRequest::with_uri("/api/sessions")
            .insert_header((header::AUTHORIZATION, "Bearer abc/123:@x"))
            .to_http_request();
        assert_eq!(judge(&request, token), Verdict::Allowed);
        let offered = format!("{SUBPROTOCOL}, {TOKEN_SUBPROTOCOL_PREFIX}{}", hex(token));
        let request = TestRequest::with_uri("/ws/dashboard")
            .insert_header((header::SEC_WEBSOCKET_PROTOCOL, offered))
            .to_http_request();
        assert_eq!(judge(&request, token), Verdict::Allowed);
        for wrong in [
            hex("abc/123:@"),
            hex("abc/123:@xy"),
            "zz".into(),
            "abc".into(),
        ] {
            let offered = format!("{SUBPROTOCOL}, {TOKEN_SUBPROTOCOL_PREFIX}{wrong}");
            let request = TestRequest::with_uri("/ws/dashboard")
                .insert_header((header::SEC_WEBSOCKET_PROTOCOL, offered))
                .to_http_request();
            assert_eq!(judge(&request, token), Verdict::Unauthorized, "{wrong}");
        }
    }

    #[test]
    fn a_cookie_or_a_query_token_authenticates_nothing() {
        let token = "abc123ab";
        let request = TestRequest::with_uri("/api/sessions")
            .insert_header((header::COOKIE, "delta_serve_token=abc123ab"))
            .to_http_request();
        assert_eq!(judge(&request, token), Verdict::Unauthorized);
        let request = TestRequest::with_uri("/api/sessions?token=abc123ab").to_http_request();
        assert_eq!(judge(&request, token), Verdict::Unauthorized);
        // `//host/` is not the page: no redirect anywhere, just a refusal.
        let request = TestRequest::with_uri("//evil.example/?token=abc123ab").to_http_request();
        assert_eq!(judge(&request, token), Verdict::Unauthorized);
    }

    #[test]
    fn only_the_page_its_assets_and_the_identity_check_are_public() {
        for public in ["/", "/assets/app.js", "/?token=x", "/api/identity/check"] {
            let request = TestRequest::with_uri(public).to_http_request();
            assert_eq!(judge(&request, "t0ken-t0ken"), Verdict::Allowed, "{public}");
        }
        for private in [
            "/api/agents",
            "/api/identity",
            "/api/identity/checks",
            "/ws/dashboard",
            "/index.html",
            "/nothing",
        ] {
            let request = TestRequest::with_uri(private).to_http_request();
            assert_eq!(
                judge(&request, "t0ken-t0ken"),
                Verdict::Unauthorized,
                "{private}"
            );
        }
    }

    #[test]
    fn a_foreign_origin_is_refused_even_with_the_token() {
        let request = TestRequest::default()
            .insert_header((header::HOST, "127.0.0.1:7777"))
            .insert_header((header::ORIGIN, "http://evil.example"))
            .insert_header((header::AUTHORIZATION, "Bearer t"))
            .to_http_request();
        assert_eq!(judge(&request, "t"), Verdict::ForeignOrigin);
        let request = TestRequest::default()
            .insert_header((header::HOST, "127.0.0.1:7777"))
            .insert_header((header::ORIGIN, "http://127.0.0.1:7777"))
            .insert_header((header::AUTHORIZATION, "Bearer t"))
            .to_http_request();
        assert_eq!(judge(&request, "t"), Verdict::Allowed);
    }

    #[test]
    fn the_answer_names_the_page_protocol_never_the_token() {
        let offered = format!(
            "{TOKEN_SUBPROTOCOL_PREFIX}{}, {SUBPROTOCOL}",
            hex("secret-1")
        );
        let request = TestRequest::default()
            .insert_header((header::SEC_WEBSOCKET_PROTOCOL, offered))
            .to_http_request();
        let mut response = HttpResponse::SwitchingProtocols().finish();
        accept_subprotocol(&request, &mut response);
        assert_eq!(
            response.headers().get(header::SEC_WEBSOCKET_PROTOCOL),
            Some(&HeaderValue::from_static(SUBPROTOCOL))
        );
        let request = TestRequest::default().to_http_request();
        let mut response = HttpResponse::SwitchingProtocols().finish();
        accept_subprotocol(&request, &mut response);
        assert!(response
            .headers()
            .get(header::SEC_WEBSOCKET_PROTOCOL)
            .is_none());
    }
}
