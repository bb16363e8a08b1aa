//! Who may talk to `delta serve`: a request carries the server's token as
//! `Authorization: Bearer <token>` or as the HttpOnly cookie set when the page was first
//! opened with `?token=` (that request is answered with the cookie and a redirect to the same
//! URL without the token). A request with an `Origin` header from another site is refused
//! (cross-site WebSockets and form posts), so the cookie cannot be used by other pages.

use actix_web::http::header;
use actix_web::HttpRequest;

pub const COOKIE: &str = "delta_serve_token";

/// What to do with a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// `?token=` was right: set the cookie and redirect to this location.
    SetCookie {
        location: String,
    },
    Unauthorized,
    ForeignOrigin,
}

/// Compares without stopping at the first difference.
pub fn same_token(given: &str, token: &str) -> bool {
    let (a, b) = (given.as_bytes(), token.as_bytes());
    let mut difference = a.len() ^ b.len();
    for (i, byte) in b.iter().enumerate() {
        difference |= (a.get(i).copied().unwrap_or(0) ^ byte) as usize;
    }
    difference == 0
}

fn bearer(request: &HttpRequest) -> Option<&str> {
    request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
}

fn cookie(request: &HttpRequest) -> Option<String> {
    let header = request.headers().get(header::COOKIE)?.to_str().ok()?;
    header.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        (name == COOKIE).then(|| value.to_string())
    })
}

/// The `token` query parameter and the query without it.
fn query_token(query: &str) -> (Option<String>, String) {
    let mut token = None;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.strip_prefix("token=") {
            Some(value) => {
                token = Some(value.to_string());
                false
            }
            None => !pair.is_empty(),
        })
        .collect();
    (token, rest.join("&"))
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

pub fn judge(request: &HttpRequest, token: &str) -> Verdict {
    if foreign_origin(request) {
        return Verdict::ForeignOrigin;
    }
    if bearer(request).is_some_and(|given| same_token(given, token))
        || cookie(request).is_some_and(|given| same_token(&given, token))
    {
        return Verdict::Allowed;
    }
    let (given, rest) = query_token(request.query_string());
    match given {
        Some(given) if same_token(&given, token) => {
            let path = request.path();
            let location = if rest.is_empty() {
                path.to_string()
            } else {
                format!("{path}?{rest}")
            };
            Verdict::SetCookie { location }
        }
        _ => Verdict::Unauthorized,
    }
}

/// The `Set-Cookie` value for `token`.
pub fn set_cookie(token: &str) -> String {
    format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict")
}

/// A fresh random token (32 hex digits).
pub fn new_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    #[test]
    fn bearer_cookie_and_query_tokens() {
        let token = "abc123";
        let request = TestRequest::default()
            .insert_header((header::AUTHORIZATION, "Bearer abc123"))
            .to_http_request();
        assert_eq!(judge(&request, token), Verdict::Allowed);
        let request = TestRequest::default()
            .insert_header((header::COOKIE, "x=1; delta_serve_token=abc123"))
            .to_http_request();
        assert_eq!(judge(&request, token), Verdict::Allowed);
        let request = TestRequest::with_uri("/?a=1&token=abc123").to_http_request();
        assert_eq!(
            judge(&request, token),
            Verdict::SetCookie {
                location: "/?a=1".into()
            }
        );
        for bad in ["/?token=abc12", "/?token=abc1234", "/"] {
            let request = TestRequest::with_uri(bad).to_http_request();
            assert_eq!(judge(&request, token), Verdict::Unauthorized, "{bad}");
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
}
