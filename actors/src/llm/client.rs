//! [`HttpBackend`]: one chat-completion attempt against an OpenAI-compatible endpoint over
//! HTTP (reqwest with a shared connection pool).
//!
//! Owns the mapping from HTTP outcomes to [`LlmError`] (status, provider message,
//! Retry-After). Does not retry, rate-limit or log the API key.

use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use serde_json::Value;

use super::endpoint::{
    encode_header_value, ChatBackend, CompletionFuture, Endpoint, LlmError, RequestMeta,
    HEADER_AGENT, HEADER_RUN_ID,
};
use super::retry::parse_retry_after;
use super::types::{parse_completion, preview, provider_error_message, ChatRequest};

/// Default whole-request timeout: long generations on slow models are legitimate.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Longest provider error text kept in an [`LlmError::Http`] message.
const MAX_ERROR_CHARS: usize = 2_000;

/// Talks to one endpoint. Cheap to clone (the client and its pool are shared).
#[derive(Clone)]
pub struct HttpBackend {
    inner: Arc<Inner>,
}

struct Inner {
    endpoint: Endpoint,
    url: String,
    client: reqwest::Client,
    timeout: Duration,
}

impl std::fmt::Debug for HttpBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpBackend")
            .field("endpoint", &self.inner.endpoint)
            .field("timeout", &self.inner.timeout)
            .finish()
    }
}

impl HttpBackend {
    /// Builds the client. The API key, when present, is sent as `Authorization: Bearer`.
    pub fn new(endpoint: Endpoint, timeout: Duration) -> Result<Self, LlmError> {
        let mut headers = HeaderMap::new();
        if let Some(key) = endpoint.api_key.as_deref() {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                LlmError::Transport(
                    "the API key contains characters not allowed in an HTTP header \
                     (hint: check DELTA_API_KEY for stray quotes or newlines)"
                        .into(),
                )
            })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .user_agent(concat!("delta/", env!("CARGO_PKG_VERSION")))
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(30)))
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90))
            .build()
            .map_err(|e| LlmError::Transport(format!("cannot build the HTTP client: {e}")))?;
        let url = endpoint.chat_completions_url();
        reqwest::Url::parse(&url).map_err(|e| {
            LlmError::Transport(format!(
                "base URL {:?} is not a valid URL: {e} (hint: DELTA_BASE_URL looks like https://host/v1)",
                endpoint.base_url
            ))
        })?;
        Ok(HttpBackend {
            inner: Arc::new(Inner {
                endpoint,
                url,
                client,
                timeout,
            }),
        })
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.inner.endpoint
    }

    /// One attempt: POST the request, map the outcome.
    pub async fn send(
        &self,
        req: &ChatRequest,
        meta: &RequestMeta,
    ) -> Result<super::ChatCompletion, LlmError> {
        let inner = &self.inner;
        let mut builder = inner
            .client
            .post(&inner.url)
            .header(CONTENT_TYPE, "application/json")
            .json(&*req.for_wire());
        if !meta.agent_name.is_empty() {
            builder = builder.header(HEADER_AGENT, encode_header_value(&meta.agent_name));
        }
        if !meta.run_id.is_empty() {
            builder = builder.header(HEADER_RUN_ID, encode_header_value(&meta.run_id));
        }
        let response = builder.send().await.map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        let retry_after = parse_retry_after(response.headers());
        let body = response
            .bytes()
            .await
            .map_err(|e| self.transport_error(&e))?;
        if status.is_success() {
            return parse_completion(&body);
        }
        Err(LlmError::Http {
            status: status.as_u16(),
            message: error_message(status, &body),
            retry_after,
        })
    }

    fn transport_error(&self, err: &reqwest::Error) -> LlmError {
        if err.is_timeout() {
            return LlmError::Transport(format!(
                "POST {} timed out after {} s",
                self.inner.url,
                self.inner.timeout.as_secs_f64()
            ));
        }
        // reqwest's own text is terse ("error sending request"); the cause chain says why.
        let mut text = err.to_string();
        let mut source = err.source();
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        LlmError::Transport(text)
    }
}

impl ChatBackend for HttpBackend {
    fn complete(&self, req: ChatRequest, meta: RequestMeta) -> CompletionFuture {
        let this = self.clone();
        Box::pin(async move { this.send(&req, &meta).await })
    }
}

/// The provider's message from an error body (`{"error":{"message"}}`, `{"error":"..."}`,
/// `{"message"}`, `{"detail"}`), else the body text, else the status reason.
fn error_message(status: reqwest::StatusCode, body: &[u8]) -> String {
    let from_json = serde_json::from_slice::<Value>(body).ok().and_then(|v| {
        v.get("error")
            .filter(|e| !e.is_null())
            .map(provider_error_message)
            .or_else(|| {
                ["message", "detail"]
                    .iter()
                    .find_map(|k| v.get(*k).map(provider_error_message))
            })
    });
    let text = from_json.unwrap_or_else(|| preview(body).trim().to_owned());
    if text.is_empty() {
        return status
            .canonical_reason()
            .unwrap_or("no error message")
            .to_owned();
    }
    text.chars().take(MAX_ERROR_CHARS).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use reqwest::StatusCode;

    #[test]
    fn error_messages_are_extracted_from_common_shapes() {
        let s = StatusCode::BAD_REQUEST;
        assert_eq!(
            error_message(s, br#"{"error":{"message":"bad model"}}"#),
            "bad model"
        );
        assert_eq!(error_message(s, br#"{"error":"flat"}"#), "flat");
        assert_eq!(error_message(s, br#"{"detail":"pydantic"}"#), "pydantic");
        assert_eq!(error_message(s, b"plain text"), "plain text");
        assert_eq!(error_message(StatusCode::BAD_GATEWAY, b""), "Bad Gateway");
    }

    #[test]
    fn invalid_base_url_is_rejected_with_a_hint() {
        let err = HttpBackend::new(Endpoint::new("not a url", None), DEFAULT_TIMEOUT).unwrap_err();
        assert!(err.to_string().contains("DELTA_BASE_URL"), "{err}");
    }

    #[test]
    fn debug_does_not_leak_the_key() {
        let b = HttpBackend::new(
            Endpoint::new("http://127.0.0.1:1/v1", Some("sk-zzz".into())),
            DEFAULT_TIMEOUT,
        )
        .unwrap();
        assert!(!format!("{b:?}").contains("sk-zzz"));
    }

    #[tokio::test]
    async fn connection_refused_is_a_retryable_transport_error() {
        // Bind then drop to get a port that (almost certainly) refuses connections.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let b = HttpBackend::new(
            Endpoint::new(format!("http://127.0.0.1:{port}/v1"), None),
            Duration::from_secs(5),
        )
        .unwrap();
        let req = ChatRequest {
            model: "m".into(),
            messages: vec![super::super::ChatMessage::user("hi")],
            ..Default::default()
        };
        let err = b.send(&req, &RequestMeta::default()).await.unwrap_err();
        assert!(matches!(err, LlmError::Transport(_)), "{err:?}");
        assert!(err.is_retryable());
    }
}
