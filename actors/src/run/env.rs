//! The environments a run's children inherit: tools (complete, secrets removed, the run's
//! `DELTA_*` variables added) and context generators. (MCP servers, shared by runs, get the
//! same scrubbing without the run's variables: `tool::kind::registry::server_environment`.)
//!
//! A traced run (its request carries a span) also sets `TRACEPARENT`/`TRACESTATE` for its
//! children, replacing any the engine inherited: tools get their own call's span (see
//! [`tool_call_environment`]), hooks and context generators the run's.
//!
//! Must not: read the process environment (the request carries the resolved one).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::protocol::{TraceSpan, TRACE_ENV_VARS};

use crate::request::{RunRequest, SupervisorConfig};
use crate::tool::process::build_child_env;
use crate::workspace::RunPaths;

/// The environment of the run's tools: complete, secrets removed, the run's `DELTA_*`
/// variables added.
pub(super) fn tool_environment(
    run_id: &str,
    request: &RunRequest,
    config: &SupervisorConfig,
    paths: &RunPaths,
) -> Vec<(String, String)> {
    let secrets = request.agent.secret_env_names();
    let home = request.agent.home.to_string_lossy().into_owned();
    let cwd = request.work_dir.to_string_lossy().into_owned();
    let extra = vec![
        ("DELTA_RUN_ID".to_string(), run_id.to_string()),
        (
            "DELTA_RUN_DIR".to_string(),
            paths.run_dir.to_string_lossy().into_owned(),
        ),
        ("DELTA_AGENT_HOME".to_string(), home.clone()),
        ("DELTA_CWD".to_string(), cwd),
        ("AGENT_HOME".to_string(), home),
    ];
    let mut tools = build_child_env(
        &request.env,
        &secrets,
        &extra,
        config.tool_path_dir.as_deref(),
    );
    if let Some(trace) = &request.trace {
        set_trace_context(&mut tools, trace);
    }
    tools
}

/// The environment of the run's context generators (secrets removed; the generator adds
/// the run's variables itself), and what `env_set` conditions read. Built only for a recipe
/// that reads it ([`ContextRecipe::reads_child_environment`]), on its first build.
///
/// [`ContextRecipe::reads_child_environment`]: crate::agent::ContextRecipe::reads_child_environment
pub(super) fn generator_environment(
    request: &RunRequest,
    config: &SupervisorConfig,
) -> BTreeMap<String, String> {
    let secrets = request.agent.secret_env_names();
    let mut generators =
        build_child_env(&request.env, &secrets, &[], config.tool_path_dir.as_deref());
    if let Some(trace) = &request.trace {
        set_trace_context(&mut generators, trace);
    }
    generators.into_iter().collect()
}

/// Replaces the trace context in `env` (any `TRACEPARENT`/`TRACESTATE` inherited) with
/// `trace`'s.
pub(crate) fn set_trace_context(env: &mut Vec<(String, String)>, trace: &TraceSpan) {
    env.retain(|(name, _)| !TRACE_ENV_VARS.contains(&name.as_str()));
    env.extend(trace.environment());
}

/// The environment of one tool call of a traced run: the run's tool environment with the
/// call's own span as `TRACEPARENT` (the run's span's child `("tool", <action id>)`, the
/// span an exporter builds from the call's events). The run's environment, shared, when
/// the run is not traced.
pub(super) fn tool_call_environment(
    run_env: &Arc<Vec<(String, String)>>,
    run_trace: Option<&TraceSpan>,
    action_id: &str,
) -> Arc<Vec<(String, String)>> {
    match run_trace {
        None => Arc::clone(run_env),
        Some(trace) => {
            let mut env = run_env.as_ref().clone();
            set_trace_context(&mut env, &trace.child("tool", action_id));
            Arc::new(env)
        }
    }
}
