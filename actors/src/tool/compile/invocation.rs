//! Model arguments → argv and stdin for one compiled tool.
//!
//! Owns argument validation (unknown names, missing required values, types), defaults,
//! stringification, engine-variable substitution and the one-line rendering used in the
//! journal. It never spawns anything: `tool::process` runs the resulting `Invocation`.

use std::collections::HashMap;
use std::path::PathBuf;

use serde_json::{Map, Value as Json};

use super::error::ArgumentError;
use super::placeholder::{placeholders, substitute};
use super::{CompiledTool, InjectAs, ParamType, ToolSyntax};

/// Values the engine substitutes for `${AGENT_HOME}`, `${CWD}` and `${RUN_ID}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineVars {
    /// `${AGENT_HOME}`: the agent's folder.
    pub agent_home: PathBuf,
    /// `${CWD}`: the run's workspace.
    pub cwd: PathBuf,
    /// `${RUN_ID}`: the run's id.
    pub run_id: String,
}

impl EngineVars {
    fn value_of(&self, name: &str) -> Option<String> {
        match name {
            "AGENT_HOME" => Some(self.agent_home.to_string_lossy().into_owned()),
            "CWD" => Some(self.cwd.to_string_lossy().into_owned()),
            "RUN_ID" => Some(self.run_id.clone()),
            _ => None,
        }
    }
}

/// What to run: the full argv (program first) and the text piped to stdin, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// The program (resolved through the tool's `PATH` when it has no `/`) and its
    /// arguments.
    pub argv: Vec<String>,
    /// The text for stdin (an `inject_as: stdin` parameter); `None` gives /dev/null.
    pub stdin: Option<String>,
}

/// Stringifies `value` for a parameter of `param_type`; `Err` carries the expected kind.
pub(crate) fn stringify(param_type: ParamType, value: &Json) -> Result<String, &'static str> {
    match (param_type, value) {
        (ParamType::String, Json::String(s)) => Ok(s.clone()),
        // Models often send 3 or true for text parameters; the intent is unambiguous.
        (ParamType::String, Json::Number(n)) => Ok(n.to_string()),
        (ParamType::String, Json::Bool(b)) => Ok(b.to_string()),
        (ParamType::String, _) => Err("text"),
        (ParamType::Integer, Json::Number(n)) if n.is_i64() || n.is_u64() => Ok(n.to_string()),
        (ParamType::Integer, Json::String(s)) => s
            .trim()
            .parse::<i64>()
            .map(|i| i.to_string())
            .map_err(|_| "an integer"),
        (ParamType::Integer, _) => Err("an integer"),
        (ParamType::Number, Json::Number(n)) => Ok(n.to_string()),
        (ParamType::Number, Json::String(s)) => match s.trim().parse::<f64>() {
            Ok(x) if x.is_finite() => Ok(s.trim().to_string()),
            _ => Err("a number"),
        },
        (ParamType::Number, _) => Err("a number"),
        (ParamType::Boolean, Json::Bool(b)) => Ok(b.to_string()),
        (ParamType::Boolean, Json::String(s)) if s == "true" || s == "false" => Ok(s.clone()),
        (ParamType::Boolean, _) => Err("a boolean (true or false)"),
    }
}

