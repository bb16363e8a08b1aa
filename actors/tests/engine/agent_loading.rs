//! Engine-level tests of agent loading: locating the main file, imports (relative paths,
//! diamonds, cycles, symlinks, merge order), hooks, context recipe and tool invocation
//! through a loaded agent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use delta_actors::agent::{
    default_context_yaml, load_agent, load_tool_library, AgentError, ContextSource, HookName,
    ResolvedAgent, UnknownKeyError,
};
use delta_actors::tool::compile::{EngineVars, ToolSyntax};
use serde_json::json;

/// A throwaway agent folder: agent.yaml, system_prompt.md and the default context.yaml.
struct AgentDir {
    _root: tempfile::TempDir,
    home: PathBuf,
}

impl AgentDir {
    fn new(agent_yaml: &str) -> Self {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("agent");
        std::fs::create_dir(&home).unwrap();
        let dir = AgentDir { _root: root, home };
        dir.write("agent.yaml", agent_yaml);
        dir.write("system_prompt.md", "You are a test agent.\n");
        dir.write("context.yaml", default_context_yaml());
        dir
    }

    fn write(&self, relative: &str, text: &str) {
        let path = self.home.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn load(&self) -> ResolvedAgent {
        load_agent(&self.home).unwrap()
    }

    fn error(&self) -> String {
        load_agent(&self.home).unwrap_err().to_string()
    }
}

const HEAD: &str = "name: t\nllm:\n  model: m\n";

fn names(agent: &ResolvedAgent) -> Vec<&str> {
    agent.tools.iter().map(|t| t.name.as_str()).collect()
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/agents")
        .join(name)
}

#[test]
fn the_tool_syntax_example_loads_completely() {
    let agent = load_agent(&example("tool-syntax")).unwrap();
    assert!(agent.warnings.is_empty(), "{:?}", agent.warnings);
    assert_eq!(agent.name, "tool-syntax");
    assert_eq!(agent.llm.model, "gpt-4o-mini");
    assert_eq!(agent.llm.temperature, Some(0.2));
    assert_eq!(agent.max_iterations, Some(20));
    assert!(!agent.parallel_tool_calls);
    assert!(agent.home.is_absolute());
    assert_eq!(agent.config_file, agent.home.join("agent.yaml"));
    assert_eq!(
        agent.system_prompt_path,
        agent.home.join("system_prompt.md")
    );
    assert_eq!(agent.context.sources.len(), 3);
    assert!(agent.hooks.is_empty());
    let syntaxes: Vec<ToolSyntax> = agent.tools.iter().map(|t| t.syntax).collect();
    assert!(
        syntaxes.contains(&ToolSyntax::Exec)
            && syntaxes.contains(&ToolSyntax::Shell)
            && syntaxes.contains(&ToolSyntax::Legacy)
    );
    let greet = agent.tool("greet").unwrap();
    assert_eq!(
        greet.source_file,
        agent.home.join("agent.yaml"),
        "the local definition wins"
    );
    assert_eq!(
        agent.tool("today").unwrap().source_file,
        agent.home.join("tools/common.yaml")
    );
}

#[test]
fn the_hello_world_example_uses_the_default_recipe() {
    let agent = load_agent(&example("hello-world")).unwrap();
    assert_eq!(
        std::fs::read_to_string(agent.home.join("context.yaml")).unwrap(),
        default_context_yaml()
    );
    assert_eq!(
        names(&agent),
        [
            "print_message",
            "create_file",
            "write_to_file",
            "list_files",
            "show_date"
        ]
    );
}

#[test]
fn tools_run_through_a_loaded_agent_with_engine_variables() {
    let agent = load_agent(&example("tool-syntax")).unwrap();
    let vars = EngineVars {
        agent_home: agent.home.clone(),
        cwd: PathBuf::from("/work/W001"),
        run_id: "r1".into(),
    };
    let helper = agent.tool("run_helper").unwrap();
    let inv = helper
        .build_invocation(json!({"file": "a b.txt"}).as_object().unwrap(), &vars)
        .unwrap();
    assert_eq!(
        inv.argv,
        vec![
            format!("{}/tools/helper.sh", agent.home.display()),
            "--workspace=/work/W001".to_string(),
            "--run=r1".to_string(),
            "a b.txt".to_string()
        ]
    );
    let output = std::process::Command::new(&inv.argv[0])
        .args(&inv.argv[1..])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        "args: --workspace=/work/W001 --run=r1 a b.txt\n"
    );
    let post = agent.tool("http_post").unwrap();
    let inv = post
        .build_invocation(
            json!({"url": "http://127.0.0.1:9/x", "body": "{}", "max_time": 3})
                .as_object()
                .unwrap(),
            &vars,
        )
        .unwrap();
    assert_eq!(
        inv.argv,
        [
            "curl",
            "-s",
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "http://127.0.0.1:9/x",
            "--max-time",
            "3"
        ]
    );
    assert_eq!(inv.stdin.as_deref(), Some("{}"));
}

