//! Tool parameters: parsing explicit `parameters:` entries and merging them with what a
//! template inferred (spec §2.2.4), plus the legacy `command:` parameter rules.
//!
//! Owns the invariants "inferred injection and position are immutable", "an explicit entry
//! must name a template parameter", "at most one stdin parameter", "option needs
//! option_name" and "a default must fit the declared type". It does not build argv.

use std::path::Path;

use serde_yaml::Value;

use super::error::CompileError;
use super::invocation::stringify;
use super::{InjectAs, ParamType, ToolParameter};
use crate::yaml::{closest, kind_of, Fields, UnknownKeys};

pub(crate) const PARAMETER_KEYS: [&str; 8] = [
    "name",
    "type",
    "description",
    "required",
    "inject_as",
    "option_name",
    "default",
    "position",
];

/// One entry of a tool's `parameters:` list, as written.
#[derive(Debug, Clone, Default)]
pub(crate) struct ExplicitParam {
    pub name: String,
    pub param_type: Option<ParamType>,
    pub inject_as: Option<InjectAs>,
    pub option_name: Option<String>,
    pub position: Option<usize>,
    pub description: Option<String>,
    pub default: Option<serde_json::Value>,
    pub required: Option<bool>,
}

/// Builds the errors of one named tool ([`CompileError::Tool`]).
pub(crate) struct ToolContext<'a> {
    pub file: &'a Path,
    pub tool: &'a str,
    /// Unknown keys and undeclared placeholders: errors, or warnings (`strict: false`).
    pub policy: UnknownKeys,
}

impl ToolContext<'_> {
    pub(crate) fn error(&self, message: impl AsRef<str>, hint: impl Into<String>) -> CompileError {
        CompileError::Tool {
            file: self.file.to_path_buf(),
            tool: self.tool.to_string(),
            message: message.as_ref().to_string(),
            hint: hint.into(),
        }
    }
}

