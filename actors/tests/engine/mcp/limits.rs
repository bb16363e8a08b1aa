//! What delta takes from an MCP server, bounded (issue 31, item 4), against hostile servers
//! played by `tests/fixtures/mcp/misbehaving-server.py`: a server listing 100,000 tools
//! (1.7 GiB and 45 s per run before), a tool list whose pages never end, an answer over
//! 16 MiB (dropped by the SDK, so the call waited out its `timeout_ms` as "no answer"), and
//! tool definitions large enough to weigh on every model request.

use std::time::{Duration, Instant};

use delta_actors::journal::ActionStatus;
use delta_actors::{RunStatus, Supervisor};

use super::{misbehaving_server, offered_tools, results, warnings, ECHO_TOOL};
use crate::harness::*;

fn server(name: &str, mode: &str, extra: &str) -> String {
    format!(
        "mcp:\n  {name}:\n    command: python3\n    args: [\"{}\", {mode}]\n{extra}",
        misbehaving_server()
    )
}

/// Regression: a server listing 100,000 tools was taken whole (every model request carried
/// all of them). It is refused, naming the cap and the `tools:` filter; with a filter its
/// named tools are offered (read from its list again, page by page) and can be called.
#[test]
fn a_server_listing_100000_tools_is_refused_naming_the_cap_and_usable_through_tools() {
    let mcp = server("many", "many-tools", "");
    let agent = TestAgent::new("mcp-many", &mcp, ECHO_TOOL);
    let ws = tempfile::tempdir().unwrap();
    let sup = Supervisor::start(fast_config()).unwrap();
    let s = script("steps:\n  - tool: many__tool_5\n  - answer: done\n");
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "t"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    let events = journal(&result);
    let said = warnings(&events);
    assert_eq!(said.len(), 1, "{said:?}");
    for part in [
        "more than 1000 tools",
        "`tools:`",
        "mcp.many",
        "docs/mcp.md",
    ] {
        assert!(said[0].contains(part), "{part:?} missing: {}", said[0]);
    }
    assert_eq!(offered_tools(&result), ["echo", "ask_human"]);
    assert!(
        results(&events)[0].2.contains("cannot be called now"),
        "{:?}",
        results(&events)
    );

    // The same server (one launch: shared) with a `tools:` filter.
    let filtered = TestAgent::new(
        "mcp-many-filtered",
        &format!("{mcp}    tools: [tool_5, tool_99999]\n"),
        ECHO_TOOL,
    );
    let s = script("steps:\n  - tool: many__tool_99999\n  - answer: done\n");
    let result = drive(&sup, new_run(filtered.load(), ws.path(), s, "t2"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    let events = journal(&result);
    assert!(warnings(&events).is_empty(), "{:?}", warnings(&events));
    let mut offered = offered_tools(&result);
    offered.sort();
    assert_eq!(
        offered,
        ["ask_human", "echo", "many__tool_5", "many__tool_99999"]
    );
    let results = results(&events);
    assert_eq!(results[0].1, ActionStatus::Success);
    assert_eq!(results[0].2, "tool_99999 called");
    sup.shutdown();
}

/// Regression: a tool list whose pages never end was read until the start limit, growing
/// all the while. It is given up at the page cap, well within a start limit of a minute.
#[test]
fn a_tool_list_whose_pages_never_end_is_given_up_at_the_page_cap() {
    let mcp = server(
        "endless",
        "endless-pages",
        "    startup_timeout_ms: 60000\n",
    );
    let agent = TestAgent::new("mcp-endless", &mcp, ECHO_TOOL);
    let ws = tempfile::tempdir().unwrap();
    let sup = Supervisor::start(fast_config()).unwrap();
    let s = script("steps:\n  - answer: done\n");
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "t"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    let warnings = warnings(&journal(&result));
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("MCP server `endless` is not available")
            && warnings[0].contains("100 pages"),
        "{}",
        warnings[0]
    );
    assert!(!warnings[0].contains("60000 ms"), "{}", warnings[0]);
    sup.shutdown();
}

/// Regression: an answer over 16 MiB was dropped by the SDK and the call waited out its
/// `timeout_ms` (here ten minutes) as "no answer". It fails at once, naming the limit, and
/// the next call gets a fresh server. An answer under the limit (15 MiB) is taken.
#[test]
fn an_answer_over_16_mib_fails_at_once_naming_the_limit_and_one_under_it_is_taken() {
    let mcp = format!(
        "{}    timeout_ms: 600000\n  fits:\n    command: python3\n    args: [\"{}\", huge-answer]\n    env: {{ MCP_ANSWER_MIB: \"15\" }}\n",
        server("huge", "huge-answer", ""),
        misbehaving_server()
    );
    let agent = TestAgent::new("mcp-huge", &mcp, ECHO_TOOL);
    let ws = tempfile::tempdir().unwrap();
    let sup = Supervisor::start(fast_config()).unwrap();
    let s = script(
        "steps:\n  - tool: huge__huge\n  - tool: huge__echo\n    args: { message: after }\n  - tool: fits__huge\n  - answer: done\n",
    );
    let started = Instant::now();
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "t"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    // Far below the call's ten-minute `timeout_ms`.
    assert!(started.elapsed() < Duration::from_secs(120));
    let results = results(&journal(&result));
    assert_eq!(results[0].1, ActionStatus::Failed, "{}", results[0].2);
    assert!(
        results[0].2.contains("more than 16 MiB") && !results[0].2.contains("no answer"),
        "{}",
        results[0].2
    );
    assert_eq!(results[1].2, "echo: after");
    assert_eq!(results[2].1, ActionStatus::Success);
    assert!(results[2].2.starts_with("yyyy"), "{:.80}", results[2].2);
    sup.shutdown();
}

/// Tool definitions of 512 KiB (64 tools with 8 KiB descriptions) are still offered, with a
/// WARNING naming their size, each server's share and the `tools:` filter.
#[test]
fn large_offered_tool_definitions_are_offered_with_a_warning_naming_the_filter() {
    let mcp = server("big", "big-schemas", "");
    let agent = TestAgent::new("mcp-big", &mcp, ECHO_TOOL);
    let ws = tempfile::tempdir().unwrap();
    let sup = Supervisor::start(fast_config()).unwrap();
    let s = script("steps:\n  - answer: done\n");
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "t"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    let warnings = warnings(&journal(&result));
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    for part in [
        "KiB of JSON",
        "`big`: 64 tools",
        "every model request",
        "`tools:`",
    ] {
        assert!(
            warnings[0].contains(part),
            "{part:?} missing: {}",
            warnings[0]
        );
    }
    assert_eq!(offered_tools(&result).len(), 66);
    sup.shutdown();
}