#[test]
fn the_main_file_can_be_named_directly() {
    let dir = AgentDir::new(HEAD);
    let agent = load_agent(&dir.home.join("agent.yaml")).unwrap();
    assert_eq!(agent.home, std::fs::canonicalize(&dir.home).unwrap());
}

#[test]
fn config_yaml_is_deprecated_and_agent_yaml_wins_over_it() {
    let dir = AgentDir::new(HEAD);
    std::fs::rename(dir.home.join("agent.yaml"), dir.home.join("config.yaml")).unwrap();
    let agent = dir.load();
    assert!(agent.config_file.ends_with("config.yaml"));
    assert!(
        agent.warnings[0].contains("config.yaml is deprecated; rename it to agent.yaml"),
        "{:?}",
        agent.warnings
    );

    dir.write("agent.yaml", "name: from-agent-yaml\nllm: {model: m}\n");
    let agent = dir.load();
    assert_eq!(agent.name, "from-agent-yaml");
    assert!(
        agent.warnings[0].contains("both agent.yaml and config.yaml exist; using agent.yaml"),
        "{:?}",
        agent.warnings
    );
}

#[test]
fn imports_resolve_relative_to_the_importing_file() {
    let dir = AgentDir::new(&format!("{HEAD}imports: [./lib/a.yaml]\n"));
    dir.write(
        "lib/a.yaml",
        "imports: [./b.yaml, ../shared/c.yaml]\ntools:\n  - {name: a, exec: echo a}\n",
    );
    dir.write("lib/b.yaml", "tools:\n  - {name: b, exec: echo b}\n");
    dir.write("shared/c.yaml", "tools:\n  - {name: c, exec: echo c}\n");
    assert_eq!(names(&dir.load()), ["b", "c", "a"]);
}

#[test]
fn a_diamond_import_loads_the_shared_file_once() {
    let dir = AgentDir::new(&format!(
        "{HEAD}imports: [./x.yaml, ./y.yaml, ./common.yaml]\n"
    ));
    dir.write(
        "x.yaml",
        "imports: [./common.yaml]\ntools:\n  - {name: x, exec: echo x}\n",
    );
    dir.write(
        "y.yaml",
        "imports: [./common.yaml]\ntools:\n  - {name: y, exec: echo y}\n",
    );
    dir.write("common.yaml", "tools:\n  - {name: common, exec: echo c}\n");
    let agent = dir.load();
    assert_eq!(names(&agent), ["common", "x", "y"]);
    assert!(agent.warnings.is_empty(), "{:?}", agent.warnings);
}

#[test]
fn last_definition_wins_and_takes_the_last_position() {
    let dir = AgentDir::new(&format!(
        "{HEAD}imports: [./one.yaml, ./two.yaml]\ntools:\n  - {{name: local, exec: echo local}}\n  - {{name: shared, exec: echo local-shared}}\n"
    ));
    dir.write(
        "one.yaml",
        "tools:\n  - {name: shared, exec: echo one}\n  - {name: first, exec: echo first}\n",
    );
    dir.write(
        "two.yaml",
        "tools:\n  - {name: shared, exec: echo two}\n  - {name: second, exec: echo second}\n",
    );
    let agent = dir.load();
    assert_eq!(names(&agent), ["first", "second", "local", "shared"]);
    assert_eq!(
        agent.tool("shared").unwrap().command,
        vec!["echo", "local-shared"]
    );
}

