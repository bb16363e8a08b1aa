//! Loading a scripted-model script: [`Script::load`] and [`Script::from_yaml_str`], the serde
//! shapes of the YAML/JSON file and the loader that turns them into the [`Script`] model,
//! compiling and test-rendering every template so mistakes surface at load time, with
//! errors naming the file and the key.
//!
//! Must not play scripts (that is `respond.rs`); its only I/O is reading the one script file,
//! within bounds.

use std::path::Path;
use std::time::Duration;

use dashmap::DashMap;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde::Deserialize;
use serde_json::Value;

use super::latency::{parse_latency, MAX_SCRIPTED_WAIT};
use super::script::{
    Action, ArgTree, Args, CallSpec, Latency, Rule, Script, ScriptError, Step, StreamShape, Text,
    DEFAULT_MODEL, EXHAUSTED_ANSWER, MAX_CHUNKS,
};
use super::variables::{sample_context, TEMPLATE_VARIABLES};
use crate::input::{check_size, check_yaml_depth, read_bounded, InputError};
use crate::template_bounds::{explain, limit_work, render_bounded};
use crate::template_names::{enclosing_block, unknown_name};

/// Largest script file, in bytes.
const SCRIPT_BYTES: u64 = 4 * 1024 * 1024;
/// Deepest nesting of flow collections in a script (deeper is refused before parsing: the
/// YAML parser is slow on it).
const SCRIPT_DEPTH: usize = 64;

impl Script {
    /// Reads and validates a script file (YAML, or JSON which is valid YAML).
    pub fn load(path: &Path) -> Result<Script, ScriptError> {
        let text = read_bounded(path, SCRIPT_BYTES).map_err(|error| match error {
            InputError::Io(source) => ScriptError::Read {
                path: path.display().to_string(),
                source,
            },
            other => ScriptError::Invalid {
                origin: path.display().to_string(),
                key: "(file)".to_owned(),
                message: format!("{other} (hint: see docs/llm-script.md)"),
            },
        })?;
        Script::from_yaml_str(&text, &path.display().to_string())
    }

    /// Parses a script; `origin` names it in error messages (usually the file path).
    pub fn from_yaml_str(text: &str, origin: &str) -> Result<Script, ScriptError> {
        check_size(text, SCRIPT_BYTES)
            .and_then(|()| check_yaml_depth(text, SCRIPT_DEPTH))
            .map_err(|error| ScriptError::Invalid {
                origin: origin.to_owned(),
                key: "(file)".to_owned(),
                message: format!("{error} (hint: see docs/llm-script.md)"),
            })?;
        let raw: RawScript = serde_yaml::from_str(text).map_err(|e| {
            let top_level = serde_yaml::from_str::<serde_yaml::Value>(text).ok();
            if top_level.is_some_and(|v| !v.is_mapping()) {
                return ScriptError::Invalid {
                    origin: origin.to_owned(),
                    key: "(top level)".to_owned(),
                    message: "the script must be a mapping with `rules:` or `steps:`".to_owned(),
                };
            }
            let syntax = crate::yaml_errors::syntax_error(text, &e);
            let message = if syntax.tab {
                format!("{syntax} ({})", crate::yaml_errors::TAB_HINT)
            } else {
                crate::yaml_errors::serde_message_in_words(&e.to_string())
            };
            ScriptError::Parse {
                origin: origin.to_owned(),
                message,
            }
        })?;
        Loader::new(origin).script(raw)
    }
}

