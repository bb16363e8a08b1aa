//! Unit and property tests of the tool compiler and argv building.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use proptest::prelude::*;
use serde_json::json;

fn compile_one(yaml: &str) -> Result<CompiledTool, CompileError> {
    let value: Value = serde_yaml::from_str(yaml).unwrap();
    compile_tool(&value, 0, Path::new("/agent/agent.yaml"), &mut Vec::new())
}

fn compile_ok(yaml: &str) -> CompiledTool {
    compile_one(yaml).unwrap()
}

fn compile_err(yaml: &str) -> String {
    compile_one(yaml).unwrap_err().to_string()
}

fn vars() -> EngineVars {
    EngineVars {
        agent_home: PathBuf::from("/home/agent dir"),
        cwd: PathBuf::from("/work/W001"),
        run_id: "run-1".into(),
    }
}

fn invoke(tool: &CompiledTool, args: Json) -> Result<Invocation, ArgumentError> {
    tool.build_invocation(args.as_object().unwrap(), &vars())
}

#[test]
fn exec_placeholder_keeps_its_argv_position() {
    let tool = compile_ok("name: search\nexec: grep ${pattern} -r .\n");
    assert_eq!(tool.command, vec!["grep", "${pattern}", "-r", "."]);
    let inv = invoke(&tool, json!({"pattern": "a b"})).unwrap();
    assert_eq!(inv.argv, vec!["grep", "a b", "-r", "."]);
    assert_eq!(inv.stdin, None);
}

#[test]
fn exec_mixed_token_is_one_element() {
    let tool = compile_ok("name: t\nexec: tool --name=${x} --home=${AGENT_HOME}\n");
    let inv = invoke(&tool, json!({"x": "v; rm -rf /"})).unwrap();
    assert_eq!(
        inv.argv,
        vec!["tool", "--name=v; rm -rf /", "--home=/home/agent dir"]
    );
}

#[test]
fn engine_variables_are_never_parameters() {
    let tool = compile_ok("name: t\nexec: ${AGENT_HOME}/run.sh ${CWD} ${RUN_ID} ${x}\n");
    assert_eq!(tool.parameters.len(), 1);
    let inv = invoke(&tool, json!({"x": "1"})).unwrap();
    assert_eq!(
        inv.argv,
        vec!["/home/agent dir/run.sh", "/work/W001", "run-1", "1"]
    );
    let err = invoke(&tool, json!({"x": "1", "AGENT_HOME": "/evil"})).unwrap_err();
    assert!(err.0.contains("unknown argument `AGENT_HOME`"), "{err}");
}

#[test]
fn shell_spec_expansion_and_argv() {
    let tool = compile_ok("name: count\nshell: grep ${pattern} ${file} | wc -l\n");
    assert_eq!(
        tool.command,
        vec!["sh", "-c", "grep \"$1\" \"$2\" | wc -l", "--"]
    );
    assert_eq!(tool.parameters[0].position, Some(0));
    assert_eq!(tool.parameters[1].position, Some(1));
    let inv = invoke(
        &tool,
        json!({"file": "data.txt", "pattern": "\" ; rm -rf / ; \""}),
    )
    .unwrap();
    assert_eq!(inv.argv[4..], ["\" ; rm -rf / ; \"", "data.txt"]);
}

#[test]
fn shell_placeholder_used_twice_reuses_its_slot() {
    let tool = compile_ok("name: t\nshell: echo ${a} ${b} ${a}\n");
    assert_eq!(tool.command[2], "echo \"$1\" \"$2\" \"$1\"");
    assert_eq!(tool.parameters.len(), 2);
    let schema = tool.openai_schema();
    assert_eq!(
        schema["function"]["parameters"]["required"],
        json!(["a", "b"])
    );
}

#[test]
fn shell_raw_is_unquoted_and_stdin_takes_no_slot() {
    let tool = compile_ok("name: t\nshell: ls ${flags:raw} ${dir} | tee ${out}\nstdin: content\n");
    assert_eq!(tool.command[2], "ls $1 \"$2\" | tee \"$3\"");
    assert!(tool.parameters[0].raw);
    let inv = invoke(
        &tool,
        json!({"flags": "-l -a", "dir": "/tmp", "out": "o", "content": "text"}),
    )
    .unwrap();
    assert_eq!(inv.argv[4..], ["-l -a", "/tmp", "o"]);
    assert_eq!(inv.stdin.as_deref(), Some("text"));
}