#[test]
fn overriding_between_imports_moves_the_winner_to_the_end() {
    let dir = AgentDir::new(&format!("{HEAD}imports: [./one.yaml, ./two.yaml]\n"));
    dir.write(
        "one.yaml",
        "tools:\n  - {name: greet, exec: echo Hello}\n  - {name: other, exec: echo o}\n",
    );
    dir.write(
        "two.yaml",
        "tools:\n  - {name: greet, exec: echo Bonjour}\n",
    );
    let agent = dir.load();
    assert_eq!(names(&agent), ["other", "greet"]);
    assert_eq!(
        agent.tool("greet").unwrap().command,
        vec!["echo", "Bonjour"]
    );
}

#[test]
fn a_duplicate_in_one_file_warns() {
    let dir = AgentDir::new(&format!(
        "{HEAD}tools:\n  - {{name: d, exec: echo 1}}\n  - {{name: d, exec: echo 2}}\n"
    ));
    let agent = dir.load();
    assert_eq!(agent.tool("d").unwrap().command, vec!["echo", "2"]);
    assert!(
        agent.warnings[0].contains("tool `d` is defined twice in this file"),
        "{:?}",
        agent.warnings
    );
}

#[test]
fn a_symlink_that_stays_inside_the_agent_is_allowed() {
    let dir = AgentDir::new(&format!("{HEAD}imports: [./link.yaml]\n"));
    dir.write("real/tools.yaml", "tools:\n  - {name: r, exec: echo r}\n");
    std::os::unix::fs::symlink(dir.home.join("real/tools.yaml"), dir.home.join("link.yaml"))
        .unwrap();
    assert_eq!(names(&dir.load()), ["r"]);
}

#[test]
fn a_symlink_escaping_the_agent_is_refused_with_where_it_resolved() {
    let dir = AgentDir::new(&format!("{HEAD}imports: [./link.yaml]\n"));
    let outside = dir.home.parent().unwrap().join("outside.yaml");
    std::fs::write(&outside, "tools: []\n").unwrap();
    std::os::unix::fs::symlink(&outside, dir.home.join("link.yaml")).unwrap();
    let err = dir.error();
    assert!(err.contains("import `./link.yaml` resolves to"), "{err}");
    assert!(err.contains("outside.yaml"), "{err}");
    assert!(err.contains("outside the agent folder"), "{err}");
    assert!(
        err.contains("agent.yaml"),
        "names the importing file: {err}"
    );
}

#[test]
fn a_cycle_names_the_chain() {
    let dir = AgentDir::new(&format!("{HEAD}imports: [./a.yaml]\n"));
    dir.write("a.yaml", "imports: [./b.yaml]\n");
    dir.write("b.yaml", "imports: [./a.yaml]\n");
    let err = dir.error();
    assert!(
        err.contains("creates a cycle: agent.yaml -> a.yaml -> b.yaml -> a.yaml"),
        "{err}"
    );
    assert!(
        err.contains("b.yaml`:"),
        "the error is about the importing file: {err}"
    );
}

#[test]
fn imported_files_contribute_tools_only() {
    let lib = "name: lib\nllm: {model: other}\ntools:\n  - {name: l, exec: echo l}\n";
    // An agent's key in a tools file is refused (it never applied)...
    let dir = AgentDir::new(&format!("{HEAD}imports: [./lib.yaml]\n"));
    dir.write("lib.yaml", lib);
    let error = dir.error();
    assert!(
        error.contains("lib.yaml`: unknown key `llm`")
            && error.contains("the keys here are: tools, imports, name, description, version"),
        "{error}"
    );
    // ...and, under `strict: false`, ignored with a warning.
    let dir = AgentDir::new(&format!("strict: false\n{HEAD}imports: [./lib.yaml]\n"));
    dir.write("lib.yaml", lib);
    let agent = dir.load();
    assert_eq!(agent.llm.model, "m");
    assert_eq!(names(&agent), ["l"]);
    assert!(
        agent
            .warnings
            .iter()
            .any(|w| w.contains("lib.yaml: unknown key `llm`")),
        "{:?}",
        agent.warnings
    );
}

