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
use delta_actors::relay::{new_relay_token, RelayConfig, RelayRoute};
use delta_actors::LlmTarget;
use tokio::signal::unix::{signal, SignalKind};

use crate::commands::engine::process_env;
use crate::error::CliError;

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  DELTA_BASE_URL=https://llm.example.internal/v1 DELTA_API_KEY=$PROVIDER_KEY \\
      delta relay --listen 10.0.0.5:8787 --requests-per-minute 500
  # on any node (the token is the second line the relay printed):
  DELTA_BASE_URL=http://10.0.0.5:8787/v1 DELTA_API_KEY=<token> delta run --agent a -m task -y
  delta relay --llm-script script.yaml --listen 127.0.0.1:0     # the scripted model, offline

stdout: line 1 the base URL callers use, line 2 the token (unless given with --token /
DELTA_RELAY_TOKEN). Every request needs `Authorization: Bearer <token>`. Routes:
POST /v1/chat/completions, GET /v1/models. Stops on Ctrl-C / SIGTERM.")]
pub struct RelayArgs {
    /// Address to listen on (port 0 = any free port); reachable from the calling machines.
    #[arg(long, default_value = "127.0.0.1:8787", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// The token callers must send (default: a fresh random one, printed).
    #[arg(
        long,
        env = "DELTA_RELAY_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// Requests in flight to the endpoint at once, all callers together.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub max_in_flight: u64,
    /// Requests per minute to the endpoint, all callers together (default: no limit).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub requests_per_minute: Option<u32>,
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
            let key = env.get("DELTA_API_KEY").filter(|v| !v.is_empty());
            let (Some(base_url), Some(key)) = (base_url, key) else {
                return Err(CliError::Config(
                    "the relay forwards to DELTA_BASE_URL with DELTA_API_KEY: set both (or use --llm-script FILE)".into(),
                ));
            };
            LlmTarget::Http(Endpoint::new(base_url.clone(), Some(key.clone())))
        }
    };
    let generated = args.token.is_none();
    let token = args.token.clone().unwrap_or_else(new_relay_token);
    if token.len() < 16 {
        return Err(CliError::Usage(
            "--token: use at least 16 characters (the token is the relay's only lock)".into(),
        ));
    }
    let relay = Relay::start(RelayConfig {
        listen: args.listen,
        token: token.clone(),
        routes: vec![RelayRoute {
            name: "default".into(),
            target,
        }],
        max_in_flight: usize::try_from(args.max_in_flight).unwrap_or(64),
        requests_per_minute: args.requests_per_minute,
        request_timeout: delta_actors::llm::DEFAULT_REQUEST_TIMEOUT,
        accepted_token_digests: Vec::new(),
    })
    .map_err(|e| CliError::Config(e.to_string()))?;
    let mut out = format!("{}/v1\n", relay.url());
    if generated {
        out.push_str(&format!("{token}\n"));
    }
    crate::output::emit(&out);
    eprintln!(
        "relay listening on {}/v1 (callers send Authorization: Bearer <token>; Ctrl-C to stop)",
        relay.url()
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Runtime(e.to_string()))?;
    rt.block_on(async {
        let mut term = signal(SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
        }
    });
    relay.stop();
    Ok(0)
}