#[test]
fn a_stdin_placeholder_is_piped_and_never_takes_a_slot() {
    let tool = compile_ok("name: t\nshell: cat ${a} | grep ${b}\nstdin: a\n");
    assert_eq!(tool.command, vec!["sh", "-c", "cat  | grep \"$1\"", "--"]);
    assert_eq!(tool.parameter("b").unwrap().position, Some(0));
    let inv = invoke(&tool, json!({"a": "one\ntwo\n", "b": "two"})).unwrap();
    assert_eq!(inv.argv[4..], ["two"]);
    assert_eq!(inv.stdin.as_deref(), Some("one\ntwo\n"));
    let exec = compile_ok("name: t\nexec: tee ${file} ${content}\nstdin: content\n");
    assert_eq!(exec.command, vec!["tee", "${file}"]);
}

#[test]
fn shell_engine_variables_fill_their_slots() {
    let tool = compile_ok("name: t\nshell: cat ${AGENT_HOME}/notes ${f}\n");
    assert_eq!(
        tool.command,
        vec!["sh", "-c", "cat \"$1\"/notes \"$2\"", "--", "${AGENT_HOME}"]
    );
    assert_eq!(tool.parameters[0].position, Some(1));
    let inv = invoke(&tool, json!({"f": "x"})).unwrap();
    assert_eq!(inv.argv[4..], ["/home/agent dir", "x"]);
}

#[test]
fn stdin_shorthand_and_explicit_metadata_merge() {
    let tool = compile_ok(
        "name: write\ndescription: Write a file\nexec: tee ${filename}\nstdin: content\nparameters:\n  - name: filename\n    description: Target file\n  - name: content\n    description: Text to write\n",
    );
    let content = tool.parameter("content").unwrap();
    assert_eq!(content.inject_as, InjectAs::Stdin);
    assert_eq!(content.position, None);
    assert_eq!(content.description.as_deref(), Some("Text to write"));
    let inv = invoke(&tool, json!({"filename": "a.txt", "content": "hello\n"})).unwrap();
    assert_eq!(inv.argv, vec!["tee", "a.txt"]);
    assert_eq!(inv.stdin.as_deref(), Some("hello\n"));
}

#[test]
fn defaults_make_parameters_optional_and_apply() {
    let tool =
        compile_ok("name: ls\nexec: ls -la ${dir}\nparameters:\n  - name: dir\n    default: .\n");
    assert!(!tool.parameters[0].required);
    assert_eq!(
        tool.openai_schema()["function"]["parameters"]["required"],
        json!([])
    );
    assert_eq!(
        invoke(&tool, json!({})).unwrap().argv,
        vec!["ls", "-la", "."]
    );
    assert_eq!(
        invoke(&tool, json!({"dir": null})).unwrap().argv,
        vec!["ls", "-la", "."]
    );
}

#[test]
fn optional_parameter_without_value_drops_its_token() {
    let tool = compile_ok(
        "name: ls\nexec: ls --color=${c} ${dir} -d\nparameters:\n  - name: dir\n    required: false\n  - name: c\n    required: false\n",
    );
    assert_eq!(invoke(&tool, json!({})).unwrap().argv, vec!["ls", "-d"]);
}

#[test]
fn typed_parameters_are_stringified_and_checked() {
    let tool = compile_ok(
        "name: t\nexec: t ${n} ${x} ${b}\nparameters:\n  - name: n\n    type: integer\n  - name: x\n    type: number\n  - name: b\n    type: boolean\n    default: false\n",
    );
    let inv = invoke(&tool, json!({"n": 42, "x": 1.5, "b": true})).unwrap();
    assert_eq!(inv.argv, vec!["t", "42", "1.5", "true"]);
    assert_eq!(
        invoke(&tool, json!({"n": "7", "x": "2"})).unwrap().argv,
        vec!["t", "7", "2", "false"]
    );
    let err = invoke(&tool, json!({"n": "seven", "x": 1})).unwrap_err();
    assert_eq!(
        err.0,
        "argument `n` of tool `t` must be an integer, got \"seven\""
    );
    let err = invoke(&tool, json!({"n": 1, "x": 1, "b": "yes"})).unwrap_err();
    assert!(err.0.contains("must be a boolean"), "{err}");
    let schema = tool.openai_schema();
    assert_eq!(
        schema["function"]["parameters"]["properties"]["n"]["type"],
        "integer"
    );
    assert_eq!(
        schema["function"]["parameters"]["properties"]["x"]["type"],
        "number"
    );
    assert_eq!(
        schema["function"]["parameters"]["properties"]["b"]["type"],
        "boolean"
    );
}