#[test]
fn bad_imports_are_errors_naming_the_import() {
    for (imports, phrase) in [
        (
            "[/etc/hostname]",
            "import `/etc/hostname` is an absolute path",
        ),
        ("[../x.yaml]", "import `../x.yaml` not found"),
        ("['']", "an import path is empty"),
        ("[42]", "`imports[0]` must be a relative path"),
        ("[./lib]", "import `./lib` is not a file"),
    ] {
        let dir = AgentDir::new(&format!("{HEAD}imports: {imports}\n"));
        std::fs::create_dir_all(dir.home.join("lib")).unwrap();
        let err = dir.error();
        assert!(err.contains(phrase), "{imports}: {err}");
    }
}

#[test]
fn hooks_yaml_is_read_and_wins_over_lifecycle_hooks() {
    let dir = AgentDir::new(&format!(
        "{HEAD}lifecycle_hooks:\n  on_error:\n    command: [old]\n"
    ));
    let agent = dir.load();
    assert_eq!(
        agent.hooks.get(HookName::OnError).unwrap().command,
        vec!["old"]
    );
    assert!(
        agent
            .warnings
            .iter()
            .any(|w| w.contains("`lifecycle_hooks` in agent.yaml is deprecated")),
        "{:?}",
        agent.warnings
    );

    dir.write("hooks.yaml", "on_error:\n  command: [new, '${AGENT_HOME}/x']\n  timeout_ms: 1000\non_run_end:\n  command: [cleanup]\n");
    let agent = dir.load();
    let on_error = agent.hooks.get(HookName::OnError).unwrap();
    assert_eq!(on_error.command, vec!["new", "${AGENT_HOME}/x"]);
    assert_eq!(on_error.timeout_ms, Some(1000));
    assert!(agent.hooks.get(HookName::OnRunEnd).is_some());
    assert!(agent.hooks.get(HookName::PreLlmRequest).is_none());
    assert!(
        agent
            .warnings
            .iter()
            .any(|w| w.contains("`lifecycle_hooks` is ignored because hooks.yaml exists")),
        "{:?}",
        agent.warnings
    );
}

#[test]
fn the_system_prompt_can_be_configured_or_legacy_txt() {
    let dir = AgentDir::new(&format!("{HEAD}system_prompt: prompts/main.md\n"));
    dir.write("prompts/main.md", "Custom.\n");
    assert!(dir.load().system_prompt_path.ends_with("prompts/main.md"));

    let dir = AgentDir::new(HEAD);
    std::fs::rename(
        dir.home.join("system_prompt.md"),
        dir.home.join("system_prompt.txt"),
    )
    .unwrap();
    assert!(dir.load().system_prompt_path.ends_with("system_prompt.txt"));
}

#[test]
fn missing_context_yaml_carries_the_default_recipe() {
    let dir = AgentDir::new(HEAD);
    std::fs::remove_file(dir.home.join("context.yaml")).unwrap();
    let err = load_agent(&dir.home).unwrap_err();
    assert!(matches!(err, AgentError::MissingContext { .. }));
    assert!(err.to_string().contains(default_context_yaml()));
}

