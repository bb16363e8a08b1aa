//! Tests of the budget, condition, cache, pipeline and compaction keys of context.yaml.

use std::path::Path;

use serde_yaml::Value;

use super::options::*;
use super::{parse_context_recipe, AgentError, ContextRecipe, ContextSource};
use crate::yaml::UnknownKeys;

fn parse(text: &str) -> Result<ContextRecipe, AgentError> {
    let doc: Value = serde_yaml::from_str(text).unwrap();
    parse_context_recipe(
        Path::new("/a/context.yaml"),
        &doc,
        UnknownKeys::Refuse,
        &mut Vec::new(),
    )
}

#[test]
fn the_budget_keys_parse() {
    let recipe = parse(
        "total_max_tokens: 8000
sources:
  - type: file
    path: '${CWD}/api.md'
    max_tokens: 2000
    on_overflow: fail
    condition: {when: task_contains, pattern: 'API | endpoint|REST'}
  - type: computed_file
    generator: [python3, s.py]
    output_path: o.md
    max_tokens: 500
    cache: {strategy: file_hash, invalidate_on: ['src/**/*.py', '${AGENT_HOME}/notes/*.md']}
    condition: {when: env_set, name: USE_IT}
  - type: pipeline
    id: docs
    stages:
      - {generator: [retrieve.py], output: '${CWD}/.delta/tmp/docs.json'}
      - {generator: {command: [rank.py], timeout_ms: 5000}, output: '${CWD}/.delta/tmp/final.md'}
    condition: {when: file_exists, path: 'src'}
  - type: journal
    compaction: {strategy: mask_then_summarize, keep_last: 3, compact_to: 40%, summary_model: small, summary_max_tokens: 300}
",
    )
    .unwrap();
    assert_eq!(recipe.total_max_tokens, Some(8000));
    let ContextSource::File {
        max_tokens,
        condition: Some(SourceCondition::TaskContains { pattern }),
        ..
    } = &recipe.sources[0]
    else {
        panic!("{:?}", recipe.sources[0]);
    };
    assert_eq!(
        *max_tokens,
        Some(TokenCap {
            max_tokens: 2000,
            on_overflow: OnOverflow::Fail
        })
    );
    assert!(pattern.regex.is_match("Call the rest api"));
    assert!(!pattern.regex.is_match("read a book"));
    let ContextSource::ComputedFile {
        command,
        timeout_ms,
        max_tokens,
        cache: Some(cache),
        ..
    } = &recipe.sources[1]
    else {
        panic!("{:?}", recipe.sources[1]);
    };
    assert_eq!((command.len(), *timeout_ms), (2, 30_000));
    assert_eq!(max_tokens.unwrap().on_overflow, OnOverflow::Cut);
    assert_eq!(cache.invalidate_on.len(), 2);
    let ContextSource::Pipeline { stages, .. } = &recipe.sources[2] else {
        panic!("{:?}", recipe.sources[2]);
    };
    assert_eq!(stages[1].timeout_ms, 5000);
    assert_eq!(stages[0].output, "${CWD}/.delta/tmp/docs.json");
    let compaction = recipe.compaction();
    assert_eq!(compaction.strategy, CompactionStrategy::MaskThenSummarize);
    assert_eq!(
        (compaction.keep_last, compaction.compact_to_percent),
        (3, 40)
    );
    assert_eq!(compaction.summary_model.as_deref(), Some("small"));
    assert_eq!(compaction.summary_max_tokens, 300);
    let short = parse("sources:\n  - type: journal\n    compaction: summarize\n").unwrap();
    assert_eq!(short.compaction().strategy, CompactionStrategy::Summarize);
    assert_eq!(short.compaction().keep_last, DEFAULT_KEEP_LAST);
}

#[test]
fn mistakes_in_the_budget_keys_name_the_key_and_a_fix() {
    let cases = [
        ("total_max_tokens: 100\nsources:\n  - type: journal\n", "`total_max_tokens` is 100, outside 256..", "the default is"),
        ("sources:\n  - type: file\n    path: x\n    on_overflow: truncate\n    max_tokens: 5\n", "`sources[0].on_overflow` is `truncate`", "use `cut`"),
        ("sources:\n  - type: file\n    path: x\n    on_overflow: fail\n", "`sources[0].on_overflow` is set without `sources[0].max_tokens`", "add `max_tokens"),
        ("sources:\n  - type: file\n    path: x\n    condition: {when: task_contain, pattern: x}\n", "`sources[0].condition.when` is `task_contain` (did you mean `task_contains`?)", "use one of"),
        ("sources:\n  - type: file\n    path: x\n    condition: {when: task_contains}\n", "`sources[0].condition.pattern` is required", "API|endpoint"),
        ("sources:\n  - type: file\n    path: x\n    condition: {when: task_matches, pattern: '(unclosed'}\n", "is not a valid regular expression", "task_contains"),
        ("sources:\n  - type: computed_file\n    generator: [g]\n    output_path: o\n    cache: {strategy: mtime, invalidate_on: [a]}\n", "`sources[0].cache.strategy` is `mtime`", "file_hash"),
        ("sources:\n  - type: computed_file\n    generator: [g]\n    output_path: o\n    cache: {invalidate_on: ['../up/*.py']}\n", "reaches outside the workspace", "without `..`"),
        ("sources:\n  - type: computed_file\n    generator: [g]\n    output_path: o\n    cache: {invalidate_on: []}\n", "must list at least one glob", "invalidate_on"),
        ("sources:\n  - type: pipeline\n    stages: []\n", "`sources[0].stages` must list at least one stage", "generator"),
        ("sources:\n  - type: pipeline\n    stages: [{generator: [a]}]\n", "`sources[0].stages[0].output` is required", "output:"),
        ("sources:\n  - type: pipeline\n    stages: [{output: o}]\n", "`sources[0].stages[0].generator` is required", "command"),
        ("sources:\n  - type: journal\n    compaction: squash\n", "`sources[0].compaction` is `squash`", "mask"),
        ("sources:\n  - type: journal\n    compaction: {compact_to: 95%}\n", "not a share of the budget from 10% to 90%", "compact_to: 50%"),
    ];
    for (text, phrase, hint) in cases {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.contains(phrase), "{text}\n{err}");
        assert!(err.contains(hint), "{text}\n{err}");
        assert!(err.contains("/a/context.yaml"), "{err}");
    }
}

#[test]
fn a_recipe_reads_the_child_environment_only_through_a_generator_or_an_env_set_condition() {
    let files_and_journal = parse(
        "sources:
  - {type: file, path: a.md, condition: {when: file_exists, path: a.md}}
  - {type: file, path: b.md, condition: {when: task_contains, pattern: b}}
  - {type: journal}
",
    )
    .unwrap();
    assert!(!files_and_journal.reads_child_environment());
    let env_condition = parse(
        "sources:
  - {type: file, path: a.md, condition: {when: env_set, name: USE_IT}}
",
    )
    .unwrap();
    assert!(env_condition.reads_child_environment());
    let generator = parse(
        "sources:
  - {type: computed_file, generator: [gen.sh], output_path: o.md}
",
    )
    .unwrap();
    assert!(generator.reads_child_environment());
    let pipeline = parse(
        "sources:
  - type: pipeline
    id: docs
    stages:
      - {generator: [retrieve.sh], output: d.json}
",
    )
    .unwrap();
    assert!(pipeline.reads_child_environment());
}
