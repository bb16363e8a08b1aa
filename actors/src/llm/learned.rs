//! What an endpoint taught, per model: how its requests are written now ([`Learned::options`])
//! and the lessons its refusals and streams gave ([`Learned::learn`]), seeded from and kept in
//! the endpoint memory across processes (`memory.rs`), each new lesson announced once
//! ([`Learned::take_news`]).
//!
//! Each detail is learned at most once per endpoint and model, and never back: a second
//! refusal of the same detail is final (a server that refuses both forms is not sent five
//! requests flipping between them). The one exception is a remembered lesson the endpoint now
//! refuses (it was upgraded since): that is learned again, once. The role of system messages
//! only moves forward (`system` → `developer` → `user`). A detail the agent set
//! (`llm.stream`, `llm.tool_call_content`...) is never learned: the agent's setting wins.
//!
//! Must not: read refusals (`refusal.rs`) or write files itself (the memory does).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use super::dialect::{
    is_openai_reasoning_model, Adjustment, Dialect, MaxTokensField, SystemRole, ToolCallContent,
    WireOptions,
};
use super::memory::{memory_url, EndpointMemory, Remembered};

/// Where a lesson came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// Read from the endpoint memory: may be learned again once if the endpoint refuses it.
    Remembered,
    /// Learned by this process: final.
    Learned,
}

/// The lessons about one model on one endpoint.
#[derive(Debug, Default, Clone)]
struct Lessons {
    no_stream: Option<Source>,
    no_stream_usage: Option<Source>,
    tool_call_content: Option<(ToolCallContent, Source)>,
    max_tokens_field: Option<(MaxTokensField, Source)>,
    system_role: Option<(SystemRole, Source)>,
    no_sampling: Option<Source>,
}

impl Lessons {
    fn recalled(entry: &Remembered) -> Lessons {
        let remembered = |known: bool| known.then_some(Source::Remembered);
        Lessons {
            no_stream: remembered(entry.stream == Some(false)),
            no_stream_usage: remembered(entry.stream_options == Some(false)),
            tool_call_content: entry
                .tool_call_content
                .as_deref()
                .and_then(ToolCallContent::parse)
                .map(|form| (form, Source::Remembered)),
            max_tokens_field: entry
                .max_tokens_field
                .as_deref()
                .and_then(MaxTokensField::parse)
                .map(|field| (field, Source::Remembered)),
            system_role: entry
                .system_role
                .as_deref()
                .and_then(SystemRole::parse)
                .map(|role| (role, Source::Remembered)),
            no_sampling: remembered(entry.sampling == Some(false)),
        }
    }

    /// Takes `adjustment` unless it is known, or would undo a lesson this process learned.
    fn take(&mut self, adjustment: Adjustment) -> bool {
        match adjustment {
            Adjustment::NoStream => self.no_stream.replace(Source::Learned).is_none(),
            Adjustment::NoStreamUsage => self.no_stream_usage.replace(Source::Learned).is_none(),
            Adjustment::NoSampling => self.no_sampling.replace(Source::Learned).is_none(),
            Adjustment::ToolCallContent(form) => take_once(&mut self.tool_call_content, form),
            Adjustment::MaxTokensField(field) => take_once(&mut self.max_tokens_field, field),
            Adjustment::SystemRole(role) => {
                let now = self.system_role.map_or(SystemRole::System, |(r, _)| r);
                if role.rank() <= now.rank() {
                    return false;
                }
                self.system_role = Some((role, Source::Learned));
                true
            }
        }
    }
}

/// A two-form detail: learned when unknown, or when only remembered (the endpoint refuses
/// the remembered form now); never when this process already learned it.
fn take_once<T: Copy + PartialEq>(slot: &mut Option<(T, Source)>, value: T) -> bool {
    match *slot {
        Some((_, Source::Learned)) => false,
        Some((known, Source::Remembered)) if known == value => false,
        _ => {
            *slot = Some((value, Source::Learned));
            true
        }
    }
}

/// What made the endpoint teach a lesson.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// It refused a request with this HTTP status, naming the detail.
    Refusal(u16),
    /// Its stream closed before the first chunk (llama-cpp-python cannot stream a tool call
    /// chosen with `tool_choice: auto`).
    EmptyStream,
    /// Its stream carried no token usage.
    NoUsageInStream,
    /// It answered a streamed request in one body.
    OneBody,
}

