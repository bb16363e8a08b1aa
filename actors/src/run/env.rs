//! The environments a run's children inherit: tools (complete, secrets removed, the run's
//! `DELTA_*` variables added) and context generators. (MCP servers, shared by runs, get the
//! same scrubbing without the run's variables: `tool::kind::registry::server_environment`.)
//!
//! Must not: read the process environment (the request carries the resolved one).

use std::collections::BTreeMap;

use crate::request::{RunRequest, SupervisorConfig};
use crate::tool::process::build_child_env;
use crate::workspace::RunPaths;

/// Environment for tools (complete, secrets removed) and for context generators.
pub(super) fn child_environments(
    run_id: &str,
    request: &RunRequest,
    config: &SupervisorConfig,
    paths: &RunPaths,
) -> (Vec<(String, String)>, BTreeMap<String, String>) {
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
    let tools = build_child_env(
        &request.env,
        &secrets,
        &extra,
        config.tool_path_dir.as_deref(),
    );
    let generators: BTreeMap<String, String> =
        build_child_env(&request.env, &secrets, &[], config.tool_path_dir.as_deref())
            .into_iter()
            .collect();
    (tools, generators)
}
