//! `delta relay`: serve the LLM relay on its own — an OpenAI-compatible endpoint that
//! forwards to the real one with the real key, under one shared in-flight cap and
//! requests-per-minute limit, for scripts that start `delta run` on many machines. The
//! machines get the relay's URL and token, never the provider key.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use delta_actors::api::Relay;
use delta_actors::llm::{Endpoint, Script};
use delta_actors::relay::secrets::shown_url;
use delta_actors::relay::{
    new_relay_token, RelayConfig, RelayError, RelayLimits, RelayRoute, DEFAULT_MAX_BODY,
    DEFAULT_MAX_BODY_MEMORY,
};
use delta_actors::LlmTarget;
use tokio::signal::unix::{signal, SignalKind};

use delta_actors::agent::is_loopback_url;

use crate::commands::engine::process_env;
use crate::error::CliError;
use crate::token::{check_token, resolve_token, TokenOptions};

/// The environment variable that may hold the relay's token.
pub const RELAY_TOKEN_VAR: &str = "DELTA_RELAY_TOKEN";

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  DELTA_BASE_URL=https://llm.example.internal/v1 DELTA_API_KEY=$PROVIDER_KEY \\
      delta relay --listen 10.0.0.5:8787 --requests-per-minute 500
  # on any node (the token is the second line the relay printed):
  DELTA_BASE_URL=http://10.0.0.5:8787/v1 DELTA_API_KEY=<token> delta run --agent a -m task -y
  delta relay --llm-script script.yaml --listen 127.0.0.1:0     # the scripted model, offline
  DELTA_BASE_URL=http://127.0.0.1:8080/v1 delta relay   # a local llama.cpp/Ollama: no key needed

The token: a fresh random one unless DELTA_RELAY_TOKEN is set or --token-file names a file
holding it (yours, mode 0600, not a symbolic link). Never on the command line: every local
user can read a process's arguments, so `--token` is refused.

stdout: line 1 the base URL callers use, line 2 the token (when it was generated). Every
request needs `Authorization: Bearer <token>`, checked before its body is read. Routes: POST
/v1/chat/completions (passed through as sent; streamed answers relayed chunk by chunk, the
endpoint's errors with their status, Retry-After and JSON error object), GET /v1/models. The
key and the base URL's user-info and query never appear in an answer or a log line. A caller
that disconnects has its call dropped, or cancelled at the endpoint. Stops on Ctrl-C /
SIGTERM. More: docs/scale-out.md.")]
pub struct RelayArgs {
    /// Address to listen on (port 0 = any free port); reachable from the calling machines.
    #[arg(long, default_value = "127.0.0.1:8787", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Refused (a command line is readable by every local user): use DELTA_RELAY_TOKEN or
    /// --token-file.
    #[arg(long, hide = true, value_name = "TOKEN", allow_hyphen_values = true)]
    pub token: Option<String>,
    /// Read the token callers must send from FILE (yours, mode 0600, not a symlink) instead
    /// of DELTA_RELAY_TOKEN [default: a fresh random one, printed]
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Requests in flight to the endpoint at once, all callers together.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub max_in_flight: u64,
    /// Requests per minute to the endpoint, all callers together (default: no limit).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub requests_per_minute: Option<u32>,
    /// Tokens per minute to the endpoint, all callers together (prompt + completion, as
    /// its answers report them): a request waits while the last 60 seconds' tokens have
    /// reached N (default: no limit).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=delta_actors::relay::tpm::MAX_TOKENS_PER_MINUTE))]
    pub tpm: Option<u64>,
    /// Stop forwarding once the callers together were billed this many tokens (prompt +
    /// completion): a request that would pass it is answered 402 `budget_exhausted`,
    /// which a delta run records as INTERRUPTED `budget_exhausted` (docs/cost.md).
    #[arg(long, value_name = "TOKENS",
          value_parser = clap::value_parser!(u64).range(1..=delta_actors::budget::MAX_BUDGET_TOKENS))]
    pub budget_tokens: Option<u64>,
    /// The largest request body accepted (413 above it), e.g. 8MiB, 512KiB, 1000000
    /// [default: 8MiB: a million-token conversation, JSON-escaped]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_body: Option<usize>,
    /// Request bodies held in memory at once, all callers together; a caller past it waits,
    /// its body unread [default: 64MiB]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_body_memory: Option<usize>,
    /// Relay the built-in scripted model with this script instead of a real endpoint.
    #[arg(long, value_name = "FILE")]
    pub llm_script: Option<PathBuf>,
}

