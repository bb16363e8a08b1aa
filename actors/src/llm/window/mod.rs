//! A model's context window: how many tokens one request may hold, where delta learned it,
//! and the two ways the endpoint teaches it.
//!
//! - **Asked** ([`probe`]): `GET <base>/models` (vLLM's `max_model_len`, OpenRouter's and
//!   Together's `context_length`, Groq's `context_window`); and for a server on this machine,
//!   llama.cpp's `GET /props` (`n_ctx`), LM Studio's `GET /api/v0/models/<model>`
//!   (`loaded_context_length`) and Ollama's `POST /api/show` (`num_ctx`). Each answer is read
//!   within [`PROBE_TIMEOUT`] and [`MAX_PROBE_BODY_BYTES`]; nothing answered is not an error.
//! - **Refused** ([`refusal_facts`]): the words of a context-length refusal (OpenAI's, vLLM's
//!   and llama-cpp-python's "maximum context length is N tokens", `context_length_exceeded`,
//!   Anthropic's "prompt is too long: N tokens > M maximum", llama.cpp's "exceeds the
//!   available context size", Mistral's and Gemini's) give the window and often the request's
//!   own token count.
//!
//! The run decides which source wins (agent.yaml, then the environment, then a refusal, then
//! the server, then the catalogue: `run/`); these functions only learn. They take what they
//! need and return plain values, so a store of learned endpoint facts (the per-endpoint cache
//! of learned dialect settings) can keep their answers across processes: key it by
//! [`super::Endpoint::key`] and the model, and store a [`ContextWindow`].
//!
//! Must not: log or return the API key (the client carries it as a sensitive header), or
//! follow the endpoint anywhere but its own host.

use std::sync::OnceLock;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The longest each probe request may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// The most bytes of a probe's answer read (OpenRouter's model list is about 1 MB).
pub const MAX_PROBE_BODY_BYTES: usize = 8 * 1024 * 1024;
/// What Ollama gives a model that sets no `num_ctx` (it cuts longer prompts silently).
pub const OLLAMA_DEFAULT_NUM_CTX: u64 = 4096;

/// A context window and where it came from (recorded in the run's metadata.json and in each
/// CONTEXT_COMPACTED event).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextWindow {
    /// The most tokens one request (prompt and reply) may hold.
    pub tokens: u64,
    /// Where delta learned it: `agent.yaml`, `DELTA_CONTEXT_WINDOW`, `server`, `refusal` or
    /// `catalogue`.
    pub source: String,
    /// What exactly said so: the server's answer and field, the catalogue's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl ContextWindow {
    /// A window from `source`, with `detail`.
    pub fn new(tokens: u64, source: &str, detail: Option<String>) -> ContextWindow {
        ContextWindow {
            tokens,
            source: source.to_string(),
            detail,
        }
    }

    /// `4,096 tokens (server: GET /props default_generation_settings.n_ctx)`.
    pub fn describe(&self) -> String {
        match &self.detail {
            Some(detail) => format!("{} tokens ({}: {detail})", self.tokens, self.source),
            None => format!("{} tokens ({})", self.tokens, self.source),
        }
    }
}

/// What a context-length refusal said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RefusalFacts {
    /// The window it names.
    pub window: Option<u64>,
    /// The refused request's prompt tokens, when it says them.
    pub prompt_tokens: Option<u64>,
}

/// Phrases that make an error a context-length refusal, with the numbers they carry.
struct Phrase {
    pattern: &'static str,
    /// Capture group of the window, of the prompt tokens (0: none).
    window: usize,
    prompt: usize,
}

