//! Template text → command: `exec:` tokenising and `shell:` rewriting (finding `${name}`
//! placeholders is `placeholder`'s).
//!
//! Owns the rules of spec §2.2.2/§2.2.5 with the original engine's defects fixed: exec
//! placeholders keep their argv position, mixed tokens (`--name=${x}`) are allowed, and shell
//! placeholders become `$N` quoted according to where they stand (outside quotes `"$N"`,
//! inside double quotes or an unquoted here-document `$N`, inside single quotes `'"$N"'`;
//! the scan itself, and the placements it refuses, are `shell_scan`'s). Engine variables
//! (`${AGENT_HOME}`, `${CWD}`, `${RUN_ID}`) are never parameters. It knows nothing about
//! YAML or files: errors are plain `TemplateError`s the caller decorates.

use super::placeholder::{
    is_engine_var, placeholder_at, placeholders, template_error, TemplateError,
};
use super::shell_scan::{segment_shell, Quoting, Segment};

/// The first `$NAME` (a shell variable written without braces) in `text`, if any: in an
/// `exec:` template it reaches the program literally, which is rarely what was meant.
pub(crate) fn bare_shell_variable(text: &str) -> Option<String> {
    text.match_indices('$').find_map(|(i, _)| {
        let name: String = text[i + 1..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            .then(|| format!("${name}"))
    })
}

/// Metacharacters refused in `exec:` templates, two-character ones first so `&&` is not
/// reported as `&`.
const EXEC_METACHARACTERS: [(&str, &str); 9] = [
    ("&&", "logical AND"),
    ("||", "logical OR"),
    ("$(", "command substitution"),
    ("|", "pipe"),
    (">", "output redirection"),
    ("<", "input redirection"),
    ("&", "background execution"),
    (";", "command separator"),
    ("`", "command substitution"),
];

/// An `exec:` template split into argv tokens (placeholders kept in place).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ExecTemplate {
    pub tokens: Vec<String>,
    /// Distinct parameter names (engine variables excluded), in order of first appearance.
    pub parameters: Vec<String>,
}

/// `stdin` names the parameter piped to the process: a token that is exactly its
/// placeholder is removed (the program then reads stdin), and it never becomes an argument.
pub(crate) fn compile_exec(
    template: &str,
    stdin: Option<&str>,
) -> Result<ExecTemplate, TemplateError> {
    for (meta, what) in EXEC_METACHARACTERS {
        if template.contains(meta) {
            return Err(template_error(
                format!("Shell metacharacter '{meta}' ({what}) not allowed in exec: mode"),
                format!("Use shell: mode if you need {what}, or remove '{meta}' for safe direct execution"),
            ));
        }
    }
    let mut index = 0;
    while let Some(offset) = template[index..].find("${") {
        let start = index + offset;
        match placeholder_at(template, start) {
            Some(Ok(p)) if p.raw => {
                return Err(template_error(
                    format!(":raw modifier not allowed in exec: mode (`${{{}:raw}}`)", p.name),
                    "The :raw modifier is only supported in shell: mode for expert use",
                ))
            }
            Some(Ok(p)) => index = p.end,
            Some(Err(fragment)) => {
                return Err(template_error(
                    format!("`{fragment}` is not a valid placeholder"),
                    "placeholders look like ${name} (letters, digits and _); exec: runs without a shell, so shell expansions such as ${x:-default} do not apply",
                ))
            }
            None => index = start + 2,
        }
    }
    let mut tokens = shell_words::split(template).map_err(|_| {
        template_error(
            "exec: template has an unterminated quote",
            "close every ' and \" (or escape it with a backslash)",
        )
    })?;
    if let Some(stdin) = stdin {
        let whole = format!("${{{stdin}}}");
        tokens.retain(|token| *token != whole);
        if tokens
            .iter()
            .any(|t| placeholders(t).iter().any(|p| p.name == stdin))
        {
            return Err(template_error(
                format!("the stdin parameter `{stdin}` is part of a larger word"),
                format!("a stdin parameter is piped, not placed on the command line: remove ${{{stdin}}} from the template"),
            ));
        }
    }
    let Some(program) = tokens.first() else {
        return Err(template_error(
            "exec: template is empty",
            "write the program and its arguments, e.g. exec: \"ls -la ${directory}\"",
        ));
    };
    if placeholders(program)
        .iter()
        .any(|p| !is_engine_var(&p.name))
    {
        return Err(template_error(
            format!("the program `{program}` cannot come from a parameter"),
            "start the template with a fixed program name (engine variables such as ${AGENT_HOME}/tools/x.sh are fine)",
        ));
    }
    let mut parameters: Vec<String> = Vec::new();
    for token in &tokens {
        for p in placeholders(token) {
            if !is_engine_var(&p.name) && !parameters.contains(&p.name) {
                parameters.push(p.name);
            }
        }
    }
    Ok(ExecTemplate { tokens, parameters })
}