/// A lesson learned now, for the one line that announces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adaptation {
    /// The endpoint (its base URL without secrets).
    pub endpoint: String,
    /// The model the lesson is about.
    pub model: String,
    /// What changed.
    pub change: Adjustment,
    /// What taught it.
    pub trigger: Trigger,
    /// Where it is remembered for later processes, when it was written there.
    pub remembered_in: Option<String>,
}

impl Adaptation {
    /// One calm line: what the endpoint did, what delta sends from now on, where that is
    /// remembered.
    pub fn announcement(&self) -> String {
        let cause = match self.trigger {
            Trigger::Refusal(status) => format!("{} (HTTP {status})", self.change.refused()),
            Trigger::EmptyStream => "ended its stream before the first chunk".to_owned(),
            Trigger::NoUsageInStream => {
                "sent no token usage in its stream (the tokens of that call are estimated)"
                    .to_owned()
            }
            Trigger::OneBody => "answered a streamed request in one body".to_owned(),
        };
        let kept = match &self.remembered_in {
            Some(path) => format!("; remembered in {path}"),
            None => String::new(),
        };
        format!(
            "{} ({}) {cause}: calls are sent {} from now on{kept}",
            self.endpoint,
            self.model,
            self.change.describe()
        )
    }
}

/// The lessons of one endpoint, per model (shared by every run of the endpoint).
#[derive(Debug)]
pub struct Learned {
    /// The endpoint as it is remembered and announced.
    endpoint: String,
    memory: Option<EndpointMemory>,
    models: Mutex<HashMap<String, Lessons>>,
    news: Mutex<Vec<Adaptation>>,
}

impl Learned {
    /// Nothing learned yet about the endpoint at `base_url`; `memory`, when given, holds
    /// what earlier processes learned and keeps what this one learns.
    pub fn new(base_url: &str, memory: Option<EndpointMemory>) -> Learned {
        Learned {
            endpoint: memory_url(base_url)
                .unwrap_or_else(|| base_url.trim_end_matches('/').to_owned()),
            memory,
            models: Mutex::new(HashMap::new()),
            news: Mutex::new(Vec::new()),
        }
    }

    /// The options for a request to `model` on an endpoint configured with `dialect`:
    /// what the agent set wins, then what was learned (or remembered), then what the model's
    /// name implies.
    pub fn options(&self, dialect: &Dialect, model: &str) -> WireOptions {
        let lessons = self.lessons(model);
        let reasoning = is_openai_reasoning_model(model);
        let stream = dialect.stream.unwrap_or(lessons.no_stream.is_none());
        WireOptions {
            stream,
            stream_usage: stream && lessons.no_stream_usage.is_none(),
            tool_call_content: dialect
                .tool_call_content
                .or(lessons.tool_call_content.map(|(form, _)| form))
                .unwrap_or_default(),
            max_tokens_field: dialect
                .max_tokens_field
                .or(lessons.max_tokens_field.map(|(field, _)| field))
                .unwrap_or(if reasoning {
                    MaxTokensField::MaxCompletionTokens
                } else {
                    MaxTokensField::MaxTokens
                }),
            system_role: dialect
                .system_role
                .or(lessons.system_role.map(|(role, _)| role))
                .unwrap_or_default(),
            sampling: !reasoning && lessons.no_sampling.is_none(),
        }
    }

