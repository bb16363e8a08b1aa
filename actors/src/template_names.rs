//! The filters and tests a template calls, checked against the environment it will render
//! in when the file is loaded: `| lenght` (or `{% filter lenght %}`, `is evn`, `map("lenght")`,
//! `select("evn")`) used to pass `--dry-run` and fail only when the template was finally
//! rendered — for a plan's later stage, after every earlier run had been paid for. Shared by
//! plan templates and the scripted model's templates.
//!
//! Names are read with minijinja's own tokenizer (so strings, comments and `{% raw %}` never
//! count) and looked up with its `is filter` / `is test` tests (so filters an environment
//! adds count, whatever the minijinja version ships).
//!
//! Also owns quoting the block (`{{ ... }}` / `{% ... %}`) around a spot of a template,
//! so every template error shows the expression the user wrote.
//!
//! Must not: know plan or script keys (callers say where the template is), or render.

use minijinja::machinery::{tokenize, Token, WhitespaceConfig};
use minijinja::syntax::SyntaxConfig;
use minijinja::Environment;

use crate::yaml::closest;

/// Builtin names offered as "did you mean" suggestions (each is checked against the
/// environment first, so a name a minijinja version lacks is never suggested).
const FILTER_SUGGESTIONS: &[&str] = &[
    "abs",
    "attr",
    "batch",
    "bool",
    "capitalize",
    "chain",
    "count",
    "d",
    "default",
    "dictsort",
    "e",
    "escape",
    "first",
    "float",
    "format",
    "groupby",
    "indent",
    "int",
    "items",
    "join",
    "last",
    "length",
    "lines",
    "list",
    "lower",
    "map",
    "max",
    "min",
    "pprint",
    "reject",
    "rejectattr",
    "replace",
    "reverse",
    "round",
    "safe",
    "select",
    "selectattr",
    "slice",
    "sort",
    "split",
    "string",
    "sum",
    "title",
    "tojson",
    "trim",
    "unique",
    "upper",
    "urlencode",
    "zip",
];
const TEST_SUGGESTIONS: &[&str] = &[
    "boolean",
    "defined",
    "divisibleby",
    "endingwith",
    "eq",
    "even",
    "false",
    "filter",
    "float",
    "ge",
    "gt",
    "in",
    "integer",
    "iterable",
    "le",
    "lower",
    "lt",
    "mapping",
    "ne",
    "none",
    "number",
    "odd",
    "sameas",
    "sequence",
    "startingwith",
    "string",
    "test",
    "true",
    "undefined",
    "upper",
];

/// What a template calls by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NameKind {
    /// `x | name`, `{% filter name %}`, `map("name")`.
    Filter,
    /// `x is name`, `x is not name`, `select("name")`, `reject("name")`.
    Test,
}

impl NameKind {
    fn word(self) -> &'static str {
        match self {
            NameKind::Filter => "filter",
            NameKind::Test => "test",
        }
    }
}

/// A filter or test the environment does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {} `{name}`{}", kind.word(), suggestion.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default())]
pub(crate) struct UnknownName {
    /// Filter or test.
    pub kind: NameKind,
    /// The name as written.
    pub name: String,
    /// The closest name the environment has, when one is close.
    pub suggestion: Option<String>,
    /// Where the name is in the source (byte range), to quote the expression around it.
    pub at: std::ops::Range<usize>,
}

/// The first filter or test `source` calls that `env` does not have. A source that does not
/// tokenize is not judged here: compiling it reports the syntax error.
pub(crate) fn unknown_name(env: &Environment<'_>, source: &str) -> Option<UnknownName> {
    called_names(source)
        .into_iter()
        .find(|(kind, name, _)| !has(env, *kind, name))
        .map(|(kind, name, at)| {
            let known: Vec<&str> = match kind {
                NameKind::Filter => FILTER_SUGGESTIONS,
                NameKind::Test => TEST_SUGGESTIONS,
            }
            .iter()
            .copied()
            .filter(|candidate| has(env, kind, candidate))
            .collect();
            UnknownName {
                kind,
                suggestion: closest(&name, &known).map(str::to_owned),
                name,
                at,
            }
        })
}

/// Whether `env` has the filter or test `name`, asked through minijinja's own `is filter` /
/// `is test` (an environment's own additions count).
fn has(env: &Environment<'_>, kind: NameKind, name: &str) -> bool {
    let expression = match kind {
        NameKind::Filter => "name is filter",
        NameKind::Test => "name is test",
    };
    env.compile_expression(expression)
        .and_then(|compiled| compiled.eval(minijinja::context! { name }))
        .is_ok_and(|value| value.is_true())
}