fn parse_enum<T: Copy>(
    ctx: &ToolContext<'_>,
    key_path: &str,
    value: &str,
    options: &[(&'static str, T)],
) -> Result<T, CompileError> {
    if let Some((_, v)) = options.iter().find(|(name, _)| *name == value) {
        return Ok(*v);
    }
    let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
    let suggestion = closest(value, &names)
        .map(|n| format!(" (did you mean `{n}`?)"))
        .unwrap_or_default();
    Err(ctx.error(
        format!("`{key_path}` is `{value}`{suggestion}"),
        format!("use one of: {}", names.join(", ")),
    ))
}

pub(crate) fn parse_param_type(
    ctx: &ToolContext<'_>,
    key_path: &str,
    value: &str,
) -> Result<ParamType, CompileError> {
    parse_enum(
        ctx,
        key_path,
        value,
        &[
            ("string", ParamType::String),
            ("integer", ParamType::Integer),
            ("number", ParamType::Number),
            ("boolean", ParamType::Boolean),
        ],
    )
}

fn parse_inject_as(
    ctx: &ToolContext<'_>,
    key_path: &str,
    value: &str,
) -> Result<InjectAs, CompileError> {
    parse_enum(
        ctx,
        key_path,
        value,
        &[
            ("argument", InjectAs::Argument),
            ("stdin", InjectAs::Stdin),
            ("option", InjectAs::Option),
        ],
    )
}

/// Parses `parameters:` entries; an unknown key is an error (a warning under `strict:
/// false`).
pub(crate) fn parse_explicit(
    ctx: &ToolContext<'_>,
    prefix: &str,
    items: &[Value],
    warnings: &mut Vec<String>,
) -> Result<Vec<ExplicitParam>, CompileError> {
    let mut parsed: Vec<ExplicitParam> = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let path = format!("{prefix}.parameters[{index}]");
        let fields = Fields::new(ctx.file, &path, item)?;
        if fields.has("raw") {
            return Err(ctx.error(
                format!("`{path}.raw` cannot be set in parameters"),
                "mark the placeholder in the template instead: ${name:raw} (shell: mode only)",
            ));
        }
        fields.check_keys(&PARAMETER_KEYS, ctx.policy, warnings)?;
        let name = fields.required_string("name", "give every parameter a `name:`")?;
        if parsed.iter().any(|p| p.name == name) {
            return Err(ctx.error(
                format!("parameter `{name}` is declared twice"),
                "keep one entry per parameter",
            ));
        }
        let param_type = match fields.string("type")? {
            Some(t) => Some(parse_param_type(ctx, &fields.key_path("type"), &t)?),
            None => None,
        };
        let inject_as = match fields.string("inject_as")? {
            Some(t) => Some(parse_inject_as(ctx, &fields.key_path("inject_as"), &t)?),
            None => None,
        };
        let position = match fields.get("position") {
            None => None,
            Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64().map(|p| p as usize),
            Some(other) => {
                return Err(ctx.error(
                    format!(
                        "`{path}.position` must be a whole number, found {}",
                        kind_of(other)
                    ),
                    "positions are inferred from the template; you can usually drop this key",
                ))
            }
        };
        let default = match fields.get("default") {
            None => None,
            Some(v @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => {
                serde_json::to_value(v).ok()
            }
            Some(other) => {
                return Err(ctx.error(
                    format!(
                        "`{path}.default` must be text, a number or a boolean, found {}",
                        kind_of(other)
                    ),
                    "use a single scalar value",
                ))
            }
        };
        parsed.push(ExplicitParam {
            name,
            param_type,
            inject_as,
            option_name: fields.string("option_name")?,
            position,
            description: fields.string("description")?,
            default,
            required: fields.boolean("required")?,
        });
    }
    Ok(parsed)
}

/// With `parameters:` given, every template placeholder must be one of its entries: a
/// placeholder it lacks (`${patern}`) is an error naming the closest declared one (a
/// warning under `strict: false`, and the placeholder is inferred as a string).
pub(crate) fn check_declared(
    ctx: &ToolContext<'_>,
    placeholders: &[&str],
    declared: &[String],
    warnings: &mut Vec<String>,
) -> Result<(), CompileError> {
    let declared: Vec<&str> = declared.iter().map(String::as_str).collect();
    for placeholder in placeholders {
        if declared.contains(placeholder) {
            continue;
        }
        let suggestion = closest(placeholder, &declared)
            .map(|n| format!(" (did you mean `{n}`?)"))
            .unwrap_or_default();
        let message = format!(
            "placeholder `${{{placeholder}}}` names no parameter under `parameters:`{suggestion}"
        );
        if ctx.policy == UnknownKeys::Warn {
            warnings.push(format!(
                "{}: tool `{}`: {message}; it is passed as a string parameter",
                ctx.file.display(),
                ctx.tool
            ));
            continue;
        }
        return Err(ctx.error(
            message,
            format!(
                "with `parameters:` given, every placeholder is declared there: add `- name: \
                 {placeholder}` or fix the placeholder's spelling; `strict: false` in agent.yaml \
                 turns this into a warning (docs/agent.md)"
            ),
        ));
    }
    Ok(())
}

fn finish(
    ctx: &ToolContext<'_>,
    mut param: ToolParameter,
    required: Option<bool>,
) -> Result<ToolParameter, CompileError> {
    if let Some(default) = &param.default {
        stringify(param.param_type, default).map_err(|expected| {
            ctx.error(
                format!(
                    "the default of parameter `{}` must be {expected}, found {default}",
                    param.name
                ),
                format!(
                    "change the default or the parameter's type ({})",
                    param.param_type.as_str()
                ),
            )
        })?;
    }
    param.required = required.unwrap_or(true) && param.default.is_none();
    Ok(param)
}

/// Merges explicit entries into the parameters an `exec:`/`shell:` template inferred.
pub(crate) fn merge_inferred(
    ctx: &ToolContext<'_>,
    inferred: Vec<ToolParameter>,
    explicit: Vec<ExplicitParam>,
) -> Result<Vec<ToolParameter>, CompileError> {
    let mut merged = inferred;
    let mut required_overrides: Vec<Option<bool>> = vec![None; merged.len()];
    for entry in explicit {
        let Some(index) = merged.iter().position(|p| p.name == entry.name) else {
            let available: Vec<&str> = merged.iter().map(|p| p.name.as_str()).collect();
            let mut hint = format!(
                "Available parameters in template: {}",
                if available.is_empty() {
                    "(none)".to_string()
                } else {
                    available.join(", ")
                }
            );
            if entry.inject_as == Some(InjectAs::Stdin) {
                hint.push_str(&format!(
                    "; to pipe a parameter to stdin write `stdin: {}` on the tool",
                    entry.name
                ));
            }
            let suggestion = closest(&entry.name, &available)
                .map(|n| format!(" (did you mean `{n}`?)"))
                .unwrap_or_default();
            return Err(ctx.error(
                format!(
                    "Parameter '{}' declared but not found in template{suggestion}",
                    entry.name
                ),
                hint,
            ));
        };
        let param = &mut merged[index];
        if let Some(explicit_inject) = entry.inject_as {
            if explicit_inject != param.inject_as {
                return Err(ctx.error(
                    format!(
                        "Cannot override inject_as for parameter '{}' (inferred: {}, explicit: {})",
                        entry.name,
                        param.inject_as.as_str(),
                        explicit_inject.as_str()
                    ),
                    "the template decides injection: ${name} is an argument and `stdin: name` pipes it; drop `inject_as`",
                ));
            }
        }
        if let Some(position) = entry.position {
            if Some(position) != param.position {
                return Err(ctx.error(
                    format!(
                        "Cannot override position for parameter '{}' (inferred: {}, explicit: {position})",
                        entry.name,
                        param.position.map_or("none".to_string(), |p| p.to_string())
                    ),
                    "positions follow the template; drop `position`",
                ));
            }
        }
        if entry.option_name.is_some() {
            return Err(ctx.error(
                format!(
                    "parameter `{}` sets option_name, which only applies to inject_as: option",
                    entry.name
                ),
                "write the option into the template instead, e.g. exec: \"tool --port ${port}\"",
            ));
        }
        if let Some(t) = entry.param_type {
            param.param_type = t;
        }
        if entry.description.is_some() {
            param.description = entry.description;
        }
        if entry.default.is_some() {
            param.default = entry.default;
        }
        required_overrides[index] = entry.required;
    }
    merged
        .into_iter()
        .zip(required_overrides)
        .map(|(p, required)| finish(ctx, p, required))
        .collect()
}

/// Parameters of a legacy `command:` tool: appended in declaration order at run time.
pub(crate) fn legacy_parameters(
    ctx: &ToolContext<'_>,
    explicit: Vec<ExplicitParam>,
    warnings: &mut Vec<String>,
) -> Result<Vec<ToolParameter>, CompileError> {
    let mut params = Vec::new();
    let mut stdin_seen: Option<String> = None;
    for entry in explicit {
        let inject_as = entry.inject_as.unwrap_or(InjectAs::Argument);
        match (inject_as, &entry.option_name) {
            (InjectAs::Option, None) => {
                return Err(ctx.error(
                    format!("parameter `{}` has inject_as: option but no option_name", entry.name),
                    "add option_name, e.g. option_name: \"--port\"",
                ))
            }
            (InjectAs::Option, Some(o)) if o.trim().is_empty() => {
                return Err(ctx.error(
                    format!("parameter `{}` has an empty option_name", entry.name),
                    "write the flag, e.g. option_name: \"--port\"",
                ))
            }
            (InjectAs::Argument | InjectAs::Stdin, Some(_)) => warnings.push(format!(
                "{}: tool `{}`: option_name of parameter `{}` is ignored (it only applies to inject_as: option)",
                ctx.file.display(),
                ctx.tool,
                entry.name
            )),
            _ => {}
        }
        if inject_as == InjectAs::Stdin {
            if let Some(first) = &stdin_seen {
                return Err(ctx.error(
                    format!(
                        "At most one parameter can have inject_as: stdin (`{first}` and `{}`)",
                        entry.name
                    ),
                    "a process has one stdin: pass the other value as an argument or option",
                ));
            }
            stdin_seen = Some(entry.name.clone());
        }
        if entry.position.is_some() {
            warnings.push(format!(
                "{}: tool `{}`: position of parameter `{}` is ignored (command: tools append parameters in declaration order)",
                ctx.file.display(),
                ctx.tool,
                entry.name
            ));
        }
        let param = ToolParameter {
            name: entry.name,
            param_type: entry.param_type.unwrap_or(ParamType::String),
            inject_as,
            option_name: if inject_as == InjectAs::Option {
                entry.option_name
            } else {
                None
            },
            position: None,
            raw: false,
            description: entry.description,
            default: entry.default,
            required: true,
        };
        params.push(finish(ctx, param, entry.required)?);
    }
    Ok(params)
}