#[test]
fn missing_and_unknown_arguments_are_errors() {
    let tool = compile_ok(
        "name: t\nexec: echo ${msg}\nparameters:\n  - name: msg\n    description: What to say\n",
    );
    let err = invoke(&tool, json!({})).unwrap_err();
    assert_eq!(
        err.0,
        "missing required argument `msg` (What to say) for tool `t`"
    );
    let err = invoke(&tool, json!({"msg": "x", "extra": 1})).unwrap_err();
    assert_eq!(
        err.0,
        "unknown argument `extra` for tool `t`; known parameters: msg"
    );
    let err = invoke(&tool, json!({"msg": "a\0b"})).unwrap_err();
    assert!(err.0.contains("NUL"), "{err}");
    let err = invoke(&tool, json!({"msg": ["list"]})).unwrap_err();
    assert!(err.0.contains("must be text"), "{err}");
}

#[test]
fn legacy_parameters_append_in_declaration_order() {
    let tool = compile_ok(
        "name: post\ncommand: [curl, -X, POST, '${AGENT_HOME}/x']\nparameters:\n  - name: url\n  - name: data\n    inject_as: option\n    option_name: -d\n  - name: body\n    inject_as: stdin\n  - name: extra\n    required: false\n",
    );
    assert_eq!(tool.syntax, ToolSyntax::Legacy);
    let inv = invoke(&tool, json!({"url": "http://x", "data": "{}", "body": "b"})).unwrap();
    assert_eq!(
        inv.argv,
        vec![
            "curl",
            "-X",
            "POST",
            "/home/agent dir/x",
            "http://x",
            "-d",
            "{}"
        ]
    );
    assert_eq!(inv.stdin.as_deref(), Some("b"));
}

#[test]
fn openai_schema_carries_descriptions() {
    let tool = compile_ok(
        "name: greet\ndescription: Say hello\nexec: echo ${who}\nparameters:\n  - name: who\n    description: Person to greet\n",
    );
    assert_eq!(
        tool.openai_schema(),
        json!({"type": "function", "function": {"name": "greet", "description": "Say hello", "parameters": {
            "type": "object", "properties": {"who": {"type": "string", "description": "Person to greet"}}, "required": ["who"]}}})
    );
    let bare = compile_ok("name: d\nexec: date\n");
    assert_eq!(
        bare.openai_schema()["function"]["description"],
        "Runs: date"
    );
}

#[test]
fn ask_human_schema_has_the_reference_shape() {
    let schema = ask_human_schema();
    assert_eq!(schema["function"]["name"], "ask_human");
    assert_eq!(
        schema["function"]["parameters"]["required"],
        json!(["prompt"])
    );
    assert_eq!(
        schema["function"]["parameters"]["properties"]["input_type"]["enum"],
        json!(["text", "password", "confirmation"])
    );
    assert_eq!(
        schema["function"]["parameters"]["properties"]["sensitive"]["type"],
        "boolean"
    );
}

#[test]
fn render_command_is_one_shell_quoted_line() {
    let inv = Invocation {
        argv: vec!["echo".into(), "a b".into(), "it's\nx".into()],
        stdin: Some("12345".into()),
    };
    assert_eq!(
        CompiledTool::render_command(&inv),
        "echo 'a b' 'it'\\''s\\nx' < [stdin: 5 bytes]"
    );
}