pub fn run(args: &RelayArgs) -> Result<i32, CliError> {
    let env = process_env();
    let target = match &args.llm_script {
        Some(path) => LlmTarget::Scripted(Arc::new(
            Script::load(path).map_err(|e| CliError::Config(e.to_string()))?,
        )),
        None => {
            let base_url = env.get("DELTA_BASE_URL").filter(|v| !v.is_empty());
            let key = env.get("DELTA_API_KEY").filter(|v| !v.is_empty()).cloned();
            // A server on this machine (llama.cpp, Ollama...) usually wants no key, as for
            // `delta run`.
            let key_optional = base_url.is_some_and(|url| is_loopback_url(url));
            match (base_url, key) {
                (Some(base_url), key) if key.is_some() || key_optional => {
                    LlmTarget::Http(Endpoint::new(base_url.clone(), key))
                }
                _ => {
                    return Err(CliError::Config(
                        "the relay forwards to DELTA_BASE_URL with DELTA_API_KEY: set both (the key may be left out for an endpoint on 127.0.0.1 or localhost), or use --llm-script FILE".into(),
                    ))
                }
            }
        }
    };
    let forwarding_to = match &target {
        LlmTarget::Http(endpoint) => shown_url(&endpoint.base_url),
        _ => "the scripted model".to_owned(),
    };
    let given = resolve_token(
        &TokenOptions {
            argv_token: args.token.as_deref(),
            token_file: args.token_file.as_deref(),
            file_env_var: None,
            env_var: RELAY_TOKEN_VAR,
        },
        &env,
    )?;
    if let Some(given) = &given {
        check_token(given, 16)?;
    }
    let generated = given.is_none();
    let token = given.map_or_else(new_relay_token, |given| given.value);
    let relay_budget = args.budget_tokens.map(|tokens| {
        use delta_actors::budget::{Budget, PlanBudgets};
        let budget = Budget {
            usd: None,
            tokens: Some(tokens),
        };
        let caps = PlanBudgets::new(Some(budget), [], &Default::default());
        Arc::new(delta_actors::relay::budget::RelayBudget::new(
            caps,
            Default::default(),
            Default::default(),
        ))
    });
    let relay = Relay::start(RelayConfig {
        listen: args.listen,
        token: token.clone(),
        routes: vec![RelayRoute {
            name: "default".into(),
            target,
        }],
        max_in_flight: usize::try_from(args.max_in_flight).unwrap_or(64),
        requests_per_minute: args.requests_per_minute,
        tokens_per_minute: args.tpm,
        budget: relay_budget,
        request_timeout: delta_actors::llm::DEFAULT_REQUEST_TIMEOUT,
        accepted_token_digests: Vec::new(),
        limits: RelayLimits {
            max_body: args.max_body.unwrap_or(DEFAULT_MAX_BODY),
            max_body_memory: args
                .max_body_memory
                .unwrap_or(DEFAULT_MAX_BODY_MEMORY.max(args.max_body.unwrap_or(0))),
        },
    })
    .map_err(|e| match e {
        RelayError::Limits { .. } => CliError::Usage(e.to_string()),
        e => CliError::Config(e.to_string()),
    })?;
    // The stop signals are caught before the address is printed: whoever starts the relay
    // and reads its address may send SIGTERM at once, and it must still stop cleanly (with
    // its summary), not die of the signal's default action.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Runtime(e.to_string()))?;
    let (mut interrupt, mut term) = {
        let _runtime = rt.enter();
        (
            signal(SignalKind::interrupt()).map_err(|e| CliError::Runtime(e.to_string()))?,
            signal(SignalKind::terminate()).map_err(|e| CliError::Runtime(e.to_string()))?,
        )
    };
    let mut out = format!("{}/v1\n", relay.url());
    if generated {
        out.push_str(&format!("{token}\n"));
    }
    crate::output::emit(&out);
    crate::notice!(
        "relay listening on {}/v1, forwarding to {forwarding_to} (callers send Authorization: Bearer <token>; Ctrl-C to stop)",
        relay.url()
    );
    rt.block_on(async {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = term.recv() => {}
        }
    });
    let usage = relay.usage();
    relay.stop();
    crate::notice!(
        "relay stopped: {} requests answered ({} streamed), {} callers left before their answer; {} tokens in, {} out",
        usage.requests, usage.streamed, usage.abandoned, usage.prompt_tokens, usage.completion_tokens
    );
    Ok(0)
}

/// A size: bytes, or a number with KiB, MiB or GiB (K, M, G and KB, MB, GB mean the same).
fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: usize = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size: write bytes or e.g. 8MiB, 512KiB"))?;
    let scale: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => return Err(format!("unknown size unit {other:?}: use KiB, MiB or GiB")),
    };
    number
        .checked_mul(scale)
        .ok_or_else(|| format!("{text:?} is too large"))
}