#[test]
fn context_sources_keep_their_variables_for_run_time() {
    let dir = AgentDir::new(HEAD);
    dir.write(
        "context.yaml",
        "sources:\n  - type: computed_file\n    id: summary\n    generator:\n      command: ['${AGENT_HOME}/gen.sh', '${CWD}']\n      timeout_ms: 500\n    output_path: '${CWD}/s.md'\n    on_missing: skip\n  - type: journal\n    max_iterations: 3\n",
    );
    let agent = dir.load();
    match &agent.context.sources[0] {
        ContextSource::ComputedFile {
            id,
            command,
            timeout_ms,
            ..
        } => {
            assert_eq!(id, "summary");
            assert_eq!(
                command,
                &vec!["${AGENT_HOME}/gen.sh".to_string(), "${CWD}".to_string()]
            );
            assert_eq!(*timeout_ms, 500);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        agent.context.sources[1],
        ContextSource::Journal {
            id: "journal".into(),
            max_iterations: Some(3),
            compaction: Default::default(),
        }
    );
}

/// Issue 24 item 18: a typo in any agent file (`tool:` for `tools:`) was a warning, and the
/// agent ran without what it meant; each is an error naming the file, the key and the
/// closest known key.
#[test]
fn unknown_keys_in_every_agent_file_are_errors_naming_file_key_and_closest_key() {
    let tool = "tools:\n  - name: x\n    exec: echo ${m}\n";
    for (file, text, key, closest) in [
        ("agent.yaml", format!("{HEAD}tool: []\n"), "tool", Some("tools")),
        ("agent.yaml", "name: t\nllm:\n  model: m\n  temprature: 1\n".to_owned(), "llm.temprature", Some("temperature")),
        ("agent.yaml", format!("{HEAD}{tool}    descripton: x\n"), "tools[0].descripton", Some("description")),
        ("agent.yaml", format!("{HEAD}{tool}    parameters:\n      - name: m\n        descripton: typo\n"), "tools[0].parameters[0].descripton", Some("description")),
        ("context.yaml", "source:\n  - type: journal\n".to_owned(), "source", Some("sources")),
        ("context.yaml", "sources:\n  - type: journal\n    max_iteration: 3\n".to_owned(), "sources[0].max_iteration", Some("max_iterations")),
        ("context.yaml", "sources:\n  - type: computed_file\n    output_path: o\n    generator: {command: [x], timeout: 5}\n".to_owned(), "sources[0].generator.timeout", Some("timeout_ms")),
        ("hooks.yaml", "on_run_ends:\n  command: [x]\n".to_owned(), "on_run_ends", Some("on_run_end")),
        ("hooks.yaml", "on_error:\n  comand: [x]\n".to_owned(), "on_error.comand", Some("command")),
        ("tools/lib.yaml", "tool:\n  - {name: l, exec: echo l}\n".to_owned(), "tool", Some("tools")),
    ] {
        let dir = AgentDir::new(&format!("{HEAD}imports: [./tools/lib.yaml]\n"));
        dir.write("tools/lib.yaml", "tools: []\n");
        dir.write(file, &text);
        match load_agent(&dir.home) {
            Err(AgentError::UnknownKey(UnknownKeyError {
                file: found_file,
                key: found_key,
                closest: found_closest,
                ..
            })) => {
                assert!(found_file.ends_with(file), "{file}: {}", found_file.display());
                assert_eq!(
                    (found_key.as_str(), found_closest.as_deref()),
                    (key, closest),
                    "{file}: {text}"
                );
            }
            other => panic!("{file}: {text}: {:?}", other.map(|a| a.warnings)),
        }
    }
}

/// `strict: false` in agent.yaml: unknown keys in every file of the agent are warnings.
#[test]
fn under_strict_false_unknown_keys_everywhere_are_warnings_naming_the_file() {
    let dir = AgentDir::new(&format!("strict: false\n{HEAD}timeout_seconds: 5\ntools:\n  - name: x\n    exec: echo ${{m}}\n    parameters:\n      - name: m\n        descripton: typo\n"));
    dir.write(
        "context.yaml",
        "sources:\n  - type: journal\n    max_iteration: 3\n",
    );
    let agent = dir.load();
    let all = agent.warnings.join("\n");
    assert!(
        all.contains(
            "unknown key `tools[0].parameters[0].descripton` (did you mean `description`?)"
        ),
        "{all}"
    );
    assert!(
        all.contains(
            "context.yaml: unknown key `sources[0].max_iteration` (did you mean `max_iterations`?)"
        ),
        "{all}"
    );
    assert!(
        all.contains("`timeout_seconds` is not used by delta"),
        "{all}"
    );
}

#[test]
fn a_tools_file_can_be_loaded_on_its_own() {
    let dir = AgentDir::new(HEAD);
    dir.write(
        "tools/lib.yaml",
        "imports: [./more.yaml]\ntools:\n  - {name: a, exec: echo a}\n",
    );
    dir.write(
        "tools/more.yaml",
        "tools:\n  - {name: b, shell: 'echo b | cat'}\n",
    );
    let library = load_tool_library(&dir.home.join("tools/lib.yaml")).unwrap();
    assert_eq!(
        library
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["b", "a"]
    );
    // Standalone, imports may not leave the file's own folder.
    dir.write("tools/escape.yaml", "imports: [../agent.yaml]\n");
    let err = load_tool_library(&dir.home.join("tools/escape.yaml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("outside the agent folder"), "{err}");
}

#[test]
fn the_ask_human_name_is_reserved_even_in_imports() {
    let dir = AgentDir::new(&format!("{HEAD}imports: [./lib.yaml]\n"));
    dir.write("lib.yaml", "tools:\n  - {name: ask_human, exec: echo hi}\n");
    let err = dir.error();
    assert!(err.contains("lib.yaml"), "{err}");
    assert!(err.contains("`ask_human` is a built-in tool"), "{err}");
}

#[test]
fn openai_tools_lists_every_tool_then_ask_human() {
    let agent = load_agent(&example("hello-world")).unwrap();
    let tools = agent.openai_tools();
    let names: Vec<&str> = tools
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "print_message",
            "create_file",
            "write_to_file",
            "list_files",
            "show_date",
            "ask_human"
        ]
    );
    assert_eq!(tools[0]["function"]["description"], "Print a message");
    assert_eq!(tools[3]["function"]["parameters"]["required"], json!([]));
}

/// Issue 24 item 22: docs/agent.md cannot drift from the loader: every key an agent's files
/// accept (the lists the loader refuses unknown keys against) is documented there.
#[test]
fn every_key_the_agent_files_accept_is_in_the_agent_reference() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/agent.md"))
            .unwrap();
    let keys = delta_actors::agent::known_key_paths();
    assert!(keys.len() >= 50, "{keys:?}");
    let missing: Vec<String> = keys
        .iter()
        .filter(|(_, key)| !doc.contains(&format!("`{key}`")))
        .map(|(file, key)| format!("{file}: {key}"))
        .collect();
    assert!(
        missing.is_empty(),
        "keys missing from docs/agent.md: {missing:?}"
    );
}

