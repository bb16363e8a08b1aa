//! The model step's accounting and its cut replies, driven with the fake ports of
//! `tests.rs`: a reply without usage counted as an estimate (marked in the journal, the
//! metadata and the RunResult), an absurd usage recorded as the provider's error and not
//! summed, and a tool call cut at the output limit reported as `truncated`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::rc::Rc;

use super::tests::{answer, calls, usage, FakeModel, FakeTools, Fixture};
use super::RunControl;
use crate::journal::{ActionStatus, Event};
use crate::llm::{ChatMessage, ToolCall, Usage};
use crate::protocol::{RunErrorKind, RunStatus};

/// Regression: `delta run` against a server that streams without usage recorded
/// `input_tokens 0, output_tokens 0`. The tokens are estimated from the bytes, and every
/// place that records them says they are estimated.
#[tokio::test]
async fn a_reply_without_usage_is_counted_as_estimated_tokens() {
    let fixture = Fixture::new(false);
    let model = FakeModel::new(vec![Ok(calls(&["first"])), Ok(answer("all done now"))]);
    let result = fixture
        .drive(model, Rc::new(FakeTools::default()), RunControl::new())
        .await;
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    let usage = &result.metrics.usage;
    assert!(
        usage.input_tokens > 0 && usage.output_tokens > 0,
        "{usage:?}"
    );
    assert!(usage.estimated);
    assert!(usage.model_usage["fake"].estimated);
    assert!(result.metrics.cumulative_usage.estimated);
    let meta =
        crate::metadata::read_metadata(&fixture.work_dir.path().join(".delta/looptest")).unwrap();
    assert!(meta.usage.estimated && meta.cumulative_usage.estimated);
    let thoughts: Vec<_> = fixture
        .journal()
        .into_iter()
        .filter_map(|e| match e {
            Event::Thought { usage, .. } => Some(usage.unwrap()),
            _ => None,
        })
        .collect();
    assert_eq!(thoughts.len(), 2);
    assert!(thoughts.iter().all(|u| u.estimated && u.input_tokens > 0));
    // "all done now": 12 bytes, 3 tokens.
    assert_eq!(thoughts[1].output_tokens, 3);
    assert_eq!(
        usage.input_tokens,
        thoughts[0].input_tokens + thoughts[1].input_tokens
    );
}

/// A reply with usage is counted exactly, and says so by saying nothing.
#[tokio::test]
async fn a_reply_with_usage_is_counted_exactly() {
    let fixture = Fixture::new(false);
    let model = FakeModel::with_usage(vec![Ok(answer("hi"))], usage(12, 3), Usage::default());
    let result = fixture
        .drive(model, Rc::new(FakeTools::default()), RunControl::new())
        .await;
    let usage = &result.metrics.usage;
    assert_eq!((usage.input_tokens, usage.output_tokens), (12, 3));
    assert!(!usage.estimated && !result.metrics.cumulative_usage.estimated);
    let text = serde_json::to_string(&result).unwrap();
    assert!(!text.contains("estimated"), "{text}");
}

/// Regression: a usage of u64::MAX was summed (to 18446744073709551614 after two calls).
/// It is the provider's error: a WARNING naming the figures, and the estimate counts.
#[tokio::test]
async fn an_absurd_usage_is_recorded_as_the_providers_error_and_not_summed() {
    let fixture = Fixture::new(false);
    let absurd = Usage {
        cached_prompt_tokens: 0,
        prompt_tokens: u64::MAX,
        completion_tokens: u64::MAX,
        total_tokens: u64::MAX,
    };
    let model = FakeModel::with_usage(
        vec![Ok(calls(&["first"])), Ok(answer("done"))],
        absurd,
        Usage::default(),
    );
    let result = fixture
        .drive(model, Rc::new(FakeTools::default()), RunControl::new())
        .await;
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    let usage = &result.metrics.usage;
    assert!(usage.input_tokens < 1_000_000, "{usage:?}");
    assert!(usage.estimated);
    let warnings: Vec<String> = fixture
        .journal()
        .into_iter()
        .filter_map(|e| match e {
            Event::Warning { message } => Some(message),
            _ => None,
        })
        .collect();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].contains("impossible token usage")
            && warnings[0].contains("18446744073709551615"),
        "{}",
        warnings[0]
    );
}

/// Regression: a tool call cut at `finish_reason: length` was reported to the model as
/// invalid JSON, to "call it again" until max_iterations. It is `truncated`, naming
/// `llm.max_tokens`; the cut call is answered as not run, and nothing runs.
#[tokio::test]
async fn a_tool_call_cut_at_the_output_limit_fails_truncated_naming_max_tokens() {
    let fixture = Fixture::new(false);
    let cut = ChatMessage::assistant(
        None,
        vec![ToolCall::function("c1", "first", r#"{"message": "hel"#)],
    );
    let model = FakeModel::cut(vec![Ok(cut), Ok(answer("never asked"))]);
    let tools = Rc::new(FakeTools::default());
    let result = fixture
        .drive(model.clone(), tools.clone(), RunControl::new())
        .await;
    assert_eq!(result.status, RunStatus::Failed);
    let error = result.error.unwrap();
    assert_eq!(error.kind, RunErrorKind::Truncated);
    assert!(
        error.message.contains("llm.max_tokens") && error.message.contains("`first`"),
        "{}",
        error.message
    );
    assert!(tools.started.borrow().is_empty(), "nothing ran");
    assert_eq!(
        result.metrics.iterations, 1,
        "the model was not asked again"
    );
    let journal = fixture.journal();
    assert!(!journal
        .iter()
        .any(|e| matches!(e, Event::ActionRequest { .. })));
    let answered: Vec<_> = journal
        .iter()
        .filter_map(|e| match e {
            Event::ActionResult {
                action_id, status, ..
            } => Some((action_id.clone(), *status)),
            _ => None,
        })
        .collect();
    assert_eq!(answered, vec![("c1".to_owned(), ActionStatus::Error)]);
}

/// A reply cut right after a complete call is not a cut call: the call runs.
#[tokio::test]
async fn a_complete_call_in_a_cut_reply_runs() {
    let fixture = Fixture::new(false);
    let model = FakeModel::cut(vec![Ok(calls(&["first"])), Ok(answer("done"))]);
    let tools = Rc::new(FakeTools::default());
    let result = fixture.drive(model, tools.clone(), RunControl::new()).await;
    assert_eq!(*tools.started.borrow(), vec!["first"]);
    // The final answer was cut too: that one is `truncated` as before.
    assert_eq!(result.error.unwrap().kind, RunErrorKind::Truncated);
}