// ---- raw (serde) shapes -------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScript {
    model: Option<String>,
    strict: Option<bool>,
    quirks: Option<Vec<String>>,
    require_api_key: Option<String>,
    default_latency_ms: Option<u64>,
    default_latency: Option<RawLatency>,
    when_exhausted: Option<String>,
    rules: Option<Vec<RawRule>>,
    steps: Option<Vec<RawStep>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    /// A label for readers of the script; accepted and otherwise ignored.
    #[serde(rename = "name")]
    _name: Option<String>,
    agent: Option<String>,
    task_contains: Option<String>,
    last_user_contains: Option<String>,
    model: Option<String>,
    latency: Option<RawLatency>,
    #[serde(default)]
    steps: Vec<RawStep>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    tool: Option<String>,
    args: Option<Value>,
    raw_args: Option<String>,
    tools: Option<Vec<RawCall>>,
    content: Option<String>,
    answer: Option<String>,
    fail: Option<u16>,
    times: Option<u32>,
    retry_after: Option<f64>,
    message: Option<String>,
    then: Option<Box<RawStep>>,
    latency: Option<RawLatency>,
    finish_reason: Option<String>,
    chunks: Option<u32>,
    stall: Option<RawLatency>,
    stall_times: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCall {
    tool: String,
    args: Option<Value>,
    raw_args: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawLatency {
    Millis(u64),
    Text(String),
}

struct Loader {
    origin: String,
    templates: Environment<'static>,
}

impl Loader {
    fn new(origin: &str) -> Self {
        let mut templates = Environment::new();
        templates.set_undefined_behavior(UndefinedBehavior::Strict);
        templates.set_auto_escape_callback(|_| AutoEscape::None);
        templates.set_keep_trailing_newline(true);
        limit_work(&mut templates);
        Loader {
            origin: origin.to_owned(),
            templates,
        }
    }

    fn invalid(&self, key: &str, message: impl Into<String>) -> ScriptError {
        ScriptError::Invalid {
            origin: self.origin.clone(),
            key: key.to_owned(),
            message: message.into(),
        }
    }

    fn script(mut self, raw: RawScript) -> Result<Script, ScriptError> {
        let default_latency = match (raw.default_latency_ms, raw.default_latency) {
            (Some(_), Some(_)) => {
                return Err(self.invalid(
                    "default_latency",
                    "set either `default_latency_ms` or `default_latency`, not both",
                ))
            }
            (Some(ms), None) => Latency {
                min: Duration::from_millis(ms),
                max: Duration::from_millis(ms),
            },
            (None, Some(l)) => self.latency("default_latency", l)?,
            (None, None) => Latency::default(),
        };
        let raw_rules = match (raw.rules, raw.steps) {
            (Some(_), Some(_)) => {
                return Err(self.invalid(
                    "steps",
                    "top-level `steps` is shorthand for one catch-all rule; use it or `rules`, not both",
                ))
            }
            (Some(rules), None) if rules.is_empty() => {
                return Err(self.invalid(
                    "rules",
                    "`rules` is empty, so no request could be answered (hint: add `- steps: [{answer: \"hi\"}]`)",
                ))
            }
            (Some(rules), None) => rules,
            (None, Some(steps)) => vec![RawRule {
                _name: None,
                agent: None,
                task_contains: None,
                last_user_contains: None,
                model: None,
                latency: None,
                steps,
            }],
            (None, None) => {
                return Err(self.invalid(
                    "rules",
                    "the script has no `rules` (hint: add `rules: [{steps: [{answer: \"hi\"}]}]`)",
                ))
            }
        };
        let mut quirks = super::script::Quirks::default();
        for (i, name) in raw.quirks.iter().flatten().enumerate() {
            if !quirks.set(name) {
                return Err(self.invalid(
                    &format!("quirks[{i}]"),
                    format!(
                        "`{name}` is not a quirk the scripted model imitates (known: {})",
                        super::script::Quirks::NAMES.join(", ")
                    ),
                ));
            }
        }
        let mut rules = Vec::with_capacity(raw_rules.len());
        for (i, rule) in raw_rules.into_iter().enumerate() {
            rules.push(self.rule(&format!("rules[{i}]"), rule)?);
        }
        Ok(Script {
            origin: self.origin,
            model: raw.model.unwrap_or_else(|| DEFAULT_MODEL.to_owned()),
            strict: raw.strict.unwrap_or(true),
            quirks,
            require_api_key: raw.require_api_key,
            exhausted_answer: raw
                .when_exhausted
                .unwrap_or_else(|| EXHAUSTED_ANSWER.to_owned()),
            default_latency,
            rules,
            templates: self.templates,
            attempts: DashMap::new(),
            stalls: DashMap::new(),
        })
    }

    fn rule(&mut self, key: &str, raw: RawRule) -> Result<Rule, ScriptError> {
        let latency = raw
            .latency
            .map(|l| self.latency(&format!("{key}.latency"), l))
            .transpose()?;
        let mut steps = Vec::with_capacity(raw.steps.len());
        for (i, step) in raw.steps.into_iter().enumerate() {
            steps.push(self.step(&format!("{key}.steps[{i}]"), step)?);
        }
        Ok(Rule {
            agent: raw.agent,
            task_contains: raw.task_contains,
            last_user_contains: raw.last_user_contains,
            model: raw.model,
            latency,
            steps,
        })
    }

    fn step(&mut self, key: &str, mut raw: RawStep) -> Result<Step, ScriptError> {
        let kinds = [
            raw.tool.is_some(),
            raw.tools.is_some(),
            raw.answer.is_some(),
            raw.fail.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            return Err(self.invalid(
                key,
                "a step needs exactly one of `tool`, `tools`, `answer` or `fail`",
            ));
        }
        let latency = raw
            .latency
            .take()
            .map(|l| self.latency(&format!("{key}.latency"), l))
            .transpose()?;
        let is_fail = raw.fail.is_some();
        if is_fail && raw.finish_reason.is_some() {
            return Err(self.invalid(
                &format!("{key}.finish_reason"),
                "`finish_reason` goes with `answer`, `tool` or `tools` (a failure has none)",
            ));
        }
        let finish_reason = raw.finish_reason.take();
        let stream = self.stream_shape(key, &mut raw, is_fail)?;
        if !is_fail {
            for (present, name) in [
                (raw.times.is_some(), "times"),
                (raw.retry_after.is_some(), "retry_after"),
                (raw.message.is_some(), "message"),
                (raw.then.is_some(), "then"),
            ] {
                if present {
                    return Err(self.invalid(
                        &format!("{key}.{name}"),
                        format!("`{name}` only goes with `fail:`"),
                    ));
                }
            }
        }
        if raw.tool.is_none() && (raw.args.is_some() || raw.raw_args.is_some()) {
            return Err(self.invalid(
                key,
                "`args`/`raw_args` go with `tool:` (inside `tools:` give them per call)",
            ));
        }
        if raw.content.is_some() && raw.tool.is_none() && raw.tools.is_none() {
            return Err(self.invalid(
                &format!("{key}.content"),
                "`content` is the text sent beside tool calls; for a final text use `answer`",
            ));
        }
        let action = if let Some(tool) = raw.tool {
            let call = self.call(key, tool, raw.args, raw.raw_args)?;
            Action::Calls {
                content: self.opt_text(&format!("{key}.content"), raw.content)?,
                calls: vec![call],
            }
        } else if let Some(tools) = raw.tools {
            if tools.is_empty() {
                return Err(self.invalid(
                    &format!("{key}.tools"),
                    "`tools` is empty (hint: list at least one `{tool: name, args: {}}`)",
                ));
            }
            let mut calls = Vec::with_capacity(tools.len());
            for (i, c) in tools.into_iter().enumerate() {
                calls.push(self.call(&format!("{key}.tools[{i}]"), c.tool, c.args, c.raw_args)?);
            }
            Action::Calls {
                content: self.opt_text(&format!("{key}.content"), raw.content)?,
                calls,
            }
        } else if let Some(answer) = raw.answer {
            Action::Answer(self.text(&format!("{key}.answer"), answer)?)
        } else {
            self.fail(key, raw)?
        };
        Ok(Step {
            action,
            latency,
            finish_reason,
            stream,
        })
    }

    /// `chunks`, `stall` and `stall_times`: how a streamed reply is delivered.
    fn stream_shape(
        &self,
        key: &str,
        raw: &mut RawStep,
        is_fail: bool,
    ) -> Result<StreamShape, ScriptError> {
        let chunks = raw.chunks.take();
        let stall = raw
            .stall
            .take()
            .map(|l| self.latency(&format!("{key}.stall"), l))
            .transpose()?
            .map(|l| l.max);
        let stall_times = raw.stall_times.take();
        if is_fail && (chunks.is_some() || stall.is_some()) {
            return Err(self.invalid(
                key,
                "`chunks` and `stall` shape a streamed reply; a failure has none",
            ));
        }
        if let Some(n) = chunks {
            if !(1..=MAX_CHUNKS).contains(&n) {
                return Err(self.invalid(
                    &format!("{key}.chunks"),
                    format!("{n} is outside 1..={MAX_CHUNKS}"),
                ));
            }
        }
        if stall_times.is_some() && stall.is_none() {
            return Err(self.invalid(
                &format!("{key}.stall_times"),
                "`stall_times` goes with `stall:` (how many attempts stall)",
            ));
        }
        Ok(StreamShape {
            chunks,
            stall,
            stall_times,
        })
    }

    fn fail(&mut self, key: &str, raw: RawStep) -> Result<Action, ScriptError> {
        let status = raw.fail.unwrap_or(500);
        if !(400..=599).contains(&status) {
            return Err(self.invalid(
                &format!("{key}.fail"),
                format!(
                    "{status} is not an HTTP error status (hint: use 400-599, e.g. 429 or 503)"
                ),
            ));
        }
        if raw.times == Some(0) {
            return Err(self.invalid(&format!("{key}.times"), "`times` must be at least 1"));
        }
        if raw.times.is_some() && raw.then.is_none() {
            return Err(self.invalid(
                &format!("{key}.then"),
                "`times: N` needs `then:` (the step played once the failures are used up); \
                 omit `times` to fail on every attempt",
            ));
        }
        if raw.times.is_none() && raw.then.is_some() {
            return Err(self.invalid(
                &format!("{key}.times"),
                "`then:` is only reached after `times: N` failures; set `times`",
            ));
        }
        let retry_after = match raw.retry_after {
            Some(s) if !(s.is_finite() && s >= 0.0) => {
                return Err(self.invalid(
                    &format!("{key}.retry_after"),
                    "`retry_after` is a number of seconds >= 0",
                ))
            }
            Some(s) => match Duration::try_from_secs_f64(s)
                .ok()
                .filter(|d| *d <= MAX_SCRIPTED_WAIT)
            {
                Some(wait) => Some(wait),
                None => {
                    return Err(self.invalid(
                        &format!("{key}.retry_after"),
                        format!(
                            "`retry_after` {s} is too large (at most {} seconds)",
                            MAX_SCRIPTED_WAIT.as_secs()
                        ),
                    ))
                }
            },
            None => None,
        };
        let then = match raw.then {
            Some(next) => {
                let next_key = format!("{key}.then");
                let step = self.step(&next_key, *next)?;
                if matches!(step.action, Action::Fail { .. }) {
                    return Err(self.invalid(
                        &next_key,
                        "`then` must be a tool call or an answer, not another `fail`",
                    ));
                }
                Some(Box::new(step))
            }
            None => None,
        };
        Ok(Action::Fail {
            status,
            times: raw.times,
            retry_after,
            message: self.opt_text(&format!("{key}.message"), raw.message)?,
            then,
        })
    }

    fn call(
        &mut self,
        key: &str,
        tool: String,
        args: Option<Value>,
        raw_args: Option<String>,
    ) -> Result<CallSpec, ScriptError> {
        if tool.trim().is_empty() {
            return Err(self.invalid(&format!("{key}.tool"), "the tool name is empty"));
        }
        let args = match (args, raw_args) {
            (Some(_), Some(_)) => {
                return Err(self.invalid(key, "use `args` or `raw_args`, not both"));
            }
            (_, Some(raw)) => Args::Raw(self.text(&format!("{key}.raw_args"), raw)?),
            (None, None) => Args::Json(ArgTree::Object(Vec::new())),
            (Some(value), None) => {
                if !value.is_object() {
                    return Err(self.invalid(
                        &format!("{key}.args"),
                        "`args` must be a mapping of parameter names to values \
                         (hint: use `raw_args` to send arbitrary text)",
                    ));
                }
                Args::Json(self.tree(&format!("{key}.args"), value)?)
            }
        };
        Ok(CallSpec { tool, args })
    }

    fn tree(&mut self, key: &str, value: Value) -> Result<ArgTree, ScriptError> {
        Ok(match value {
            Value::String(s) => ArgTree::Text(self.text(key, s)?),
            Value::Array(items) => ArgTree::Array(
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| self.tree(&format!("{key}[{i}]"), v))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(map) => ArgTree::Object(
                map.into_iter()
                    .map(|(k, v)| {
                        let child = self.tree(&format!("{key}.{k}"), v)?;
                        Ok((k, child))
                    })
                    .collect::<Result<_, ScriptError>>()?,
            ),
            scalar => ArgTree::Scalar(scalar),
        })
    }

    fn opt_text(&mut self, key: &str, text: Option<String>) -> Result<Option<Text>, ScriptError> {
        text.map(|t| self.text(key, t)).transpose()
    }

    /// Registers `source` as a template when it contains template syntax, checking at load
    /// time that it compiles and only uses known variables.
    fn text(&mut self, key: &str, source: String) -> Result<Text, ScriptError> {
        if !(source.contains("{{") || source.contains("{%")) {
            return Ok(Text::Literal(source));
        }
        let name = key.to_owned();
        self.templates
            .add_template_owned(name.clone(), source.clone())
            .map_err(|e| self.invalid(key, format!("template does not compile: {e}")))?;
        if let Some(unknown) = unknown_name(&self.templates, &source) {
            let expression = enclosing_block(&source, unknown.at.clone()).unwrap_or(&source);
            return Err(self.invalid(
                key,
                format!(
                    "template `{}`: {unknown} (hint: minijinja's built-in filters and tests, \
                     see docs/llm-script.md)",
                    expression.trim()
                ),
            ));
        }
        let template = self
            .templates
            .get_template(&name)
            .map_err(|e| self.invalid(key, format!("template does not compile: {e}")))?;
        if let Some(unknown) = unknown_variable(&self.templates, &template) {
            return Err(self.invalid(key, unknown));
        }
        if let Err(e) = render_bounded(&template, sample_context()) {
            let reason = explain(&e).unwrap_or_else(|| e.kind().to_string());
            let expression = e
                .range()
                .and_then(|range| enclosing_block(&source, range))
                .unwrap_or(&source);
            return Err(self.invalid(
                key,
                format!(
                    "template `{}` fails to render: {reason}{} (hint: the variables are {})",
                    expression.trim(),
                    e.detail().map(|d| format!(" ({d})")).unwrap_or_default(),
                    TEMPLATE_VARIABLES
                ),
            ));
        }
        Ok(Text::Template(name))
    }

    fn latency(&self, key: &str, raw: RawLatency) -> Result<Latency, ScriptError> {
        let parsed = match raw {
            RawLatency::Millis(ms) => Some(Duration::from_millis(ms))
                .filter(|latency| *latency <= MAX_SCRIPTED_WAIT)
                .map(|latency| Latency {
                    min: latency,
                    max: latency,
                }),
            RawLatency::Text(text) => parse_latency(&text),
        };
        parsed.ok_or_else(|| {
            self.invalid(
                key,
                "latency must be milliseconds (`200`), a duration (`200ms`, `1.5s`), \
                 a jitter (`200±50`, `200+-50`) or a range (`100..300`), of at most one hour",
            )
        })
    }
}

/// "unknown variable `tsk` (did you mean `task`?) ...", for the first variable `template`
/// reads that is neither a script variable nor one of the environment's globals.
fn unknown_variable(
    env: &Environment<'_>,
    template: &minijinja::Template<'_, '_>,
) -> Option<String> {
    let known: Vec<&str> = TEMPLATE_VARIABLES.split(", ").collect();
    let mut read: Vec<String> = template.undeclared_variables(false).into_iter().collect();
    read.sort();
    let unknown = read.into_iter().find(|name| {
        !known.contains(&name.as_str()) && !env.globals().any(|(global, _)| global == name)
    })?;
    let suggestion = crate::yaml::closest(&unknown, &known)
        .map(|k| format!(" (did you mean `{k}`?)"))
        .unwrap_or_default();
    Some(format!(
        "template reads `{unknown}`, which is not a variable{suggestion} (hint: the variables are \
         {TEMPLATE_VARIABLES}; see docs/llm-script.md)"
    ))
}
