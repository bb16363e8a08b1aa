//! One MCP server, started and spoken to: its process (started like a tool, through the
//! spawner: `tool::process::ServiceProcess`), the MCP session over its stdin and stdout
//! (the official SDK, `rmcp`, as a client over the pipes, its stdout read through
//! [`MessageCap`]), the tools it listed (within `limits`), and one `tools/call` turned into
//! an [`EngineAnswer`] whatever happens: an answer, an error the tool reported, a server
//! that died, hung, wrote nonsense or a message over 16 MiB.
//!
//! Must not: decide when a server is started or shared (`pool.rs`) or name tools for the
//! model (`kind.rs`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::ServiceExt;
use serde_json::{json, Map, Value as Json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::limits::{oversized_message, MessageCap, MAX_MESSAGE_BYTES};
use super::listing::{list_tools, Listed};
use crate::tool::kind::{EngineAnswer, EngineEnding};
use crate::tool::process::{ProcessSpec, ServiceProcess};

/// Everything needed to start one server: resolved settings, nothing of a run.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServerLaunch {
    /// The server's name in the agent's `mcp:` (for messages).
    pub name: String,
    /// Program and arguments, placeholders expanded.
    pub argv: Vec<String>,
    /// The complete environment: the tools' cleaned one plus the server's `env:`.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub cwd: PathBuf,
    /// Limit of the start: initialize and the tool list.
    pub startup_timeout: Duration,
    /// The sandbox of the runs it serves, applied to the server like to their tools (so
    /// only runs confined alike share a server); `None`: unconfined.
    pub sandbox: Option<Arc<crate::sandbox::RunSandbox>>,
}

/// A tool list read again for one `tools:` filter (keyed by the filter's names), or why it
/// could not be.
type FilteredLists = HashMap<Vec<String>, Result<Arc<Vec<rmcp::model::Tool>>, String>>;

/// A running server: its process, its MCP session and its tools.
pub struct Connection {
    session: RunningService<RoleClient, ClientConfig>,
    process: ServiceProcess,
    /// The tools it listed when it started, in its order, or that it lists too many.
    pub listing: Listed,
    /// Its tool list read again for one `tools:` filter (when the whole list is over the
    /// cap), once per filter.
    named: tokio::sync::Mutex<FilteredLists>,
    /// Turns `true` when the server sent a message over [`MAX_MESSAGE_BYTES`] (the session
    /// is over).
    oversized: watch::Receiver<bool>,
    /// Limit of a tool list read again for a filter (the start's limit).
    listing_timeout: Duration,
    /// Its name in the agent's `mcp:` (for messages).
    name: String,
}

/// The identity delta gives servers in `initialize`.
fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("delta", env!("CARGO_PKG_VERSION")),
    )
}

impl Connection {
    /// Starts the server, initializes the session and lists its tools, within the launch's
    /// startup limit. The error says why, with the end of the server's stderr; a server
    /// that was started is killed on error.
    pub async fn open(
        launch: &ServerLaunch,
        spawner_env: &SpawnContext,
    ) -> Result<Connection, String> {
        let mut spec =
            ProcessSpec::new(launch.argv.clone(), launch.cwd.clone(), launch.env.clone());
        spec.spawner = spawner_env.spawner.clone();
        spec.sandbox = launch.sandbox.clone();
        let (process, pipes) = ServiceProcess::start(&spec)
            .await
            .map_err(|reason| format!("it did not start: {reason}"))?;
        let (stdout, stdin) = (pipes.stdout, pipes.stdin);
        let (stdout, oversized) = MessageCap::new(stdout, MAX_MESSAGE_BYTES);
        let mut exit = process.exit_watch();
        let said_too_much = |reason: String| {
            if *oversized.borrow() {
                oversized_message()
            } else {
                reason
            }
        };
        let started = async {
            let session = client_config()
                .serve((stdout, stdin))
                .await
                .map_err(|e| said_too_much(format!("initialize failed: {e}")))?;
            let listing = list_tools(session.peer(), |_| true)
                .await
                .map_err(said_too_much)?;
            Ok::<_, String>((session, listing))
        };
        let outcome = tokio::select! {
            outcome = started => outcome,
            () = tokio::time::sleep(launch.startup_timeout) => Err(format!(
                "it did not answer initialize and tools/list within {} ms (raise `startup_timeout_ms`)",
                launch.startup_timeout.as_millis()
            )),
            Ok(_) = exit.wait_for(Option::is_some) => Err("it exited during its start".to_string()),
        };
        match outcome {
            Ok((session, listing)) => Ok(Connection {
                session,
                process,
                listing,
                named: Default::default(),
                oversized,
                listing_timeout: launch.startup_timeout,
                name: launch.name.clone(),
            }),
            Err(reason) => {
                let why = with_exit_and_stderr(reason, &process).await;
                process.kill();
                Err(why)
            }
        }
    }

