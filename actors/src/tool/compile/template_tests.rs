//! Unit tests of template scanning, exec tokenising and shell rewriting.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;

fn compile_exec_plain(template: &str) -> Result<ExecTemplate, TemplateError> {
    compile_exec(template, None)
}

fn compile_shell_plain(template: &str) -> Result<ShellTemplate, TemplateError> {
    compile_shell(template, None)
}

#[test]
fn stdin_placeholders_are_removed_and_take_no_slot() {
    let t = compile_shell("cat ${a} | grep ${b} && echo '${a}'", Some("a")).unwrap();
    assert_eq!(t.script, r#"cat  | grep "$1" && echo ''"#);
    assert_eq!(t.parameters, vec![("b".to_string(), false)]);
    let t = compile_exec("tee ${file} ${content}", Some("content")).unwrap();
    assert_eq!(t.tokens, vec!["tee", "${file}"]);
    assert_eq!(t.parameters, vec!["file"]);
    let err = compile_exec("tool --input=${content}", Some("content")).unwrap_err();
    assert!(
        err.message.contains("part of a larger word"),
        "{}",
        err.message
    );
}

#[test]
fn exec_keeps_placeholder_positions() {
    let t = compile_exec_plain("grep ${pattern} -r .").unwrap();
    assert_eq!(t.tokens, vec!["grep", "${pattern}", "-r", "."]);
    assert_eq!(t.parameters, vec!["pattern"]);
}

#[test]
fn exec_quoted_static_arguments_and_mixed_tokens() {
    let t = compile_exec_plain(r#"grep "fixed pattern" --name=${x} ${AGENT_HOME}/a ${x}"#).unwrap();
    assert_eq!(
        t.tokens,
        vec![
            "grep",
            "fixed pattern",
            "--name=${x}",
            "${AGENT_HOME}/a",
            "${x}"
        ]
    );
    assert_eq!(
        t.parameters,
        vec!["x"],
        "engine variables are not parameters; x counted once"
    );
}

#[test]
fn exec_refuses_every_metacharacter_with_its_name() {
    for (template, meta, what) in [
        ("cat ${f} | wc", "|", "pipe"),
        ("echo a > b", ">", "output redirection"),
        ("sort < a", "<", "input redirection"),
        ("sleep 1 &", "&", "background execution"),
        ("a; b", ";", "command separator"),
        ("echo `id`", "`", "command substitution"),
        ("echo $(id)", "$(", "command substitution"),
        ("true && false", "&&", "logical AND"),
        ("true || false", "||", "logical OR"),
    ] {
        let err = compile_exec_plain(template).unwrap_err();
        assert_eq!(
            err.message,
            format!("Shell metacharacter '{meta}' ({what}) not allowed in exec: mode"),
            "{template}"
        );
        assert!(err.hint.starts_with("Use shell: mode"), "{}", err.hint);
    }
}

#[test]
fn exec_refuses_raw_malformed_and_parameter_programs() {
    assert!(compile_exec_plain("ls ${d:raw}")
        .unwrap_err()
        .message
        .contains(":raw modifier not allowed"));
    assert!(compile_exec_plain("ls ${d:-x}")
        .unwrap_err()
        .message
        .contains("not a valid placeholder"));
    assert!(compile_exec_plain("ls ${d")
        .unwrap_err()
        .message
        .contains("not a valid placeholder"));
    assert!(compile_exec_plain("${cmd} x")
        .unwrap_err()
        .message
        .contains("cannot come from a parameter"));
    assert!(compile_exec_plain("echo 'open")
        .unwrap_err()
        .message
        .contains("unterminated quote"));
    assert!(compile_exec_plain("   ")
        .unwrap_err()
        .message
        .contains("empty"));
    assert!(compile_exec_plain("${AGENT_HOME}/run.sh ${x}").is_ok());
}

#[test]
fn shell_spec_example_and_reused_placeholder() {
    let t = compile_shell_plain("grep ${pattern} ${file} | wc -l; echo ${pattern}").unwrap();
    assert_eq!(t.script, r#"grep "$1" "$2" | wc -l; echo "$1""#);
    assert_eq!(
        t.parameters,
        vec![("pattern".to_string(), false), ("file".to_string(), false)]
    );
}

#[test]
fn shell_quotes_by_context() {
    let t = compile_shell_plain(r#"echo "dir: ${d}" '${d}' ${r:raw} '${r:raw}'"#).unwrap();
    assert_eq!(t.script, r#"echo "dir: $1" ''"$1"'' $2 ''$2''"#);
}

#[test]
fn shell_engine_variables_take_the_first_slots() {
    let t = compile_shell_plain("${AGENT_HOME}/x.sh ${a} > ${CWD}/out").unwrap();
    assert_eq!(t.engine_slots, vec!["${AGENT_HOME}", "${CWD}"]);
    assert_eq!(t.script, r#""$1"/x.sh "$3" > "$2"/out"#);
    assert_eq!(t.parameters, vec![("a".to_string(), false)]);
}

#[test]
fn shell_leaves_escapes_and_shell_expansions_alone() {
    let t = compile_shell_plain(r#"echo \${notparam} ${x:-default} "$(cat "${f}")""#).unwrap();
    assert_eq!(t.script, r#"echo \${notparam} ${x:-default} "$(cat "$1")""#);
    assert_eq!(t.parameters, vec![("f".to_string(), false)]);
}

#[test]
fn shell_slots_from_ten_are_braced() {
    let names: Vec<String> = (0..11).map(|i| format!("${{p{i}}}")).collect();
    let t = compile_shell_plain(&format!("echo {}", names.join(" "))).unwrap();
    assert!(
        t.script.ends_with(r#""$9" "${10}" "${11}""#),
        "{}",
        t.script
    );
}

#[test]
fn shell_refuses_mixed_raw_use() {
    let err = compile_shell_plain("echo ${a} ${a:raw}").unwrap_err();
    assert!(err.message.contains("both as"), "{}", err.message);
}

#[test]
fn bare_shell_variables_are_found() {
    assert_eq!(
        bare_shell_variable("echo $HOME/x ${y}"),
        Some("$HOME".to_string())
    );
    assert_eq!(bare_shell_variable("echo ${HOME} $1 $ x"), None);
}

/// Regression (issue 11 item 8f): `${x}` in a here-document body became `"$1"`, and the
/// quotes reached the text. An unquoted-delimiter body expands like double quotes.
#[test]
fn heredoc_body_placeholders_are_bare_slots() {
    let t =
        compile_shell_plain("cat <<EOF\nHello ${who}, \"quoted\" 'too'\nEOF\necho ${who}").unwrap();
    assert_eq!(
        t.script,
        "cat <<EOF\nHello $1, \"quoted\" 'too'\nEOF\necho \"$1\""
    );
    let tabs = compile_shell_plain("cat <<-END >${out}\n\t${a}\n\tEND\n").unwrap();
    assert_eq!(tabs.script, "cat <<-END >\"$1\"\n\t$2\n\tEND\n");
    // A command substitution inside the body is a fresh unquoted context.
    let nested = compile_shell_plain("cat <<EOF\n$(printf %s ${a})\nEOF").unwrap();
    assert_eq!(nested.script, "cat <<EOF\n$(printf %s \"$1\")\nEOF");
    // After the body, quoting rules are the command line's again.
    let two = compile_shell_plain("cat <<A; cat <<B\n${x}\nA\n'${y}'\nB\necho ${x}").unwrap();
    assert_eq!(two.script, "cat <<A; cat <<B\n$1\nA\n'$2'\nB\necho \"$1\"");
}

#[test]
fn here_strings_and_comparisons_are_not_heredocs() {
    let t = compile_shell_plain("cat <<< ${a}; test 1 -lt 2 && echo ${b}").unwrap();
    assert_eq!(t.script, "cat <<< \"$1\"; test 1 -lt 2 && echo \"$2\"");
}

/// Regression (issue 11 item 8f): a quoted delimiter expands nothing, so the placeholder
/// could never arrive; the template is refused with a hint.
#[test]
fn quoted_heredoc_delimiters_refuse_placeholders() {
    for template in [
        "cat <<'EOF'\n${x}\nEOF",
        "cat <<\"EOF\"\nvalue: ${x}\nEOF",
        "cat <<\\EOF\n${x}\nEOF",
    ] {
        let err = compile_shell_plain(template).unwrap_err();
        assert!(
            err.message.contains("quoted delimiter"),
            "{template}: {}",
            err.message
        );
        assert!(err.message.contains("${x}"), "{}", err.message);
        assert!(
            err.hint.contains("<<EOF") && err.hint.contains("stdin: x"),
            "{}",
            err.hint
        );
    }
    // Without a placeholder in its body, a quoted here-document is fine.
    let ok = compile_shell_plain("cat <<'EOF' > ${f}\nliteral $HOME\nEOF").unwrap();
    assert_eq!(ok.script, "cat <<'EOF' > \"$1\"\nliteral $HOME\nEOF");
}

/// Regression (issue 11 item 8f): `$(( ${n} + 1 ))` became `$(( "$1" + 1 ))`, a syntax
/// error; a bare value would be evaluated as an expression. Refused with a hint; `:raw`
/// remains the explicit opt-in.
#[test]
fn arithmetic_expansion_refuses_placeholders_but_allows_raw() {
    for template in ["echo $(( ${n} + 1 ))", "echo \"$(( (${n} * 2) ))\""] {
        let err = compile_shell_plain(template).unwrap_err();
        assert!(
            err.message.contains("arithmetic expansion"),
            "{template}: {}",
            err.message
        );
        assert!(err.hint.contains("expr ${n} + 1"), "{}", err.hint);
    }
    let raw = compile_shell_plain("echo $(( ${n:raw} + 1 )) ${m}").unwrap();
    assert_eq!(raw.script, "echo $(( $1 + 1 )) \"$2\"");
    // A command substitution is not arithmetic.
    let sub = compile_shell_plain("echo $(printf %s ${n})").unwrap();
    assert_eq!(sub.script, "echo $(printf %s \"$1\")");
}