#[test]
fn definition_errors_name_tool_file_and_hint() {
    let cases = [
        ("name: t\nexec: ls\nshell: ls\n", "must have exactly one of exec:, shell:, or command: (found exec and shell)"),
        ("name: t\ndescription: x\n", "(found none)"),
        ("name: t\nexec: cat ${f} | wc\n", "Shell metacharacter '|' (pipe) not allowed in exec: mode"),
        ("name: t\nexec: ls ${d:raw}\n", ":raw modifier not allowed in exec: mode"),
        ("name: ask_human\nexec: echo\n", "built-in tool"),
        ("name: bad name\nexec: echo\n", "1-64 letters"),
        ("exec: echo\n", "`tools[0].name` is required"),
        ("name: t\nexec: cat ${f}\nparameters:\n  - name: g\n", "Parameter 'g' declared but not found in template"),
        ("name: t\nshell: cat ${f} | wc -l\nparameters:\n  - name: f\n    inject_as: stdin\n", "Cannot override inject_as for parameter 'f' (inferred: argument, explicit: stdin)"),
        ("name: t\nexec: cat ${f}\nparameters:\n  - name: f\n    position: 3\n", "Cannot override position"),
        ("name: t\nexec: cat ${f}\nparameters:\n  - name: f\n    raw: true\n", "cannot be set in parameters"),
        ("name: t\nexec: tool --in=${f}\nstdin: f\n", "the stdin parameter `f` is part of a larger word"),
        ("name: t\ncommand: [x]\nparameters:\n  - name: a\n    inject_as: stdin\n  - name: b\n    inject_as: stdin\n", "At most one parameter can have inject_as: stdin"),
        ("name: t\ncommand: [x]\nparameters:\n  - name: p\n    inject_as: option\n", "inject_as: option but no option_name"),
        ("name: t\ncommand: []\n", "non-empty list"),
        ("name: t\nexec: echo ${n}\nparameters:\n  - name: n\n    type: integer\n    default: abc\n", "the default of parameter `n` must be an integer"),
        ("name: t\nexec: echo ${n}\nparameters:\n  - name: n\n    type: int\n", "(did you mean `integer`?)"),
        ("name: t\nexec: echo ${n}\nparameters:\n  - name: n\n  - name: n\n", "declared twice"),
        ("name: t\nexec: echo\ntimeout_ms: 0\n", "`tools[0].timeout_ms`"),
    ];
    for (yaml, phrase) in cases {
        let err = compile_err(yaml);
        assert!(err.contains(phrase), "{yaml}\n=> {err}");
        assert!(err.contains("/agent/agent.yaml"), "{err}");
        assert!(err.contains("hint:"), "{err}");
    }
}

/// Issue 24 item 18: unknown keys of a tool or a parameter are errors naming the closest key
/// (warnings under `strict: false`).
#[test]
fn unknown_tool_keys_are_errors_and_warnings_under_strict_false() {
    for (yaml, key, closest) in [
        (
            "name: t\nexec: date\ndescriptoin: x\n",
            "tools[0].descriptoin",
            "description",
        ),
        (
            "name: t\nexec: echo ${n}\nparameters:\n  - name: n\n    typ: integer\n",
            "tools[0].parameters[0].typ",
            "type",
        ),
    ] {
        let value: Value = serde_yaml::from_str(yaml).unwrap();
        match compile_tool(&value, 0, Path::new("a.yaml"), &mut Vec::new()) {
            Err(CompileError::UnknownKey(crate::yaml::UnknownKeyError {
                key: found,
                closest: Some(nearest),
                ..
            })) => assert_eq!((found.as_str(), nearest.as_str()), (key, closest)),
            other => panic!("{yaml}: {other:?}"),
        }
    }
    let value: Value =
        serde_yaml::from_str("name: t\nexec: date\ndescriptoin: x\nparameters: []\n").unwrap();
    let mut warnings = Vec::new();
    compile_tool_with(
        &value,
        0,
        Path::new("a.yaml"),
        UnknownKeys::Warn,
        &mut warnings,
    )
    .unwrap();
    assert_eq!(
        warnings,
        vec!["a.yaml: unknown key `tools[0].descriptoin` (did you mean `description`?)"]
    );
}

/// Issue 24 item 18: with `parameters:` given, a placeholder it does not declare was inferred
/// silently (a typo such as `${patern}` became a parameter the model had to fill); it is an
/// error naming the closest declared parameter, and a warning under `strict: false`.
#[test]
fn a_placeholder_parameters_does_not_declare_is_an_error() {
    for yaml in [
        "name: grep\nexec: grep ${patern} ${file}\nparameters:\n  - name: pattern\n    description: what to find\n  - name: file\n",
        "name: grep\nshell: grep \"${patern}\" ${file}\nparameters:\n  - name: pattern\n  - name: file\n",
    ] {
        let err = compile_err(yaml);
        assert!(err.contains("Parameter 'pattern' declared but not found in template (did you mean `patern`?)")
            || err.contains("placeholder `${patern}` names no parameter under `parameters:` (did you mean `pattern`?)"),
            "{yaml}\n=> {err}");
    }
    let undeclared = "name: grep\nexec: grep ${pattern} ${file}\nparameters:\n  - name: pattern\n    description: what to find\n";
    let err = compile_err(undeclared);
    assert!(
        err.contains("placeholder `${file}` names no parameter under `parameters:`"),
        "{err}"
    );
    assert!(err.contains("add `- name: file`"), "{err}");
    let value: Value = serde_yaml::from_str(undeclared).unwrap();
    let mut warnings = Vec::new();
    let tool = compile_tool_with(
        &value,
        0,
        Path::new("a.yaml"),
        UnknownKeys::Warn,
        &mut warnings,
    )
    .unwrap();
    assert!(tool.parameter("file").is_some());
    assert!(
        warnings[0].contains("`${file}` names no parameter"),
        "{warnings:?}"
    );
    // Without `parameters:`, every placeholder is inferred as before.
    compile_ok("name: grep\nexec: grep ${pattern} ${file}\n");
}