/// `$N`, braced from 10 on (`$10` would mean `${1}0`).
fn positional(n: usize) -> String {
    if n < 10 {
        format!("${n}")
    } else {
        format!("${{{n}}}")
    }
}

/// A `shell:` template rewritten for `sh -c <script> -- <slots...>`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ShellTemplate {
    pub script: String,
    /// Engine variables occupying `$1..$m`, written as `${NAME}` for the engine to fill.
    pub engine_slots: Vec<String>,
    /// Parameters occupying `$m+1..`, in order: (name, raw).
    pub parameters: Vec<(String, bool)>,
}

/// `stdin` names the parameter piped to the process: its placeholders are removed from the
/// script and it takes no `$N` (so `cat ${a} | grep ${b}` with `stdin: a` runs
/// `cat | grep "$1"`).
pub(crate) fn compile_shell(
    template: &str,
    stdin: Option<&str>,
) -> Result<ShellTemplate, TemplateError> {
    if template.trim().is_empty() {
        return Err(template_error(
            "shell: template is empty",
            "write a shell command line, e.g. shell: \"cat ${file} | wc -l\"",
        ));
    }
    let mut segments = segment_shell(template)?;
    segments.retain(
        |segment| !matches!(segment, Segment::Slot { name, .. } if Some(name.as_str()) == stdin),
    );
    let mut engine_slots: Vec<String> = Vec::new();
    let mut parameters: Vec<(String, bool)> = Vec::new();
    for segment in &segments {
        let Segment::Slot { name, raw, .. } = segment else {
            continue;
        };
        if is_engine_var(name) {
            if !engine_slots.contains(name) {
                engine_slots.push(name.clone());
            }
        } else if let Some((_, seen_raw)) = parameters.iter().find(|(n, _)| n == name) {
            if seen_raw != raw {
                return Err(template_error(
                    format!(
                        "parameter `{name}` is used both as ${{{name}}} and as ${{{name}:raw}}"
                    ),
                    "use one form for every occurrence of the parameter",
                ));
            }
        } else {
            parameters.push((name.clone(), *raw));
        }
    }
    let slot_of = |name: &str| -> usize {
        let engine = engine_slots.iter().position(|n| n == name);
        let param = parameters.iter().position(|(n, _)| n == name);
        match (engine, param) {
            (Some(i), _) => i + 1,
            (None, Some(i)) => engine_slots.len() + i + 1,
            (None, None) => 0,
        }
    };
    let mut script = String::with_capacity(template.len() + 16);
    for segment in &segments {
        match segment {
            Segment::Text(text) => script.push_str(text),
            Segment::Slot { name, raw, quoting } => {
                let dollar = positional(slot_of(name));
                match (quoting, raw) {
                    (Quoting::Double, _) => script.push_str(&dollar),
                    (Quoting::Single, true) => script.push_str(&format!("'{dollar}'")),
                    (Quoting::Single, false) => script.push_str(&format!("'\"{dollar}\"'")),
                    (Quoting::Unquoted, true) => script.push_str(&dollar),
                    (Quoting::Unquoted, false) => script.push_str(&format!("\"{dollar}\"")),
                }
            }
        }
    }
    Ok(ShellTemplate {
        script,
        engine_slots: engine_slots.iter().map(|n| format!("${{{n}}}")).collect(),
        parameters,
    })
}

#[cfg(test)]
#[path = "template_tests.rs"]
mod tests;