/// Issue 26: `mcp:` lists Model Context Protocol servers; their tools are offered as
/// `<server>__<tool>`, so an agent tool may not take a name in a server's namespace.
#[test]
fn an_agent_tool_named_in_an_mcp_servers_namespace_is_refused() {
    let dir = AgentDir::new(
        "name: a\nllm: {model: m}\ntools:\n  - name: files__read\n    exec: cat x\nmcp:\n  files:\n    command: mcp-server-filesystem\n",
    );
    let error = load_agent(&dir.home).unwrap_err().to_string();
    assert!(
        error.contains("tool `files__read` is named like a tool of the MCP server `files`"),
        "{error}"
    );
    assert!(error.contains("hint"), "{error}");
}

/// Issue 26: the `mcp` Cargo feature. With it an agent's servers load in order; without it
/// an agent listing servers is refused at load, naming the feature, rather than run without
/// the tools it was written for.
#[test]
fn mcp_servers_load_with_the_mcp_feature_and_are_refused_without_it() {
    let dir = AgentDir::new(
        "name: a\nllm: {model: m}\nmcp:\n  files:\n    command: mcp-server-filesystem\n    args: [\"${CWD}\"]\n  web:\n    command: web-server\n",
    );
    let loaded = load_agent(&dir.home);
    if cfg!(feature = "mcp") {
        let agent = loaded.unwrap();
        let names: Vec<&str> = agent.mcp.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["files", "web"]);
        assert_eq!(agent.mcp[0].args, ["${CWD}"]);
    } else {
        let error = loaded.unwrap_err().to_string();
        assert!(error.contains("built without MCP support"), "{error}");
        assert!(error.contains("`mcp` feature"), "{error}");
    }
}
