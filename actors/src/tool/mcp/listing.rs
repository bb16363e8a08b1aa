//! A server's tool list, read page by page within delta's bounds ([`super::limits`]): at
//! most [`MAX_TOOL_PAGES`] pages, and no more than [`MAX_TOOLS_PER_SERVER`] tools kept. A
//! list over the cap is not kept at all ([`Listed::OverCap`]); read again for one `tools:`
//! filter, only the named tools are kept, page by page, so a server with 100,000 tools
//! costs one page at a time.
//!
//! Must not: start servers, name tools for the model, or decide what a run offers.

use rmcp::model::{PaginatedRequestParams, Tool};
use rmcp::service::{Peer, RoleClient};

use super::limits::{MAX_TOOLS_PER_SERVER, MAX_TOOL_PAGES};

/// What a server's tool list gave.
#[derive(Debug)]
pub enum Listed {
    /// Every tool kept, in the server's order.
    All(Vec<Tool>),
    /// More than [`MAX_TOOLS_PER_SERVER`] tools would have been kept; none are.
    OverCap,
}

/// Reads the server's `tools/list`, every page, keeping the tools `keep` accepts, within
/// [`MAX_TOOL_PAGES`] pages and [`MAX_TOOLS_PER_SERVER`] kept tools. The error says why the
/// list could not be read (the request failed, or the list has too many pages).
pub async fn list_tools(
    peer: &Peer<RoleClient>,
    keep: impl Fn(&Tool) -> bool,
) -> Result<Listed, String> {
    let mut kept = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_TOOL_PAGES {
        let page = peer
            .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
            .await
            .map_err(|e| format!("tools/list failed: {e}"))?;
        for tool in page.tools {
            if keep(&tool) {
                if kept.len() == MAX_TOOLS_PER_SERVER {
                    return Ok(Listed::OverCap);
                }
                kept.push(tool);
            }
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(Listed::All(kept)),
        }
    }
    Err(format!(
        "its tool list goes on past {MAX_TOOL_PAGES} pages (`tools/list` with a cursor), the \
         most delta reads of one server; a list that never ends is a fault of the server \
         (see `mcp:` in docs/mcp.md, \"When a server misbehaves\")"
    ))
}

/// Why a server over [`MAX_TOOLS_PER_SERVER`] is not used, and the fix.
pub fn over_cap_reason(server: &str) -> String {
    format!(
        "it lists more than {MAX_TOOLS_PER_SERVER} tools, the most delta offers of one server; \
         name the ones the agent needs with `tools:` under `mcp.{server}` in agent.yaml (see \
         docs/mcp.md, \"Keys of one server\")"
    )
}