impl CompiledTool {
    /// Builds argv/stdin from the model's arguments object. Engine variables are filled from
    /// `vars`; defaults apply to absent (or null) arguments; every value is stringified by
    /// its declared type. Unknown or missing arguments and wrong types are errors.
    pub fn build_invocation(
        &self,
        args: &Map<String, Json>,
        vars: &EngineVars,
    ) -> Result<Invocation, ArgumentError> {
        let known: Vec<&str> = self.parameters.iter().map(|p| p.name.as_str()).collect();
        if let Some(unknown) = args.keys().find(|k| !known.contains(&k.as_str())) {
            let listed = if known.is_empty() {
                "(none)".to_string()
            } else {
                known.join(", ")
            };
            return Err(ArgumentError(format!(
                "unknown argument `{unknown}` for tool `{}`; known parameters: {listed}",
                self.name
            )));
        }
        let mut values: HashMap<&str, Option<String>> = HashMap::new();
        for p in &self.parameters {
            let given = args.get(&p.name).filter(|v| !v.is_null());
            let value = match given.or(p.default.as_ref()) {
                Some(v) => Some(stringify(p.param_type, v).map_err(|expected| {
                    ArgumentError(format!(
                        "argument `{}` of tool `{}` must be {expected}, got {v}",
                        p.name, self.name
                    ))
                })?),
                None if p.required => {
                    let about = p
                        .description
                        .as_deref()
                        .map(|d| format!(" ({d})"))
                        .unwrap_or_default();
                    return Err(ArgumentError(format!(
                        "missing required argument `{}`{about} for tool `{}`",
                        p.name, self.name
                    )));
                }
                None => None,
            };
            if p.inject_as != InjectAs::Stdin && value.as_deref().is_some_and(|v| v.contains('\0'))
            {
                return Err(ArgumentError(format!(
                    "argument `{}` of tool `{}` contains a NUL character, which cannot be passed on a command line",
                    p.name, self.name
                )));
            }
            values.insert(p.name.as_str(), value);
        }
        let stdin = self
            .parameters
            .iter()
            .find(|p| p.inject_as == InjectAs::Stdin)
            .and_then(|p| values.get(p.name.as_str()).cloned().flatten());
        let argv = match self.syntax {
            ToolSyntax::Exec => self.exec_argv(&values, vars),
            ToolSyntax::Shell => self.shell_argv(&values, vars),
            ToolSyntax::Legacy => self.legacy_argv(&values, vars),
        };
        Ok(Invocation { argv, stdin })
    }

    fn exec_argv(&self, values: &HashMap<&str, Option<String>>, vars: &EngineVars) -> Vec<String> {
        self.command
            .iter()
            .filter(|token| {
                // A token that mentions an absent optional parameter disappears entirely.
                !placeholders(token)
                    .iter()
                    .any(|p| matches!(values.get(p.name.as_str()), Some(None)))
            })
            .map(|token| {
                substitute(token, |name| match values.get(name) {
                    Some(value) => value.clone(),
                    None => vars.value_of(name),
                })
            })
            .collect()
    }

    fn shell_argv(&self, values: &HashMap<&str, Option<String>>, vars: &EngineVars) -> Vec<String> {
        // command = ["sh", "-c", script, "--", engine slots...]: only the slots are substituted,
        // the script itself is never touched.
        let mut argv: Vec<String> = self
            .command
            .iter()
            .enumerate()
            .map(|(i, part)| {
                if i >= 4 {
                    substitute(part, |n| vars.value_of(n))
                } else {
                    part.clone()
                }
            })
            .collect();
        let mut positional: Vec<_> = self
            .parameters
            .iter()
            .filter(|p| p.position.is_some())
            .collect();
        positional.sort_by_key(|p| p.position);
        argv.extend(positional.into_iter().map(|p| {
            values
                .get(p.name.as_str())
                .cloned()
                .flatten()
                .unwrap_or_default()
        }));
        argv
    }

    fn legacy_argv(
        &self,
        values: &HashMap<&str, Option<String>>,
        vars: &EngineVars,
    ) -> Vec<String> {
        let mut argv: Vec<String> = self
            .command
            .iter()
            .map(|part| substitute(part, |n| vars.value_of(n)))
            .collect();
        for p in &self.parameters {
            let Some(Some(value)) = values.get(p.name.as_str()) else {
                continue;
            };
            match p.inject_as {
                InjectAs::Argument => argv.push(value.clone()),
                InjectAs::Option => {
                    argv.extend(p.option_name.clone());
                    argv.push(value.clone());
                }
                InjectAs::Stdin => {}
            }
        }
        argv
    }

    /// One-line, shell-quoted rendering of an invocation (for the journal's
    /// `resolved_command`); newlines are shown as `\n` and stdin as its size.
    pub fn render_command(inv: &Invocation) -> String {
        let mut line = shell_words::join(&inv.argv)
            .replace('\n', "\\n")
            .replace('\r', "\\r");
        if let Some(stdin) = &inv.stdin {
            line.push_str(&format!(" < [stdin: {} bytes]", stdin.len()));
        }
        line
    }
}