    /// Its tools named in `names` (a `tools:` filter), read again from its tool list keeping
    /// only those: for a server whose whole list is over the cap. Read once per filter,
    /// within the start's limit.
    pub async fn tools_named(
        &self,
        names: &[String],
    ) -> Result<Arc<Vec<rmcp::model::Tool>>, String> {
        let mut named = self.named.lock().await;
        if let Some(known) = named.get(names) {
            return known.clone();
        }
        let wanted = |tool: &rmcp::model::Tool| names.iter().any(|n| n == tool.name.as_ref());
        let listed = tokio::time::timeout(
            self.listing_timeout,
            list_tools(self.session.peer(), wanted),
        )
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "it did not list its tools within {} ms (raise `startup_timeout_ms`)",
                self.listing_timeout.as_millis()
            ))
        });
        let result = match listed {
            Ok(Listed::All(tools)) => Ok(Arc::new(tools)),
            // A filter names fewer tools than the cap; a server that lists one name
            // thousands of times is over it all the same.
            Ok(Listed::OverCap) => Err(super::listing::over_cap_reason(&self.name)),
            Err(_) if *self.oversized.borrow() => Err(oversized_message()),
            Err(reason) => Err(reason),
        };
        named.insert(names.to_vec(), result.clone());
        result
    }

    /// False once the server exited (also a moment before its exit is reported), its
    /// session ended, or it sent a message over the limit (its session is ending).
    pub fn is_alive(&self) -> bool {
        !self.process.has_exited() && !self.session.is_closed() && !*self.oversized.borrow()
    }

    /// The server's pid (its process group).
    pub fn pid(&self) -> u32 {
        self.process.pid
    }

    /// One `tools/call`, always answered: a server that dies, hangs past `timeout` or never
    /// answers in a form the SDK understands gives a failed answer saying so.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Json>,
        timeout: Duration,
        cancel: CancellationToken,
    ) -> EngineAnswer {
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = Some(arguments);
        let mut exit = self.process.exit_watch();
        let peer = self.session.peer().clone();
        let called = peer.call_tool(params);
        enum Outcome {
            Returned(Result<CallToolResult, rmcp::ServiceError>),
            Exited,
            Oversized,
            TimedOut,
            Cancelled,
        }
        let mut oversized = self.oversized.clone();
        let outcome = tokio::select! {
            result = called => Outcome::Returned(result),
            Ok(_) = exit.wait_for(Option::is_some) => Outcome::Exited,
            Ok(_) = oversized.wait_for(|over| *over) => Outcome::Oversized,
            () = tokio::time::sleep(timeout) => Outcome::TimedOut,
            () = cancel.cancelled() => Outcome::Cancelled,
        };
        match outcome {
            // The session ended on a message over the limit: say so, at once.
            Outcome::Oversized => failed(EngineEnding::Failed, oversized_message()),
            Outcome::Returned(Err(_)) if *self.oversized.borrow() => {
                failed(EngineEnding::Failed, oversized_message())
            }
            Outcome::Returned(Ok(result)) => answered(result),
            Outcome::Returned(Err(error)) => {
                let reason =
                    with_exit_and_stderr(format!("the call failed: {error}"), &self.process).await;
                failed(EngineEnding::Failed, reason)
            }
            Outcome::Exited => {
                let reason = with_exit_and_stderr(
                    "the server exited while the call ran".to_string(),
                    &self.process,
                )
                .await;
                failed(EngineEnding::Failed, reason)
            }
            Outcome::TimedOut => failed(
                EngineEnding::TimedOut,
                format!(
                    "no answer within {} ms (the server's `timeout_ms`)",
                    timeout.as_millis()
                ),
            ),
            Outcome::Cancelled => failed(
                EngineEnding::Cancelled,
                "the run stopped while the call ran".to_string(),
            ),
        }
    }

    /// Waits at most `within` for the server's exit to be reported; true when it was.
    pub async fn exited_within(&self, within: Duration) -> bool {
        self.process.exit_within(within).await.is_some()
    }

    /// Ends the session and kills the server's process group.
    pub fn kill(&self) {
        self.session.cancellation_token().cancel();
        self.process.kill();
    }
}

