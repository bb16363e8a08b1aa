//! The tool template compiler: one YAML tool definition (`exec:`, `shell:` or legacy
//! `command:` + `parameters:`) → one immutable [`CompiledTool`] with its OpenAI schema.
//!
//! Owns the tool-level schema (exactly one form, names, `stdin:`, `timeout_ms`); the
//! built-in `ask_human` lives in `tool::ask_human`. Template text rules live in `template`,
//! parameter merging in `params`, argv building in `invocation`, the `${name}`
//! primitives they share in `placeholder`. It does not execute anything, does not resolve
//! imports (that is `agent::imports`) and never reads files.

pub(crate) mod error;
mod invocation;
mod params;
mod placeholder;
mod shell_scan;
mod template;

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{json, Value as Json};
use serde_yaml::Value;

pub use error::{ArgumentError, CompileError};
pub use invocation::{EngineVars, Invocation};

use crate::yaml::{Fields, UnknownKeys};
pub(crate) use params::PARAMETER_KEYS;
use params::{check_declared, legacy_parameters, merge_inferred, parse_explicit, ToolContext};

pub use super::ask_human::{schema as ask_human_schema, ASK_HUMAN};

pub(crate) const TOOL_KEYS: [&str; 8] = [
    "name",
    "description",
    "exec",
    "shell",
    "command",
    "parameters",
    "stdin",
    "timeout_ms",
];

/// Which of the three definition forms a tool was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolSyntax {
    /// `exec:`: a command line split into argv, no shell; each `${param}` is one argument.
    Exec,
    /// `shell:`: a `sh -c` script; parameters arrive as positional arguments, quoted.
    Shell,
    /// The original engine's `command:` list plus `parameters:` (deprecated).
    Legacy,
}

impl ToolSyntax {
    /// The form's name as `delta tool expand` shows it: `exec`, `shell` or `legacy`.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolSyntax::Exec => "exec",
            ToolSyntax::Shell => "shell",
            ToolSyntax::Legacy => "legacy",
        }
    }
}

/// Declared type of a parameter; values are stringified at injection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ParamType {
    /// Text (numbers and booleans the model sends are accepted as their text).
    String,
    /// A whole number (also accepted as a string of digits).
    Integer,
    /// A finite number (also accepted as a numeric string).
    Number,
    /// `true` or `false` (also as strings).
    Boolean,
}

impl ParamType {
    /// The YAML spelling, which is also the JSON-schema type name.
    pub fn as_str(self) -> &'static str {
        match self {
            ParamType::String => "string",
            ParamType::Integer => "integer",
            ParamType::Number => "number",
            ParamType::Boolean => "boolean",
        }
    }
}

/// How a parameter's value reaches the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InjectAs {
    /// As one argument: where the template places it (`exec:`, `shell:`), or appended
    /// after the command (legacy).
    Argument,
    /// Written to the process's stdin (at most one parameter per tool).
    Stdin,
    /// Legacy tools: `option_name` then the value, appended after the command.
    Option,
}

impl InjectAs {
    /// The YAML spelling: `argument`, `stdin` or `option`.
    pub fn as_str(self) -> &'static str {
        match self {
            InjectAs::Argument => "argument",
            InjectAs::Stdin => "stdin",
            InjectAs::Option => "option",
        }
    }
}

/// One parameter the model fills in.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolParameter {
    /// The argument's key in the model's JSON.
    pub name: String,
    /// The type the value must have (default string).
    pub param_type: ParamType,
    /// How the value reaches the process.
    pub inject_as: InjectAs,
    /// The flag written before the value, for `inject_as: option`.
    pub option_name: Option<String>,
    /// exec: order of first appearance (0-based); shell: `$N` is `position + 1`; legacy and
    /// stdin parameters: none.
    pub position: Option<usize>,
    /// `${name:raw}` in a shell template: expanded unquoted.
    pub raw: bool,
    /// What the model is told the parameter means.
    pub description: Option<String>,
    /// The value used when the model leaves the argument out (or sends null).
    pub default: Option<Json>,
    /// False when a default exists or `required: false` was written.
    pub required: bool,
}

/// A validated tool, ready to build invocations from model arguments.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompiledTool {
    /// The tool's name (1-64 characters from `[A-Za-z0-9_-]`), unique in the agent.
    pub name: String,
    /// What the model is told the tool does (default: `Runs: <template>`).
    pub description: Option<String>,
    /// The form it was written in.
    pub syntax: ToolSyntax,
    /// The original `exec:`/`shell:` text.
    pub template: Option<String>,
    /// exec: tokens with `${p}` kept in place; shell: `["sh","-c",script,"--", engine slots…]`;
    /// legacy: as written. Engine variables stay as `${AGENT_HOME}` etc. until invocation.
    pub command: Vec<String>,
    /// The parameters, in schema order.
    pub parameters: Vec<ToolParameter>,
    /// The tool's time limit in milliseconds; `None` uses the engine's default (300 s).
    pub timeout_ms: Option<u64>,
    /// The YAML file that defined the tool.
    pub source_file: PathBuf,
}

