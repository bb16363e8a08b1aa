//! [`LlmTarget`]: where a run's model calls go (an HTTP endpoint, the scripted model, or an
//! embedder's backend), and the key under which runs share one gate.

use std::sync::Arc;

use super::endpoint::{ChatBackend, Endpoint};
use super::scripted::Script;

/// Where a run's model calls go.
#[derive(Clone)]
pub enum LlmTarget {
    /// An OpenAI-compatible HTTP endpoint.
    Http(Endpoint),
    /// The built-in scripted model, in process.
    Scripted(Arc<Script>),
    /// Any backend an embedder provides; `key` identifies it for gate sharing.
    Custom {
        /// Names the backend: targets with equal keys share one gate.
        key: String,
        /// The backend that answers the calls.
        backend: Arc<dyn ChatBackend>,
    },
}

impl std::fmt::Debug for LlmTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LlmTarget::Http(e) => f.debug_tuple("Http").field(e).finish(),
            LlmTarget::Scripted(_) => f.write_str("Scripted"),
            LlmTarget::Custom { key, .. } => f.debug_struct("Custom").field("key", key).finish(),
        }
    }
}

/// Who answers a target's calls, as a trace names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerIdentity {
    /// OpenTelemetry's `gen_ai.provider.name`: `openai` for an OpenAI-compatible endpoint,
    /// `delta.scripted`, `delta.custom`.
    pub provider: &'static str,
    /// The HTTP endpoint's host.
    pub address: Option<String>,
    /// Its port (the scheme's default when the URL names none).
    pub port: Option<u16>,
}

impl LlmTarget {
    /// Who answers this target's calls (for traces and metrics).
    pub fn server_identity(&self) -> ServerIdentity {
        match self {
            LlmTarget::Http(endpoint) => {
                let url = reqwest::Url::parse(&endpoint.base_url).ok();
                ServerIdentity {
                    provider: "openai",
                    address: url.as_ref().and_then(|u| u.host_str().map(str::to_string)),
                    port: url.as_ref().and_then(reqwest::Url::port_or_known_default),
                }
            }
            LlmTarget::Scripted(_) => ServerIdentity {
                provider: "delta.scripted",
                address: None,
                port: None,
            },
            LlmTarget::Custom { .. } => ServerIdentity {
                provider: "delta.custom",
                address: None,
                port: None,
            },
        }
    }

    /// The HTTP endpoint's base URL (what the catalogue tells providers apart by); `None`
    /// for the scripted and custom backends.
    pub fn base_url(&self) -> Option<&str> {
        match self {
            LlmTarget::Http(endpoint) => Some(endpoint.base_url.as_str()),
            _ => None,
        }
    }

    /// Runs with equal keys share one gate (one in-flight cap, one rate limit).
    pub fn gateway_key(&self) -> String {
        match self {
            LlmTarget::Http(e) => e.key(),
            LlmTarget::Scripted(s) => format!("scripted:{:p}", Arc::as_ptr(s)),
            LlmTarget::Custom { key, .. } => format!("custom:{key}"),
        }
    }
}