    /// Records `adjustment` for `model`, taught by `trigger`. Returns `false` when it is not
    /// learned: already known, the agent set that detail in `dialect`, or it would undo a
    /// lesson of this process (the endpoint refused the adjusted form too: sending again
    /// would not help). A lesson learned is written to the memory and queued for
    /// [`Learned::take_news`].
    pub fn learn(
        &self,
        dialect: &Dialect,
        adjustment: Adjustment,
        model: &str,
        trigger: Trigger,
    ) -> bool {
        let set_by_agent = match adjustment {
            Adjustment::NoStream => dialect.stream.is_some(),
            Adjustment::ToolCallContent(_) => dialect.tool_call_content.is_some(),
            Adjustment::MaxTokensField(_) => dialect.max_tokens_field.is_some(),
            Adjustment::SystemRole(_) => dialect.system_role.is_some(),
            Adjustment::NoStreamUsage | Adjustment::NoSampling => false,
        };
        if set_by_agent {
            return false;
        }
        self.lessons(model);
        let taken = {
            let mut models = self.models.lock().unwrap_or_else(PoisonError::into_inner);
            models
                .get_mut(model)
                .is_some_and(|lessons| lessons.take(adjustment))
        };
        if !taken {
            return false;
        }
        let remembered_in = self.remember(model, adjustment);
        self.news
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Adaptation {
                endpoint: self.endpoint.clone(),
                model: model.to_owned(),
                change: adjustment,
                trigger,
                remembered_in,
            });
        true
    }

    /// The lessons learned since the last call, each once.
    pub fn take_news(&self) -> Vec<Adaptation> {
        std::mem::take(&mut *self.news.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// `model`'s lessons, recalled from the memory the first time the model is asked for.
    fn lessons(&self, model: &str) -> Lessons {
        {
            let models = self.models.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(lessons) = models.get(model) {
                return lessons.clone();
            }
        }
        // Read outside the lock (a file read); a racing caller's copy is the same.
        let recalled = self
            .memory
            .as_ref()
            .and_then(|memory| memory.recall(&self.endpoint, model))
            .map(|entry| Lessons::recalled(&entry))
            .unwrap_or_default();
        let mut models = self.models.lock().unwrap_or_else(PoisonError::into_inner);
        models.entry(model.to_owned()).or_insert(recalled).clone()
    }

    /// Writes `adjustment` to the memory; where it went, when it was written.
    fn remember(&self, model: &str, adjustment: Adjustment) -> Option<String> {
        let memory = self.memory.as_ref()?;
        let written = memory.remember(&self.endpoint, model, |entry| match adjustment {
            Adjustment::NoStream => entry.stream = Some(false),
            Adjustment::NoStreamUsage => entry.stream_options = Some(false),
            Adjustment::ToolCallContent(form) => {
                entry.tool_call_content = Some(form.name().to_owned())
            }
            Adjustment::MaxTokensField(field) => {
                entry.max_tokens_field = Some(field.name().to_owned())
            }
            Adjustment::SystemRole(role) => entry.system_role = Some(role.name().to_owned()),
            Adjustment::NoSampling => entry.sampling = Some(false),
        });
        match written {
            Ok(true) => Some(memory.path().display().to_string()),
            Ok(false) => None,
            Err(e) => {
                tracing::warn!(
                    "cannot write the endpoint memory {}: {e} (the lesson is kept for this process only)",
                    memory.path().display()
                );
                None
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const AUTO: Dialect = Dialect {
        stream: None,
        tool_call_content: None,
        max_tokens_field: None,
        system_role: None,
    };

    fn learn(learned: &Learned, adjustment: Adjustment, model: &str) -> bool {
        learned.learn(&AUTO, adjustment, model, Trigger::Refusal(400))
    }

    #[test]
    fn a_reasoning_model_gets_max_completion_tokens_and_no_sampling() {
        let learned = Learned::new("http://h/v1", None);
        let o = learned.options(&AUTO, "o3-mini");
        assert_eq!(o.max_tokens_field, MaxTokensField::MaxCompletionTokens);
        assert!(!o.sampling);
        assert!(o.stream && o.stream_usage, "auto streams");
        let o = learned.options(&AUTO, "gpt-4o");
        assert_eq!(o.max_tokens_field, MaxTokensField::MaxTokens);
        assert!(o.sampling);
    }

    #[test]
    fn what_the_agent_set_wins_and_is_never_learned() {
        let learned = Learned::new("http://h/v1", None);
        assert!(learn(
            &learned,
            Adjustment::ToolCallContent(ToolCallContent::EmptyString),
            "m"
        ));
        assert!(learn(&learned, Adjustment::NoStream, "m"));
        let auto = learned.options(&AUTO, "m");
        assert_eq!(auto.tool_call_content, ToolCallContent::EmptyString);
        assert!(!auto.stream && !auto.stream_usage);
        let set = Dialect {
            stream: Some(true),
            tool_call_content: Some(ToolCallContent::JsonNull),
            ..AUTO
        };
        let o = learned.options(&set, "m");
        assert!(o.stream);
        assert_eq!(o.tool_call_content, ToolCallContent::JsonNull);
        assert!(!learned.learn(&set, Adjustment::NoStream, "other", Trigger::EmptyStream));
        assert!(learned.options(&AUTO, "other").stream);
    }

    /// Regression (Azure's content filter): a refusal of the other form after a lesson made
    /// delta flip `content` between null and "" on every attempt. Each detail is learned
    /// once, and never back.
    #[test]
    fn each_detail_is_learned_once_and_never_flipped_back() {
        let learned = Learned::new("http://h/v1", None);
        let empty = Adjustment::ToolCallContent(ToolCallContent::EmptyString);
        let null = Adjustment::ToolCallContent(ToolCallContent::JsonNull);
        assert!(learn(&learned, empty, "m"));
        assert!(!learn(&learned, null, "m"), "never back");
        assert!(!learn(&learned, empty, "m"), "known");
        let completion = Adjustment::MaxTokensField(MaxTokensField::MaxCompletionTokens);
        assert!(learn(&learned, completion, "m"));
        assert!(!learn(
            &learned,
            Adjustment::MaxTokensField(MaxTokensField::MaxTokens),
            "m"
        ));
        assert!(learn(&learned, Adjustment::NoSampling, "a"));
        assert!(learn(&learned, Adjustment::NoSampling, "b"), "per model");
        assert!(learned.options(&AUTO, "gpt-4o").sampling);
        assert!(!learned.options(&AUTO, "a").sampling);
        // The role moves forward only.
        assert!(learn(
            &learned,
            Adjustment::SystemRole(SystemRole::Developer),
            "m"
        ));
        assert!(learn(
            &learned,
            Adjustment::SystemRole(SystemRole::User),
            "m"
        ));
        assert!(!learn(
            &learned,
            Adjustment::SystemRole(SystemRole::Developer),
            "m"
        ));
        assert_eq!(learned.options(&AUTO, "m").system_role, SystemRole::User);
        assert_eq!(learned.take_news().len(), 6);
        assert!(learned.take_news().is_empty(), "each is announced once");
    }

    /// Lessons are kept across processes: a second `Learned` on the same memory starts
    /// from them, announces nothing, and learns a remembered detail again (once) when the
    /// endpoint now refuses it.
    #[test]
    fn lessons_are_remembered_across_processes_and_revalidated_once() {
        let root = tempfile::tempdir().unwrap();
        let memory = EndpointMemory::new(root.path().join("endpoints.json"));
        let first = Learned::new("http://127.0.0.1:9/v1/", Some(memory.clone()));
        assert!(first.learn(&AUTO, Adjustment::NoStream, "m", Trigger::EmptyStream));
        assert!(first.learn(
            &AUTO,
            Adjustment::ToolCallContent(ToolCallContent::EmptyString),
            "m",
            Trigger::Refusal(500)
        ));
        let news = first.take_news();
        assert_eq!(news.len(), 2);
        let line = news[1].announcement();
        assert!(
            line.starts_with("http://127.0.0.1:9/v1 (m) refused `content: null` on a tool-call turn (HTTP 500): calls are sent with tool-call turns' content as \"\""),
            "{line}"
        );
        assert!(line.contains("remembered in"), "{line}");

        let second = Learned::new("http://127.0.0.1:9/v1", Some(memory.clone()));
        let o = second.options(&AUTO, "m");
        assert!(!o.stream);
        assert_eq!(o.tool_call_content, ToolCallContent::EmptyString);
        assert!(second.options(&AUTO, "another-model").stream, "per model");
        assert!(second.take_news().is_empty(), "nothing new to announce");
        assert!(!second.learn(&AUTO, Adjustment::NoStream, "m", Trigger::EmptyStream));
        // The endpoint was upgraded: it refuses the remembered "" now.
        let null = Adjustment::ToolCallContent(ToolCallContent::JsonNull);
        assert!(second.learn(&AUTO, null, "m", Trigger::Refusal(400)));
        assert!(!second.learn(
            &AUTO,
            Adjustment::ToolCallContent(ToolCallContent::EmptyString),
            "m",
            Trigger::Refusal(400)
        ));
        let third = Learned::new("http://127.0.0.1:9/v1", Some(memory));
        assert_eq!(
            third.options(&AUTO, "m").tool_call_content,
            ToolCallContent::JsonNull,
            "the relearned form is what is remembered now"
        );
    }
}