const PHRASES: &[Phrase] = &[
    // OpenAI, vLLM, llama-cpp-python, Groq, DeepSeek, Together.
    Phrase {
        pattern: r"maximum context length is (\d+) tokens",
        window: 1,
        prompt: 0,
    },
    Phrase {
        pattern: r"requested \d+ tokens \((\d+) in the messages",
        window: 0,
        prompt: 1,
    },
    Phrase {
        pattern: r"messages resulted in (\d+) tokens",
        window: 0,
        prompt: 1,
    },
    Phrase {
        pattern: r"your request has (\d+) input tokens",
        window: 0,
        prompt: 1,
    },
    Phrase {
        pattern: r"context_length_exceeded",
        window: 0,
        prompt: 0,
    },
    // Anthropic.
    Phrase {
        pattern: r"prompt is too long: (\d+) tokens > (\d+) maximum",
        window: 2,
        prompt: 1,
    },
    Phrase {
        pattern: r"input length and `?max_tokens`? exceed context limit: (\d+) \+ \d+ > (\d+)",
        window: 2,
        prompt: 1,
    },
    // llama.cpp's llama-server.
    Phrase {
        pattern: r"exceeds? the available context size",
        window: 0,
        prompt: 0,
    },
    // Mistral.
    Phrase {
        pattern: r"prompt contains (\d+) tokens.{0,80}too large for model with (\d+) maximum context length",
        window: 2,
        prompt: 1,
    },
    // Gemini's OpenAI-compatible endpoint.
    Phrase {
        pattern: r"input token count \((\d+)\) exceeds the maximum number of tokens allowed \((\d+)\)",
        window: 2,
        prompt: 1,
    },
    Phrase {
        pattern: r"exceeds the context window",
        window: 0,
        prompt: 0,
    },
];

fn phrases() -> &'static [(regex_lite::Regex, usize, usize)] {
    static COMPILED: OnceLock<Vec<(regex_lite::Regex, usize, usize)>> = OnceLock::new();
    COMPILED.get_or_init(|| {
        PHRASES
            .iter()
            .filter_map(|p| {
                regex_lite::Regex::new(&format!("(?i){}", p.pattern))
                    .ok()
                    .map(|re| (re, p.window, p.prompt))
            })
            .collect()
    })
}

/// What `message` (an endpoint's error text) says, when it is a context-length refusal;
/// `None` for any other error.
pub fn refusal_facts(message: &str) -> Option<RefusalFacts> {
    let mut facts = RefusalFacts::default();
    let mut refused = false;
    for (re, window, prompt) in phrases() {
        let Some(found) = re.captures(message) else {
            continue;
        };
        refused = true;
        let number = |group: usize| {
            (group > 0)
                .then(|| found.get(group))
                .flatten()
                .and_then(|m| m.as_str().parse::<u64>().ok())
        };
        facts.window = facts.window.or(number(*window));
        facts.prompt_tokens = facts.prompt_tokens.or(number(*prompt));
    }
    refused.then_some(facts)
}

/// The window `client` finds for `model` at the endpoint `base_url` (see the module header),
/// or `None` when nothing there says it.
pub async fn probe(client: &reqwest::Client, base_url: &str, model: &str) -> Option<ContextWindow> {
    let base = base_url.trim_end_matches('/');
    match get_json(client, &format!("{base}/models")).await {
        Answer::Json(body) => {
            if let Some((tokens, field)) = window_in_model_list(&body, model) {
                return Some(server_window(tokens, format!("GET /models {field}")));
            }
        }
        Answer::Other => {}
        // A server that does not answer at all is not asked again at other addresses.
        Answer::None => return None,
    }
    if !is_local(base) {
        return None;
    }
    let root = base.strip_suffix("/v1").unwrap_or(base);
    if let Answer::Json(body) = get_json(client, &format!("{root}/props")).await {
        if let Some((tokens, field)) = window_in_props(&body) {
            return Some(server_window(tokens, format!("GET /props {field}")));
        }
    }
    let lm_studio = format!("{root}/api/v0/models/{}", path_segment(model));
    if let Answer::Json(body) = get_json(client, &lm_studio).await {
        if let Some((tokens, field)) = window_in_lm_studio(&body) {
            return Some(server_window(tokens, format!("LM Studio {field}")));
        }
    }
    let request = client
        .post(format!("{root}/api/show"))
        .json(&serde_json::json!({ "model": model }));
    if let Answer::Json(body) = read_json(request).await {
        if let Some((tokens, field)) = window_in_ollama_show(&body) {
            return Some(server_window(tokens, format!("Ollama /api/show {field}")));
        }
    }
    None
}

fn server_window(tokens: u64, detail: String) -> ContextWindow {
    ContextWindow::new(tokens, "server", Some(detail))
}

/// A server on this machine or a private network: worth asking at its llama.cpp, LM Studio
/// and Ollama addresses (a public provider answers those with 404s, or not at all).
fn is_local(base: &str) -> bool {
    let Some(rest) = base
        .strip_prefix("http://")
        .or_else(|| base.strip_prefix("https://"))
    else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or("");
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.split(':').next().unwrap_or(""),
    };
    if host.eq_ignore_ascii_case("localhost") || host.ends_with(".local") {
        return true;
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => ip.is_loopback() || ip.is_private() || ip.is_link_local(),
        Ok(std::net::IpAddr::V6(ip)) => ip.is_loopback(),
        Err(_) => false,
    }
}

