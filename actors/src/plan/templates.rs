//! plan::templates — the one minijinja environment plans use, plus the helpers to check a
//! template before running, render a message and evaluate a `foreach` template to a list.
//!
//! Owns: template syntax/strictness settings (undefined variables are errors, `tojson`
//! available, work and output bounded by the crate's template bounds), the "which variables
//! does this template read" analysis, and error text that quotes the failing expression.
//! Must not: know plan keys or stage semantics (`validate.rs` / `expand.rs` add them).

use std::collections::BTreeSet;

use minijinja::{Environment, UndefinedBehavior};

use crate::template_bounds::{explain, limit_work, render_bounded};
use crate::template_names::{enclosing_block, unknown_name};

/// A template failure: the expression (or template) at fault and minijinja's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateFailure {
    pub expression: String,
    pub message: String,
}

/// The environment every plan template is compiled and rendered in.
pub fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    // A typo like `{{ vars.reop }}` must fail, not render an empty string into a prompt.
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_keep_trailing_newline(true);
    limit_work(&mut env);
    env
}

/// The variable paths a template reads (`vars.repo`, `stages.plan.output.steps`, `item`),
/// or why it cannot render: a syntax error, or a filter or test the environment lacks
/// (checked in every branch, so `| lenght` in a later stage fails at load, not after the
/// earlier stages ran).
pub fn variables_read(
    env: &Environment<'_>,
    source: &str,
) -> Result<BTreeSet<String>, TemplateFailure> {
    let template = env
        .template_from_str(source)
        .map_err(|error| failure(source, &error))?;
    if let Some(unknown) = unknown_name(env, source) {
        return Err(TemplateFailure {
            expression: enclosing_block(source, unknown.at.clone())
                .unwrap_or(source)
                .trim()
                .to_owned(),
            message: unknown.to_string(),
        });
    }
    Ok(template.undeclared_variables(true).into_iter().collect())
}

/// Renders `source` with `context` (a JSON object).
pub fn render(
    env: &Environment<'_>,
    source: &str,
    context: &serde_json::Value,
) -> Result<String, TemplateFailure> {
    let template = env
        .template_from_str(source)
        .map_err(|error| failure(source, &error))?;
    render_bounded(&template, context).map_err(|error| failure(source, &error))
}

/// The inner expression when `source` is exactly one `{{ ... }}` block, else `None`.
pub fn sole_expression(source: &str) -> Option<&str> {
    let inner = source.trim().strip_prefix("{{")?.strip_suffix("}}")?;
    let inner = inner.strip_prefix('-').unwrap_or(inner);
    let inner = inner.strip_suffix('-').unwrap_or(inner);
    (!inner.contains("{{") && !inner.contains("}}")).then(|| inner.trim())
}

/// Evaluates a `foreach` template to a list. A template that is one `{{ expr }}` is
/// evaluated as an expression (so a list stays a list); any other template is rendered and
/// its text parsed as a JSON array.
pub fn evaluate_list(
    env: &Environment<'_>,
    source: &str,
    context: &serde_json::Value,
) -> Result<Vec<serde_json::Value>, TemplateFailure> {
    let value = match sole_expression(source) {
        Some(expression) => {
            let compiled = env
                .compile_expression(expression)
                .map_err(|error| failure(expression, &error))?;
            let value = compiled
                .eval(context)
                .map_err(|error| failure(expression, &error))?;
            serde_json::to_value(&value).map_err(|error| TemplateFailure {
                expression: expression.to_owned(),
                message: format!("the value cannot be used as items: {error}"),
            })?
        }
        None => {
            let text = render(env, source, context)?;
            serde_json::from_str(&text).map_err(|error| TemplateFailure {
                expression: source.to_owned(),
                message: format!(
                    "rendered to text that is not a JSON list ({error}): {}",
                    shorten(&text)
                ),
            })?
        }
    };
    match value {
        serde_json::Value::Array(items) => Ok(items),
        other => Err(TemplateFailure {
            expression: sole_expression(source).unwrap_or(source).to_owned(),
            message: format!("yields {} instead of a list", describe(&other)),
        }),
    }
}

fn describe(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Null => "null".to_owned(),
        serde_json::Value::Bool(_) => "a boolean".to_owned(),
        serde_json::Value::Number(_) => "a number".to_owned(),
        serde_json::Value::String(text) => format!("the string {}", shorten(text)),
        serde_json::Value::Object(_) => "an object".to_owned(),
        serde_json::Value::Array(_) => "a list".to_owned(),
    }
}

fn shorten(text: &str) -> String {
    let mut short: String = text.chars().take(80).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    format!("{short:?}")
}

pub(crate) fn failure(source: &str, error: &minijinja::Error) -> TemplateFailure {
    let expression = error
        .range()
        .and_then(|range| enclosing_block(source, range))
        .filter(|text| !text.trim().is_empty())
        .unwrap_or(source);
    let message = match (explain(error), error.detail()) {
        (Some(explained), _) => explained,
        (None, Some(detail)) => format!("{} ({detail})", error.kind()),
        (None, None) => error.kind().to_string(),
    };
    TemplateFailure {
        expression: expression.trim().to_owned(),
        message,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reports_variable_paths() {
        let env = environment();
        let read = variables_read(
            &env,
            "{{ vars.repo }} {{ stages.plan.output.steps | tojson }} {{ item }}",
        )
        .unwrap();
        let read: Vec<&str> = read.iter().map(String::as_str).collect();
        assert_eq!(read, ["item", "stages.plan.output.steps", "vars.repo"]);
    }

    #[test]
    fn syntax_errors_quote_the_expression() {
        let env = environment();
        let error = variables_read(&env, "Hello {{ vars.x | }} end").unwrap_err();
        assert!(error.message.contains("syntax error"), "{error:?}");
    }

    #[test]
    fn undefined_values_fail_with_the_expression() {
        let env = environment();
        let error = render(&env, "x {{ vars.nope.deeper }} y", &json!({"vars": {}})).unwrap_err();
        assert!(error.message.contains("undefined"), "{error:?}");
        assert_eq!(error.expression, "{{ vars.nope.deeper }}");
    }

    #[test]
    fn tojson_is_available() {
        let env = environment();
        let text = render(&env, "{{ xs | tojson }}", &json!({"xs": [1, "a"]})).unwrap();
        assert_eq!(text, "[1,\"a\"]");
    }

    #[test]
    fn sole_expression_detection() {
        assert_eq!(sole_expression(" {{ a.b }} "), Some("a.b"));
        assert_eq!(sole_expression("{{- a -}}"), Some("a"));
        assert_eq!(sole_expression("{{ a }} and {{ b }}"), None);
        assert_eq!(sole_expression("plain"), None);
    }

    #[test]
    fn evaluates_lists_from_expressions_and_rendered_json() {
        let env = environment();
        let context = json!({"s": {"steps": ["a", {"k": 1}]}});
        assert_eq!(
            evaluate_list(&env, "{{ s.steps }}", &context).unwrap(),
            vec![json!("a"), json!({"k": 1})]
        );
        assert_eq!(
            evaluate_list(&env, "[{% for x in s.steps %}{{ loop.index }}{% if not loop.last %},{% endif %}{% endfor %}]", &context).unwrap(),
            vec![json!(1), json!(2)]
        );
        let error = evaluate_list(&env, "{{ s }}", &context).unwrap_err();
        assert!(
            error.message.contains("an object instead of a list"),
            "{error:?}"
        );
    }
}