/// Every filter and test name `source` calls, in order, with where it is.
// `SyntaxConfig` is a unit struct only while minijinja's `custom_syntax` feature is off.
#[allow(clippy::default_constructed_unit_structs)]
fn called_names(source: &str) -> Vec<(NameKind, String, std::ops::Range<usize>)> {
    let (tokens, spans): (Vec<Token<'_>>, Vec<std::ops::Range<usize>>) = tokenize(
        source,
        false,
        SyntaxConfig::default(),
        WhitespaceConfig::default(),
    )
    .map_while(Result::ok)
    .map(|(token, span)| (token, span.start_offset as usize..span.end_offset as usize))
    .unzip();
    let mut names = Vec::new();
    for (index, token) in tokens.iter().enumerate() {
        let previous = index.checked_sub(1).and_then(|i| tokens.get(i));
        let next = |offset: usize| tokens.get(index + offset);
        let span = |offset: usize| spans.get(index + offset).cloned().unwrap_or_default();
        match (previous, token, next(1)) {
            // `x | name`, and `{% filter name %}` at the start of a block.
            (_, Token::Pipe, Some(Token::Ident(name)))
            | (Some(Token::BlockStart), Token::Ident("filter"), Some(Token::Ident(name))) => {
                names.push((NameKind::Filter, (*name).to_owned(), span(1)));
                // `map("name")`, `select("name")`, `reject("name")` name another one.
                if let (Some(Token::ParenOpen), Some(Token::Str(inner))) = (next(2), next(3)) {
                    let kind = match *name {
                        "map" => Some(NameKind::Filter),
                        "select" | "reject" => Some(NameKind::Test),
                        _ => None,
                    };
                    if let Some(kind) = kind {
                        names.push((kind, (*inner).to_owned(), span(3)));
                    }
                }
            }
            // `x is name` / `x is not name`, but not an attribute called `is` (`x.is`).
            (previous, Token::Ident("is"), Some(Token::Ident(name)))
                if !matches!(previous, Some(Token::Dot)) =>
            {
                let (name, at) = match (*name, next(2)) {
                    ("not", Some(Token::Ident(negated))) => (*negated, span(2)),
                    (name, _) => (name, span(1)),
                };
                names.push((NameKind::Test, name.to_owned(), at));
            }
            _ => {}
        }
    }
    names
}

/// The whole `{{ ... }}` / `{% ... %}` block around `range`, so the quoted expression is
/// the one the user wrote rather than a fragment of it.
pub(crate) fn enclosing_block(source: &str, range: std::ops::Range<usize>) -> Option<&str> {
    let before = source.get(..range.start)?;
    let start = [before.rfind("{{"), before.rfind("{%")]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(range.start);
    let after = source.get(range.end..)?;
    let end = [after.find("}}"), after.find("%}")]
        .into_iter()
        .flatten()
        .min()
        .map_or(range.end, |offset| range.end + offset + 2);
    source.get(start..end)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn env() -> Environment<'static> {
        Environment::new()
    }

    #[test]
    fn finds_misspelt_filters_and_tests_anywhere_in_the_template() {
        for (source, kind, name, suggestion) in [
            (
                "{{ xs | lenght }}",
                NameKind::Filter,
                "lenght",
                Some("length"),
            ),
            (
                "{% if false %}{{ xs | tojson | uper }}{% endif %}",
                NameKind::Filter,
                "uper",
                Some("upper"),
            ),
            (
                "{% filter uper %}x{% endfilter %}",
                NameKind::Filter,
                "uper",
                Some("upper"),
            ),
            (
                "{{ xs | map('lenght') | list }}",
                NameKind::Filter,
                "lenght",
                Some("length"),
            ),
            (
                "{% if n is evn %}{% endif %}",
                NameKind::Test,
                "evn",
                Some("even"),
            ),
            (
                "{% if n is not evn %}{% endif %}",
                NameKind::Test,
                "evn",
                Some("even"),
            ),
            (
                "{{ xs | select('od') | list }}",
                NameKind::Test,
                "od",
                Some("odd"),
            ),
            ("{{ xs | shout }}", NameKind::Filter, "shout", None),
        ] {
            let found = unknown_name(&env(), source).unwrap_or_else(|| panic!("{source}"));
            assert_eq!(
                (found.kind, found.name.as_str(), found.suggestion.as_deref()),
                (kind, name, suggestion),
                "{source}"
            );
            assert!(source[found.at].contains(name), "{source}");
        }
        assert_eq!(
            unknown_name(&env(), "{{ xs | lenght }}")
                .unwrap()
                .to_string(),
            "unknown filter `lenght` (did you mean `length`?)"
        );
    }

    #[test]
    fn known_names_strings_comments_and_attributes_pass() {
        for source in [
            "{{ xs | length }} {{ xs | map('upper') | join(', ') }}",
            "{% if n is even and m is not none %}{% endif %}",
            "{{ '| lenght' }} {# | lenght #} {% raw %}{{ x | lenght }}{% endraw %}",
            "{{ x.is }} {{ obj.is_open }}",
            "plain text | lenght",
        ] {
            assert_eq!(unknown_name(&env(), source), None, "{source}");
        }
    }

    #[test]
    fn a_filter_the_environment_adds_is_known() {
        let mut env = env();
        env.add_filter("shout", |text: String| text.to_uppercase());
        assert_eq!(unknown_name(&env, "{{ x | shout }}"), None);
    }
}