/// How servers are started: through the tool spawner when one runs.
#[derive(Clone, Default)]
pub struct SpawnContext {
    /// The process's tool spawner (`None`: start from this process).
    pub spawner: Option<Arc<crate::tool::spawner::Spawner>>,
}

/// How long a failed exchange waits for the server's exit to be reported, to say why.
const EXIT_REPORT_WAIT: Duration = Duration::from_millis(500);

/// `reason`, with the server's exit status and the end of its stderr when it has exited
/// (or exits within [`EXIT_REPORT_WAIT`]: the pipe closes a moment before the exit is seen).
async fn with_exit_and_stderr(reason: String, process: &ServiceProcess) -> String {
    let Some(status) = process.exit_within(EXIT_REPORT_WAIT).await else {
        return reason;
    };
    let stderr = process.stderr_tail_after_exit().await;
    let exit = match (
        status.code(),
        std::os::unix::process::ExitStatusExt::signal(&status),
    ) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => "ended".to_string(),
    };
    if stderr.is_empty() {
        format!("{reason} (the server exited: {exit})")
    } else {
        format!("{reason} (the server exited: {exit}; its last stderr: {stderr})")
    }
}

fn failed(ending: EngineEnding, reason: String) -> EngineAnswer {
    EngineAnswer {
        text: format!("Error: {reason}"),
        success: false,
        ending,
        details: json!({ "error": reason }),
    }
}

/// The model's text for a result: its content blocks (text as is; images, audio and
/// resources described), or its structured content when it has no content; marked when the
/// tool reported an error.
fn answered(result: CallToolResult) -> EngineAnswer {
    let is_error = result.is_error.unwrap_or(false);
    let mut parts: Vec<String> = result
        .content
        .iter()
        .map(|block| {
            serde_json::to_value(block)
                .map(|v| describe_block(&v))
                .unwrap_or_default()
        })
        .filter(|text| !text.is_empty())
        .collect();
    if parts.is_empty() {
        if let Some(structured) = &result.structured_content {
            parts.push(structured.to_string());
        }
    }
    let mut text = if parts.is_empty() {
        "(no content)".to_string()
    } else {
        parts.join("\n")
    };
    if is_error {
        text = format!("Error (reported by the tool): {text}");
    }
    EngineAnswer {
        text,
        success: !is_error,
        ending: EngineEnding::Answered,
        details: json!({ "is_error": is_error, "content_blocks": result.content.len() }),
    }
}

/// One content block as text: text itself; other kinds as a short bracketed description.
fn describe_block(block: &Json) -> String {
    let field = |name: &str| block.get(name).and_then(Json::as_str).unwrap_or("");
    match field("type") {
        "text" => field("text").to_string(),
        kind @ ("image" | "audio") => format!(
            "[{kind}: {}, {} bytes of base64 data]",
            field("mimeType"),
            field("data").len()
        ),
        "resource" => {
            let resource = block.get("resource").cloned().unwrap_or(Json::Null);
            let uri = resource.get("uri").and_then(Json::as_str).unwrap_or("");
            match resource.get("text").and_then(Json::as_str) {
                Some(text) => format!("[resource {uri}]\n{text}"),
                None => format!(
                    "[resource {uri}: {} bytes of base64 data]",
                    resource
                        .get("blob")
                        .and_then(Json::as_str)
                        .unwrap_or("")
                        .len()
                ),
            }
        }
        "resource_link" => format!("[resource link: {} {}]", field("uri"), field("name")),
        _ => block.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn content_blocks_become_text_for_the_model() {
        let result: CallToolResult = serde_json::from_value(json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///a", "text": "inside"}},
                {"type": "resource_link", "uri": "file:///b", "name": "b"}
            ]
        }))
        .unwrap();
        let answer = answered(result);
        assert!(answer.success);
        assert_eq!(
            answer.text,
            "hello\n[image: image/png, 8 bytes of base64 data]\n[resource file:///a]\ninside\n[resource link: file:///b b]"
        );
    }

    #[test]
    fn a_tool_error_is_marked_and_structured_content_stands_in_for_no_content() {
        let error: CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "text", "text": "Access denied"}], "isError": true
        }))
        .unwrap();
        let answer = answered(error);
        assert!(!answer.success);
        assert_eq!(answer.text, "Error (reported by the tool): Access denied");
        let structured: CallToolResult =
            serde_json::from_value(json!({"content": [], "structuredContent": {"t": 1}})).unwrap();
        assert_eq!(answered(structured).text, r#"{"t":1}"#);
    }
}
