//! `delta mock-llm`: serve the built-in scripted model as an OpenAI-compatible endpoint on
//! 127.0.0.1, so the real HTTP client path can be exercised and other tools can point at it.

use std::path::PathBuf;

use clap::Args;

use crate::error::CliError;

#[derive(Debug, Args)]
#[command(after_help = "Example:
  delta mock-llm --script examples/agents/hello-world/llm-script.yaml --port 8089 &
  DELTA_BASE_URL=http://127.0.0.1:8089/v1 DELTA_API_KEY=dummy \\
      delta run --agent examples/agents/hello-world -m \"Say hello\" -y

The first line on stdout is the base URL to use (include it as DELTA_BASE_URL).
Routes: POST /v1/chat/completions, GET /v1/models, GET /v1/stats. Stops on Ctrl-C / SIGTERM.")]
pub struct MockLlmArgs {
    /// The script to play (YAML or JSON; see docs/llm-script.md).
    #[arg(long, value_name = "FILE")]
    pub script: PathBuf,
    /// Port on 127.0.0.1 (0 = any free port).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
}

pub fn run(args: &MockLlmArgs) -> Result<i32, CliError> {
    delta_actors::llm::scripted::run_server_blocking(&args.script, args.port, |addr| {
        crate::output::emit(&format!("http://{addr}/v1\n"));
        crate::notice!("scripted model listening on http://{addr}/v1 (Ctrl-C to stop)");
    })?;
    Ok(0)
}
