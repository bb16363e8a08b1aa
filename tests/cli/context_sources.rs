//! Conditional, capped, cached and pipelined context sources (issue 32, spec §2.4.8) end to
//! end through `delta run` against `delta mock-llm`: which system blocks each request carries,
//! what the journal says of the cache, and how a failing stage or a source over its budget
//! fails the run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use crate::harness::*;

const RECIPE: &str = r#"sources:
  - type: file
    id: system_prompt
    path: '${AGENT_HOME}/system_prompt.md'
  - type: file
    id: api_docs
    path: '${AGENT_HOME}/api.md'
    condition: {when: task_contains, pattern: "API|endpoint"}
  - type: file
    id: style
    path: '${AGENT_HOME}/style.md'
    condition: {when: task_matches, pattern: '^Write '}
  - type: file
    id: notes
    path: '${CWD}/NOTES.md'
    condition: {when: file_exists, path: 'NOTES.md'}
  - type: file
    id: extra
    path: '${AGENT_HOME}/extra.md'
    condition: {when: env_set, name: USE_EXTRA}
  - type: file
    id: big
    path: '${AGENT_HOME}/big.md'
    max_tokens: 100
  - type: computed_file
    id: analysis
    generator: {command: [sh, '${AGENT_HOME}/analyse.sh']}
    output_path: '${CWD}/.delta/context_artifacts/analysis.md'
    cache: {strategy: file_hash, invalidate_on: ['src/**/*.py']}
  - type: pipeline
    id: docs
    stages:
      - generator: [sh, '${AGENT_HOME}/retrieve.sh']
        output: '${CWD}/.delta/tmp/docs.txt'
      - generator: [sh, '${AGENT_HOME}/rank.sh']
        output: '${CWD}/.delta/tmp/ranked.md'
  - type: journal
    id: conversation_history
"#;

/// The agent: one tool, the recipe above and the files its sources read.
fn sourced_case() -> Case {
    let script = json!({
        "default_latency": 0,
        "steps": [{"tool": "say", "args": {"message": "hi"}}, {"answer": "done"}],
    });
    let case = Case::new(
        "sourced",
        "tools:\n  - name: say\n    description: Print a message\n    exec: \"echo ${message}\"\n",
        &script,
    );
    let agent = case.agent_dir();
    let write = |name: &str, text: &str| std::fs::write(agent.join(name), text).unwrap();
    write("context.yaml", RECIPE);
    write("api.md", "API-DOCS: GET /items lists the items.");
    write("style.md", "STYLE-GUIDE: short sentences.");
    write("extra.md", "EXTRA-BLOCK");
    write(
        "big.md",
        &format!("BIG-HEAD {} BIG-TAIL", "filler ".repeat(400)),
    );
    // Counts its runs, and lists the watched files it read.
    write(
        "analyse.sh",
        "n=$(cat \"$DELTA_CWD/.delta/analysis-runs\" 2>/dev/null || echo 0)\nn=$((n + 1))\necho $n > \"$DELTA_CWD/.delta/analysis-runs\"\nmkdir -p .delta/context_artifacts\nprintf 'ANALYSIS run %s\\n' \"$n\" > .delta/context_artifacts/analysis.md\n",
    );
    write(
        "retrieve.sh",
        "printf 'doc-a\\ndoc-b\\n' > \"$DELTA_PIPELINE_OUTPUT\"\n",
    );
    write(
        "rank.sh",
        "{ echo \"RANKED (stage $DELTA_PIPELINE_STAGE):\"; sort -r \"$DELTA_PIPELINE_INPUT\"; } > \"$DELTA_PIPELINE_OUTPUT\"\n",
    );
    std::fs::create_dir_all(case.work_dir().join("src")).unwrap();
    std::fs::create_dir_all(case.work_dir().join(".delta/tmp")).unwrap();
    std::fs::write(case.work_dir().join("src/a.py"), "print('a')\n").unwrap();
    case
}

/// The system blocks of each answered call of a run: `(id, text)` in order.
fn blocks(case: &Case, run_id: &str) -> Vec<Vec<(String, String)>> {
    let mut records: Vec<_> = files_under(&case.run_dir(run_id).join("io/invocations"));
    records.sort();
    records
        .iter()
        .map(|p| read_json(p))
        .filter(|r| r.get("error").is_none())
        .map(|r| {
            r["request"]["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["role"] == "system")
                .map(|m| {
                    let text = m["content"].as_str().unwrap();
                    let rest = text.strip_prefix("# Context Block: ").unwrap();
                    let (id, body) = rest.split_once("\n\n").unwrap();
                    (id.to_string(), body.to_string())
                })
                .collect()
        })
        .collect()
}

fn ids(blocks: &[(String, String)]) -> Vec<&str> {
    blocks.iter().map(|(id, _)| id.as_str()).collect()
}

fn text_of<'a>(blocks: &'a [(String, String)], id: &str) -> &'a str {
    blocks
        .iter()
        .find(|(i, _)| i == id)
        .map(|(_, t)| t.as_str())
        .unwrap_or_else(|| panic!("no block {id} in {:?}", ids(blocks)))
}