/// Strings without NUL: quotes, `;`, `$(...)`, newlines, backslashes and any unicode.
fn hostile_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[^\\x00]{0,40}",
        prop::collection::vec(
            prop_oneof![
                Just("'".to_string()),
                Just("\"".to_string()),
                Just(";".to_string()),
                Just("$(id)".to_string()),
                Just("`id`".to_string()),
                Just("\n".to_string()),
                Just("\\".to_string()),
                Just("${x}".to_string()),
                Just(" ".to_string()),
                Just("*".to_string()),
                Just("-n".to_string()),
                Just("é✓".to_string()),
            ],
            0..12
        )
        .prop_map(|parts| parts.concat()),
    ]
}

fn run(argv: &[String]) -> String {
    let output = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .output()
        .unwrap();
    assert!(output.status.success(), "{argv:?}: {:?}", output);
    String::from_utf8(output.stdout).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn exec_value_is_exactly_one_argv_element(value in hostile_string()) {
        let tool = compile_ok("name: t\nexec: printf %s ${v} --flag=${v}\n");
        let inv = invoke(&tool, json!({"v": value.clone()})).unwrap();
        prop_assert_eq!(&inv.argv, &vec!["printf".to_string(), "%s".to_string(), value.clone(), format!("--flag={value}")]);
        prop_assert_eq!(run(&inv.argv[..3]), value);
    }

    #[test]
    fn shell_value_reaches_the_program_uninterpreted(value in hostile_string()) {
        for template in [
            "printf '%s' ${v}",
            "printf '%s' \"${v}\"",
            "printf '%s' '${v}'",
            "printf '%s' \"$(printf '%s' ${v})\" | cat",
            // Here-document bodies (issue 11 item 8f): `cat` prints the body's final newline.
            "cat <<EOF\n${v}\nEOF",
            "cat <<-EOF\n\t${v}\n\tEOF",
            "x=$(cat <<EOF\n${v}\nEOF\n); printf '%s' \"$x\"",
        ] {
            let tool = compile_ok(&format!("name: t\nshell: {}\n", serde_json::to_string(template).unwrap()));
            let inv = invoke(&tool, json!({"v": value.clone()})).unwrap();
            prop_assert_eq!(inv.argv.last().unwrap(), &value);
            let printed = run(&inv.argv);
            // $(...) strips trailing newlines, as any shell would; the value is otherwise intact.
            let expected = if template.contains("$(") {
                value.trim_end_matches('\n').to_string()
            } else if template.starts_with("cat") {
                format!("{value}\n")
            } else {
                value.clone()
            };
            prop_assert_eq!(printed, expected, "template {}", template);
        }
    }
}

#[test]
fn exec_warns_about_unexpanded_shell_variables() {
    let value: Value = serde_yaml::from_str("name: t\nexec: ls $HOME\n").unwrap();
    let mut warnings = Vec::new();
    compile_tool(&value, 0, Path::new("a.yaml"), &mut warnings).unwrap();
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].contains("`$HOME` is passed literally because exec: runs no shell"),
        "{warnings:?}"
    );
}

#[test]
fn shell_optional_parameter_without_value_keeps_its_slot_empty() {
    let tool = compile_ok(
        "name: t\nshell: echo ${a} ${b}\nparameters:\n  - name: a\n    required: false\n  - name: b\n",
    );
    let inv = invoke(&tool, json!({"b": "B"})).unwrap();
    assert_eq!(inv.argv[4..], ["", "B"], "$2 must still be b");
}

#[test]
fn a_stdin_default_is_piped_when_the_model_omits_it() {
    let tool = compile_ok(
        "name: t\nexec: cat\nstdin: text\nparameters:\n  - name: text\n    default: hello\n",
    );
    let inv = invoke(&tool, json!({})).unwrap();
    assert_eq!(inv.argv, ["cat"]);
    assert_eq!(inv.stdin.as_deref(), Some("hello"));
}
