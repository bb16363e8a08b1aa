//! Scanning a `shell:` template the way `sh` will parse it, to decide how each placeholder
//! must be quoted: outside quotes, inside '…' or "…", inside `$(…)` and backticks, in a
//! here-document body (expanded like double quotes when the delimiter is unquoted) and in
//! an arithmetic expansion `$((…))`.
//!
//! Two placements no quoting can serve are refused with a hint: a quoted here-document
//! delimiter (`<<'EOF'`: the shell expands nothing in the body, so the value could never
//! arrive) and an arithmetic expansion (the shell evaluates the value as an expression:
//! quotes break it, and a crafted value could run code). `${name:raw}` stays the expert's
//! escape hatch inside `$((…))`. This file only reads text; it builds no command.

use super::placeholder::{placeholder_at, placeholders, template_error, TemplateError};

/// Where a placeholder stands in shell syntax, which decides how `$N` must be quoted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Quoting {
    Unquoted,
    Single,
    /// Inside "…" or an unquoted-delimiter here-document: `$N` expands without splitting.
    Double,
}

/// A piece of the template: literal text, or a placeholder and its quoting context.
pub(crate) enum Segment {
    Text(String),
    Slot {
        name: String,
        raw: bool,
        quoting: Quoting,
    },
}

/// Shell parsing states; command substitutions open a fresh unquoted context.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Context {
    Top,
    Single,
    Double,
    Subshell,
    Backtick,
    /// `$((…))`; nested parentheses inside it are `ArithParen`.
    Arithmetic,
    ArithParen,
    /// The body of a here-document whose delimiter is unquoted.
    HeredocBody,
}

impl Context {
    /// Contexts where `<<` starts a here-document and a newline ends the command line.
    fn is_command(self) -> bool {
        matches!(self, Context::Top | Context::Subshell | Context::Backtick)
    }
}

/// A here-document announced on the current line, whose body starts after it.
struct Heredoc {
    delimiter: String,
    /// `<<'EOF'`, `<<"EOF"` or `<<\EOF`: the body is taken literally.
    quoted: bool,
    /// `<<-`: leading tabs are stripped from body lines and the delimiter line.
    strip_tabs: bool,
}

/// Splits a shell script into literal text and placeholders, tracking quote context.
pub(crate) fn segment_shell(script: &str) -> Result<Vec<Segment>, TemplateError> {
    segment(script, Context::Top)
}

fn segment(script: &str, initial: Context) -> Result<Vec<Segment>, TemplateError> {
    let mut segments = Vec::new();
    let mut text = String::new();
    let mut stack = vec![initial];
    let mut pending: Vec<Heredoc> = Vec::new();
    let mut index = 0;
    while index < script.len() {
        let context = stack.last().copied().unwrap_or(initial);
        let rest = &script[index..];
        if let Some(Ok(p)) = placeholder_at(script, index) {
            let quoting = match context {
                Context::Single => Quoting::Single,
                Context::Double | Context::HeredocBody => Quoting::Double,
                Context::Arithmetic | Context::ArithParen if !p.raw => {
                    return Err(arithmetic_error(&p.name))
                }
                _ => Quoting::Unquoted,
            };
            segments.push(Segment::Text(std::mem::take(&mut text)));
            index = p.end;
            segments.push(Segment::Slot {
                name: p.name,
                raw: p.raw,
                quoting,
            });
            continue;
        }
        let Some(c) = rest.chars().next() else { break };
        let mut step = c.len_utf8();
        match (context, c) {
            (Context::Single, '\'') => {
                stack.pop();
            }
            (Context::Single, _) => {}
            (_, '\\') => {
                // An escaped character never opens or closes anything.
                step += rest[step..].chars().next().map_or(0, char::len_utf8);
            }
            (Context::Double, '"') | (Context::Subshell, ')') | (Context::Backtick, '`') => {
                stack.pop();
            }
            (Context::Arithmetic, ')') if rest.starts_with("))") => {
                stack.pop();
                step = 2;
            }
            (Context::ArithParen, ')') => {
                stack.pop();
            }
            (Context::Arithmetic | Context::ArithParen, '(') => stack.push(Context::ArithParen),
            (_, '$') if rest.starts_with("$((") => {
                stack.push(Context::Arithmetic);
                step = 3;
            }
            (_, '$') if rest.starts_with("$(") => {
                stack.push(Context::Subshell);
                step = 2;
            }
            (_, '`') => stack.push(Context::Backtick),
            (context, '<') if context.is_command() && rest.starts_with("<<") => {
                if let Some((heredoc, length)) = heredoc_operator(rest) {
                    pending.push(heredoc);
                    step = length;
                } else {
                    // `<<<` (a here-string) or `<<` without a word: no body follows.
                    step = rest.len() - rest.trim_start_matches('<').len();
                }
            }
            (context, '\n') if context.is_command() && !pending.is_empty() => {
                text.push('\n');
                index += 1;
                for heredoc in std::mem::take(&mut pending) {
                    let (body, delimiter_line) = heredoc_body(script, index, &heredoc);
                    if heredoc.quoted {
                        if let Some(p) = placeholders(body).into_iter().next() {
                            return Err(quoted_heredoc_error(&p.name, &heredoc.delimiter));
                        }
                        text.push_str(body);
                    } else {
                        segments.push(Segment::Text(std::mem::take(&mut text)));
                        segments.extend(segment(body, Context::HeredocBody)?);
                    }
                    text.push_str(delimiter_line);
                    index += body.len() + delimiter_line.len();
                }
                continue;
            }
            (
                Context::Double | Context::HeredocBody | Context::Arithmetic | Context::ArithParen,
                _,
            ) => {}
            (_, '\'') => stack.push(Context::Single),
            (_, '"') => stack.push(Context::Double),
            _ => {}
        }
        text.push_str(&rest[..step]);
        index += step;
    }
    segments.push(Segment::Text(text));
    Ok(segments)
}