fn cache_events(case: &Case, run_id: &str) -> Vec<(bool, String)> {
    events_of(&case.journal(run_id), "CONTEXT_CACHE")
        .iter()
        .map(|e| {
            assert_eq!(e["source"], "analysis", "{e}");
            (
                e["hit"].as_bool().unwrap(),
                e["key"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn conditions_caps_caches_and_pipelines_shape_each_request() {
    let case = sourced_case();
    std::fs::write(
        case.work_dir().join("NOTES.md"),
        "NOTES: remember the milk.",
    )
    .unwrap();
    let out = case
        .cmd()
        .env("USE_EXTRA", "1")
        .args(case.run_args("first", "Call the API endpoint and report."))
        .args(["--format", "json", "-y"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = blocks(&case, "first");
    assert_eq!(calls.len(), 2);
    for call in &calls {
        assert_eq!(
            ids(call),
            [
                "system_prompt",
                "api_docs",
                "notes",
                "extra",
                "big",
                "analysis",
                "docs"
            ]
        );
        let big = text_of(call, "big");
        assert!(
            big.starts_with("BIG-HEAD") && big.ends_with("BIG-TAIL"),
            "{big}"
        );
        assert!(
            big.contains("cut here: source 'big' has `max_tokens: 100` in context.yaml"),
            "{big}"
        );
        assert!(big.contains("/big.md"), "the marker names the file: {big}");
        assert!(big.len() < 600, "{}", big.len());
        assert_eq!(text_of(call, "docs"), "RANKED (stage 2):\ndoc-b\ndoc-a\n");
        // Run once: the second request found the cache.
        assert_eq!(text_of(call, "analysis"), "ANALYSIS run 1\n");
    }
    let first = cache_events(&case, "first");
    assert_eq!(first.len(), 2, "{first:?}");
    assert_eq!((first[0].0, first[1].0), (false, true));
    assert_eq!(first[0].1, first[1].1);

    // Another run in the same workspace: other conditions hold, and a watched file changed.
    std::fs::remove_file(case.work_dir().join("NOTES.md")).unwrap();
    std::fs::write(case.work_dir().join("src/a.py"), "print('changed')\n").unwrap();
    case.run("second", "Write the weekly report.", &["-y"])
        .assert_code(0);
    let calls = blocks(&case, "second");
    assert_eq!(
        ids(&calls[0]),
        ["system_prompt", "style", "big", "analysis", "docs"]
    );
    assert_eq!(text_of(&calls[1], "analysis"), "ANALYSIS run 2\n");
    let second = cache_events(&case, "second");
    assert_eq!((second[0].0, second[1].0), (false, true), "{second:?}");
    assert_ne!(second[0].1, first[0].1, "the key follows the watched files");
}

#[test]
fn a_failing_pipeline_stage_or_a_source_over_its_budget_fails_the_run_naming_it() {
    let case = sourced_case();
    std::fs::write(
        case.agent_dir().join("rank.sh"),
        "echo 'no ranking today' >&2\nexit 3\n",
    )
    .unwrap();
    let out = case.run("stage", "go", &["-y"]);
    out.assert_code(1);
    let error = &out.json()["error"];
    assert_eq!(error["type"], "context_error", "{error}");
    let message = error["message"].as_str().unwrap();
    for phrase in [
        "context source 'docs'",
        "(pipeline stage 2 of 2) exited with code 3",
        "no ranking today",
    ] {
        assert!(message.contains(phrase), "{phrase}: {message}");
    }

    let case = sourced_case();
    let recipe = RECIPE.replace(
        "    max_tokens: 100\n",
        "    max_tokens: 100\n    on_overflow: fail\n",
    );
    std::fs::write(case.agent_dir().join("context.yaml"), recipe).unwrap();
    let out = case.run("over", "go", &["-y"]);
    out.assert_code(1);
    let message = out.json()["error"]["message"].as_str().unwrap().to_string();
    for phrase in [
        "context source 'big'",
        "big.md is about",
        "more than its `max_tokens: 100`",
        "on_overflow: cut",
    ] {
        assert!(message.contains(phrase), "{phrase}: {message}");
    }
}

/// The window's source is in metadata.json: the catalogue for a model it lists, and
/// `DELTA_CONTEXT_WINDOW` over it; a bad value of the variable is refused up front.
#[test]
fn the_window_and_its_source_are_recorded_and_a_bad_variable_is_refused() {
    let case = sourced_case();
    std::fs::write(
        case.agent_dir().join("context.yaml"),
        crate::harness::CONTEXT_YAML,
    )
    .unwrap();
    let agent = case.agent_dir().join("agent.yaml");
    let text = std::fs::read_to_string(&agent).unwrap();
    std::fs::write(
        &agent,
        text.replace("model: scripted", "model: gpt-4o-mini"),
    )
    .unwrap();
    case.run("catalogued", "go", &["-y"]).assert_code(0);
    let window = &case.metadata("catalogued")["context_window"];
    assert_eq!(window["tokens"], 128_000, "{window}");
    assert_eq!(window["source"], "catalogue", "{window}");
    assert!(
        window["detail"].as_str().unwrap().contains("litellm"),
        "{window}"
    );

    let out = case
        .cmd()
        .env("DELTA_CONTEXT_WINDOW", "32768")
        .args(case.run_args("from-env", "go"))
        .args(["--format", "json", "-y"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let window = &case.metadata("from-env")["context_window"];
    assert_eq!(
        (window["tokens"].as_u64(), window["source"].as_str()),
        (Some(32_768), Some("DELTA_CONTEXT_WINDOW"))
    );

    let refused = case
        .cmd()
        .env("DELTA_CONTEXT_WINDOW", "lots")
        .args(case.run_args("bad", "go"))
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(126));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("DELTA_CONTEXT_WINDOW='lots' is not a number of tokens"),
        "{stderr}"
    );
    assert!(!case.run_dir("bad").exists(), "nothing is created");
}