impl CompiledTool {
    /// The tool as an OpenAI function definition:
    /// `{"type":"function","function":{"name","description","parameters":{..}}}`.
    pub fn openai_schema(&self) -> Json {
        let mut properties = serde_json::Map::new();
        for p in &self.parameters {
            let mut property = serde_json::Map::new();
            property.insert("type".into(), json!(p.param_type.as_str()));
            if let Some(d) = &p.description {
                property.insert("description".into(), json!(d));
            }
            properties.insert(p.name.clone(), Json::Object(property));
        }
        let required: Vec<&str> = self
            .parameters
            .iter()
            .filter(|p| p.required)
            .map(|p| p.name.as_str())
            .collect();
        let description = self.description.clone().unwrap_or_else(|| {
            let shown = self
                .template
                .clone()
                .unwrap_or_else(|| self.command.join(" "));
            format!("Runs: {shown}")
        });
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": description,
                "parameters": {
                    "type": "object",
                    "properties": properties,
                    "required": required,
                }
            }
        })
    }

    /// Looks a parameter up by name.
    pub fn parameter(&self, name: &str) -> Option<&ToolParameter> {
        self.parameters.iter().find(|p| p.name == name)
    }
}

fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Compiles the `tools:` list of one file. Every tool is validated (even one a later
/// definition will replace); `policy` says whether an unknown key (or a placeholder that
/// `parameters:` does not declare) is an error or a warning.
pub fn compile_tools(
    raw: &[Value],
    file: &Path,
    policy: UnknownKeys,
    warnings: &mut Vec<String>,
) -> Result<Vec<CompiledTool>, CompileError> {
    raw.iter()
        .enumerate()
        .map(|(index, value)| compile_tool_with(value, index, file, policy, warnings))
        .collect()
}

/// Compiles one tool definition (`index` is its place in the file's `tools:` list); an
/// unknown key is an error.
pub fn compile_tool(
    value: &Value,
    index: usize,
    file: &Path,
    warnings: &mut Vec<String>,
) -> Result<CompiledTool, CompileError> {
    compile_tool_with(value, index, file, UnknownKeys::Refuse, warnings)
}

/// [`compile_tool`] under `policy` (`strict: false` in agent.yaml: unknown keys warn).
pub fn compile_tool_with(
    value: &Value,
    index: usize,
    file: &Path,
    policy: UnknownKeys,
    warnings: &mut Vec<String>,
) -> Result<CompiledTool, CompileError> {
    let prefix = format!("tools[{index}]");
    let fields = Fields::new(file, &prefix, value)?;
    fields.check_keys(&TOOL_KEYS, policy, warnings)?;
    let name = fields.required_string(
        "name",
        "give every tool a `name:` (letters, digits, _ or -)",
    )?;
    let ctx = ToolContext {
        file,
        tool: &name,
        policy,
    };
    if !valid_tool_name(&name) {
        return Err(ctx.error(
            "the name must be 1-64 letters, digits, `_` or `-`",
            "OpenAI function names allow only [a-zA-Z0-9_-]; rename the tool, e.g. list_files",
        ));
    }
    if name == ASK_HUMAN {
        return Err(ctx.error(
            "`ask_human` is a built-in tool and cannot be redefined",
            "rename your tool (for example ask_user); the built-in ask_human is always available",
        ));
    }
    let forms: Vec<&str> = ["exec", "shell", "command"]
        .into_iter()
        .filter(|k| fields.has(k))
        .collect();
    if forms.len() != 1 {
        let found = if forms.is_empty() {
            "none".to_string()
        } else {
            forms.join(" and ")
        };
        return Err(ctx.error(
            format!("must have exactly one of exec:, shell:, or command: (found {found})"),
            "use exec: for a plain command, shell: when you need pipes or redirects, command: + parameters: for the legacy form",
        ));
    }
    let description = fields.string("description")?;
    let timeout_ms = fields.timeout_ms("timeout_ms")?;
    let stdin = fields.string("stdin")?;
    let declared = fields.sequence("parameters")?;
    let explicit = match declared {
        Some(items) => parse_explicit(&ctx, &prefix, items, warnings)?,
        None => Vec::new(),
    };
    // With `parameters:` given, it is the tool's whole list: a placeholder it lacks is a
    // typo (`${patern}`) the model would otherwise be asked to fill in. Checked after the
    // merge, whose "declared but not found in template" names a typo from the other side.
    let declared_names: Vec<String> = explicit.iter().map(|p| p.name.clone()).collect();
    let undeclared_placeholders =
        |placeholders: &[String], warnings: &mut Vec<String>| match declared {
            Some(_) => {
                let placeholders: Vec<&str> = placeholders.iter().map(String::as_str).collect();
                check_declared(&ctx, &placeholders, &declared_names, warnings)
            }
            None => Ok(()),
        };
    let template_error = |e: placeholder::TemplateError| ctx.error(e.message, e.hint);

    let stdin_name = stdin.as_deref();
    let (syntax, template_text, command, parameters) = if let Some(text) = fields.string("exec")? {
        let compiled = template::compile_exec(&text, stdin_name).map_err(template_error)?;
        let placeholders = compiled.parameters.clone();
        let inferred = inferred_parameters(
            &ctx,
            compiled.parameters.iter().map(|n| (n.clone(), false)),
            0,
            stdin,
        )?;
        let parameters = merge_inferred(&ctx, inferred, explicit)?;
        undeclared_placeholders(&placeholders, warnings)?;
        if let Some(variable) = template::bare_shell_variable(&text) {
            warnings.push(format!(
                "{}: tool `{name}`: `{variable}` is passed literally because exec: runs no shell; use ${{AGENT_HOME}}, ${{CWD}} or ${{RUN_ID}}, or shell: mode",
                file.display()
            ));
        }
        (ToolSyntax::Exec, Some(text), compiled.tokens, parameters)
    } else if let Some(text) = fields.string("shell")? {
        let compiled = template::compile_shell(&text, stdin_name).map_err(template_error)?;
        let placeholders: Vec<String> = compiled
            .parameters
            .iter()
            .map(|(name, _raw)| name.clone())
            .collect();
        let offset = compiled.engine_slots.len();
        let inferred = inferred_parameters(&ctx, compiled.parameters.into_iter(), offset, stdin)?;
        let parameters = merge_inferred(&ctx, inferred, explicit)?;
        undeclared_placeholders(&placeholders, warnings)?;
        let mut command = vec![
            "sh".to_string(),
            "-c".to_string(),
            compiled.script,
            "--".to_string(),
        ];
        command.extend(compiled.engine_slots);
        (ToolSyntax::Shell, Some(text), command, parameters)
    } else {
        let command = fields.string_list("command")?.unwrap_or_default();
        if !matches!(command.first(), Some(program) if !program.trim().is_empty()) {
            return Err(ctx.error(
                "`command` must be a non-empty list whose first element is the program",
                "e.g. command: [\"ls\", \"-la\"]",
            ));
        }
        if stdin.is_some() {
            return Err(ctx.error(
                "`stdin:` is a shorthand of exec:/shell: tools",
                "in a command: tool declare the parameter with inject_as: stdin",
            ));
        }
        let parameters = legacy_parameters(&ctx, explicit, warnings)?;
        (ToolSyntax::Legacy, None, command, parameters)
    };
    Ok(CompiledTool {
        name,
        description,
        syntax,
        template: template_text,
        command,
        parameters,
        timeout_ms,
        source_file: file.to_path_buf(),
    })
}

/// Template placeholders (`(name, raw)`, positions from `offset`) plus the `stdin:` parameter.
fn inferred_parameters(
    ctx: &ToolContext<'_>,
    names: impl Iterator<Item = (String, bool)>,
    offset: usize,
    stdin: Option<String>,
) -> Result<Vec<ToolParameter>, CompileError> {
    let mut inferred: Vec<ToolParameter> = names
        .enumerate()
        .map(|(i, (name, raw))| ToolParameter {
            name,
            param_type: ParamType::String,
            inject_as: InjectAs::Argument,
            option_name: None,
            position: Some(offset + i),
            raw,
            description: None,
            default: None,
            required: true,
        })
        .collect();
    if let Some(stdin_name) = stdin {
        if !stdin_name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
            || stdin_name.is_empty()
        {
            return Err(ctx.error(
                format!("`stdin: {stdin_name}` must be a parameter name"),
                "write the bare name, e.g. stdin: content",
            ));
        }
        if placeholder::is_engine_var(&stdin_name) {
            return Err(ctx.error(
                format!("`stdin: {stdin_name}` names an engine variable"),
                "choose another parameter name for stdin",
            ));
        }
        inferred.push(ToolParameter {
            name: stdin_name,
            param_type: ParamType::String,
            inject_as: InjectAs::Stdin,
            option_name: None,
            position: None,
            raw: false,
            description: None,
            default: None,
            required: true,
        });
    }
    Ok(inferred)
}

#[cfg(test)]
mod tests;