/// A model name as one URL path segment.
fn path_segment(model: &str) -> String {
    model
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// What a probe request got.
enum Answer {
    /// A 2xx answer with a JSON body.
    Json(Value),
    /// An answer, but not one to read (404, not JSON, too long).
    Other,
    /// No answer: the connection failed or the time ran out.
    None,
}

async fn get_json(client: &reqwest::Client, url: &str) -> Answer {
    read_json(client.get(url)).await
}

/// The JSON body of a 2xx answer to `request`, read within the probe's limits.
async fn read_json(request: reqwest::RequestBuilder) -> Answer {
    let Ok(mut response) = request.timeout(PROBE_TIMEOUT).send().await else {
        return Answer::None;
    };
    if !response.status().is_success() {
        return Answer::Other;
    }
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) if body.len() + chunk.len() <= MAX_PROBE_BODY_BYTES => {
                body.extend_from_slice(&chunk)
            }
            Ok(Some(_)) => return Answer::Other,
            Ok(None) => break,
            Err(_) => return Answer::None,
        }
    }
    serde_json::from_slice(&body).map_or(Answer::Other, Answer::Json)
}

fn positive(value: Option<&Value>) -> Option<u64> {
    value.and_then(Value::as_u64).filter(|n| *n > 0)
}

/// In an OpenAI-style model list, the entry of `model` (or the only entry: a server of one
/// model answers to any name) and the first window field it has.
fn window_in_model_list(body: &Value, model: &str) -> Option<(u64, &'static str)> {
    let entries = body.get("data")?.as_array()?;
    let entry = entries
        .iter()
        .find(|e| e.get("id").and_then(Value::as_str) == Some(model))
        .or(match entries.as_slice() {
            [only] => Some(only),
            _ => None,
        })?;
    const FIELDS: [(&str, &str); 4] = [
        ("max_model_len", "max_model_len"),
        ("context_length", "context_length"),
        ("context_window", "context_window"),
        ("loaded_context_length", "loaded_context_length"),
    ];
    FIELDS
        .iter()
        .find_map(|(key, name)| positive(entry.get(*key)).map(|n| (n, *name)))
        .or_else(|| {
            positive(entry.pointer("/top_provider/context_length"))
                .map(|n| (n, "top_provider.context_length"))
        })
}

/// llama.cpp's `/props`: the slot's context (`default_generation_settings.n_ctx`), or `n_ctx`.
fn window_in_props(body: &Value) -> Option<(u64, &'static str)> {
    positive(body.pointer("/default_generation_settings/n_ctx"))
        .map(|n| (n, "default_generation_settings.n_ctx"))
        .or_else(|| positive(body.get("n_ctx")).map(|n| (n, "n_ctx")))
}

/// LM Studio's model details: the context it was loaded with, else the most it takes.
fn window_in_lm_studio(body: &Value) -> Option<(u64, &'static str)> {
    positive(body.get("loaded_context_length"))
        .map(|n| (n, "loaded_context_length"))
        .or_else(|| positive(body.get("max_context_length")).map(|n| (n, "max_context_length")))
}

/// Ollama's `/api/show`: the model's `num_ctx` parameter; without one, Ollama's default
/// (the most a prompt keeps: Ollama cuts the rest without an error), never more than the
/// model's own `<arch>.context_length`.
fn window_in_ollama_show(body: &Value) -> Option<(u64, &'static str)> {
    let num_ctx = body
        .get("parameters")
        .and_then(Value::as_str)
        .and_then(|text| {
            text.lines().find_map(|line| {
                let mut words = line.split_whitespace();
                (words.next() == Some("num_ctx"))
                    .then(|| words.next()?.parse::<u64>().ok())
                    .flatten()
            })
        });
    if let Some(n) = num_ctx.filter(|n| *n > 0) {
        return Some((n, "num_ctx"));
    }
    let trained = body
        .get("model_info")?
        .as_object()?
        .iter()
        .find(|(key, _)| key.ends_with(".context_length"))
        .and_then(|(_, value)| value.as_u64())?;
    Some((trained.min(OLLAMA_DEFAULT_NUM_CTX), "default num_ctx"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