/// Parses `<<[-] WORD` at the start of `rest`: the here-document and the operator's length.
/// `None` for `<<<` and for `<<` not followed by a word.
fn heredoc_operator(rest: &str) -> Option<(Heredoc, usize)> {
    if rest.starts_with("<<<") {
        return None;
    }
    let mut length = 2;
    let strip_tabs = rest[length..].starts_with('-');
    if strip_tabs {
        length += 1;
    }
    length += rest[length..].len() - rest[length..].trim_start_matches([' ', '\t']).len();
    let mut delimiter = String::new();
    let mut quoted = false;
    let mut chars = rest[length..].chars();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => {
                quote = None;
            }
            (Some(_), c) => delimiter.push(c),
            (None, '\'' | '"') => {
                quoted = true;
                quote = Some(c);
            }
            (None, '\\') => {
                quoted = true;
                if let Some(next) = chars.next() {
                    delimiter.push(next);
                    length += next.len_utf8();
                }
            }
            (None, c) if c.is_whitespace() || ";|&<>()".contains(c) => break,
            (None, c) => delimiter.push(c),
        }
        length += c.len_utf8();
    }
    (!delimiter.is_empty()).then_some((
        Heredoc {
            delimiter,
            quoted,
            strip_tabs,
        },
        length,
    ))
}

/// The body of `heredoc` starting at byte `start`, and its delimiter line (with its
/// newline). Without a delimiter line the body runs to the end of the script, as `sh`
/// reads it.
fn heredoc_body<'a>(script: &'a str, start: usize, heredoc: &Heredoc) -> (&'a str, &'a str) {
    let mut line_start = start;
    while line_start < script.len() {
        let line_end = script[line_start..]
            .find('\n')
            .map_or(script.len(), |i| line_start + i + 1);
        let line = script[line_start..line_end].trim_end_matches('\n');
        let line = if heredoc.strip_tabs {
            line.trim_start_matches('\t')
        } else {
            line
        };
        if line == heredoc.delimiter {
            return (&script[start..line_start], &script[line_start..line_end]);
        }
        line_start = line_end;
    }
    (&script[start..], "")
}

fn arithmetic_error(name: &str) -> TemplateError {
    template_error(
        format!(
            "`${{{name}}}` stands inside an arithmetic expansion $(( ... )): the shell evaluates \
             the value there as an expression, so a quoted value breaks it and a crafted value \
             could run code"
        ),
        format!(
            "compute outside $(( )), e.g. shell: \"expr ${{{name}}} + 1\" (the value stays one \
             quoted argument), or write ${{{name}:raw}} if you accept the value as shell \
             arithmetic"
        ),
    )
}

fn quoted_heredoc_error(name: &str, delimiter: &str) -> TemplateError {
    template_error(
        format!(
            "`${{{name}}}` stands in a here-document with a quoted delimiter (<<'{delimiter}'), \
             where the shell expands nothing, so the value could never reach the text"
        ),
        format!(
            "write the delimiter unquoted (<<{delimiter}) and delta quotes ${{{name}}} for the \
             here-document, or pipe the text in with `stdin: {name}`"
        ),
    )
}
