//! Criterion micro benchmarks of the engine's hot paths, through the public API of
//! `delta_actors` only: tool template compilation and argv building, journal append (fsync
//! off/on) and replay, journal → chat messages, context build, LLM gate admission, an actor
//! round trip, a whole one-call run, and scripted-model request handling.
//!
//! Settings are short (10–20 samples, ~2 s each) so `cargo bench` finishes in minutes; it
//! never touches the network (the scripted model is in process).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use delta_actors::agent::load_agent;
use delta_actors::context::{
    build_messages, journal_to_messages, CancellationToken, ContextFolders, ContextInputs,
};
use delta_actors::journal::{
    read_journal, ActionStatus, Event, Journal, JournalOptions, ToolCallRecord,
};
use delta_actors::llm::{
    ChatBackend, ChatMessage, ChatRequest, GateConfig, LlmGate, RequestMeta, Script,
    ScriptedBackend, ToolCall,
};
use delta_actors::tool::compile::{compile_tool, EngineVars};
use delta_actors::{LlmTarget, RunRequest, RunStart, Supervisor, SupervisorConfig};

fn short(c: &mut Criterion) -> criterion::BenchmarkGroup<'_, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group("delta");
    group
        .sample_size(15)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    group
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// One iteration's worth of journal events: a thought with one tool call, its request and
/// its result.
fn iteration_events(i: u32) -> [Event; 3] {
    let id = format!("call_{i}_0");
    [
        Event::Thought {
            iteration: i,
            content: Some(format!("step {i}: listing files")),
            tool_calls: vec![ToolCallRecord {
                id: id.clone(),
                name: "list_files".into(),
                arguments: "{\"dir\":\".\"}".into(),
            }],
            llm_invocation_ref: Some(format!("io/invocations/{i}.json")),
            finish_reason: Some("tool_calls".into()),
            usage: None,
            prompt: None,
        },
        Event::ActionRequest {
            iteration: i,
            action_id: id.clone(),
            tool_name: "list_files".into(),
            tool_args: serde_json::json!({"dir": "."}),
            resolved_command: "ls -la .".into(),
        },
        Event::ActionResult {
            iteration: i,
            action_id: id,
            tool_name: "list_files".into(),
            status: ActionStatus::Success,
            observation_content: format!(
                "=== STDOUT ===\nfile_{i}.txt\nREADME.md\n=== EXIT CODE: 0 ==="
            ),
            exit_code: Some(0),
            execution_ref: None,
        },
    ]
}

/// A journal of about `events` events in `run_dir` (start, task, then whole iterations).
fn write_journal(run_dir: &Path, events: usize) {
    let mut journal = Journal::create(run_dir, JournalOptions::default()).unwrap();
    journal
        .append(Event::EngineStart {
            run_id: "bench".into(),
            agent_home: "/agents/bench".into(),
            work_dir: "/work".into(),
            agent_name: "bench".into(),
            task: "benchmark the journal".into(),
        })
        .unwrap();
    journal
        .append(Event::UserMessage {
            content: "benchmark the journal".into(),
        })
        .unwrap();
    let mut written = 2;
    let mut i = 1;
    while written < events {
        for event in iteration_events(i) {
            journal.append(event).unwrap();
        }
        written += 3;
        i += 1;
    }
}

fn tool_templates(c: &mut Criterion) {
    let mut g = short(c);
    let yaml: serde_yaml::Value = serde_yaml::from_str(
        "name: search\nexec: \"grep -n --max-count=${limit} ${pattern} ${AGENT_HOME}/${file}\"\nparameters:\n  - name: limit\n    type: integer\n    default: 10\n  - name: pattern\n  - name: file\n",
    )
    .unwrap();
    let file = Path::new("/agents/bench/agent.yaml");
    g.bench_function("tool/compile_template", |b| {
        b.iter(|| compile_tool(&yaml, 0, file, &mut Vec::new()).unwrap())
    });
    let tool = compile_tool(&yaml, 0, file, &mut Vec::new()).unwrap();
    let vars = EngineVars {
        agent_home: "/agents/bench".into(),
        cwd: "/work".into(),
        run_id: "bench".into(),
    };
    let args = serde_json::json!({"pattern": "TODO", "file": "src/main.rs", "limit": 3});
    let args = args.as_object().unwrap().clone();
    g.bench_function("tool/build_argv", |b| {
        b.iter(|| tool.build_invocation(&args, &vars).unwrap())
    });
    g.finish();
}

fn journal_append_and_replay(c: &mut Criterion) {
    let mut g = short(c);
    for fsync in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut journal = Journal::create(
            dir.path(),
            JournalOptions {
                fsync_every_event: fsync,
            },
        )
        .unwrap();
        let mut i = 0;
        let name = if fsync { "fsync_on" } else { "fsync_off" };
        g.bench_function(BenchmarkId::new("journal/append", name), |b| {
            b.iter(|| {
                i += 1;
                let [_, _, result] = iteration_events(i);
                journal.append(result).unwrap()
            })
        });
    }
    for events in [10, 100, 1_000, 10_000] {
        let dir = tempfile::tempdir().unwrap();
        write_journal(dir.path(), events);
        let path = dir.path().join("journal.jsonl");
        g.bench_function(BenchmarkId::new("journal/replay", events), |b| {
            b.iter(|| read_journal(&path).unwrap())
        });
    }
    g.finish();
}

fn context(c: &mut Criterion) {
    let mut g = short(c);
    let dir = tempfile::tempdir().unwrap();
    write_journal(dir.path(), 200);
    let journal_path = dir.path().join("journal.jsonl");
    let events = read_journal(&journal_path).unwrap();
    let secrets = delta_actors::redact::SecretSet::default();
    g.bench_function("context/journal_to_messages_200_events", |b| {
        b.iter(|| journal_to_messages(&events, None, &secrets))
    });

    let agent_dir = tempfile::tempdir().unwrap();
    let work_dir = tempfile::tempdir().unwrap();
    std::fs::write(
        agent_dir.path().join("agent.yaml"),
        "name: ctx\nllm:\n  model: m\ntools: []\n",
    )
    .unwrap();
    std::fs::write(
        agent_dir.path().join("system_prompt.md"),
        "You are a benchmark agent.\n".repeat(40),
    )
    .unwrap();
    std::fs::write(
        work_dir.path().join("DELTA.md"),
        "# Project notes\n".repeat(100),
    )
    .unwrap();
    std::fs::write(
        agent_dir.path().join("context.yaml"),
        "sources:\n  - type: file\n    id: system_prompt\n    path: '${AGENT_HOME}/system_prompt.md'\n  - type: file\n    id: notes\n    path: '${CWD}/DELTA.md'\n  - type: journal\n    id: conversation_history\n",
    )
    .unwrap();
    let agent = load_agent(agent_dir.path()).unwrap();
    let env = BTreeMap::new();
    let folders = ContextFolders::default();
    let inputs = ContextInputs {
        agent_home: agent_dir.path(),
        work_dir: work_dir.path(),
        run_id: "bench",
        run_dir: dir.path(),
        journal_path: &journal_path,
        child_env: &env,
        folders: &folders,
    };
    let cancel = CancellationToken::new();
    let rt = runtime();
    g.bench_function("context/build_three_sources_200_events", |b| {
        b.iter(|| {
            rt.block_on(build_messages(
                &agent.context,
                &inputs,
                &events,
                &secrets,
                &cancel,
            ))
            .unwrap()
        })
    });
    g.finish();
}

fn conversation(turns: u32) -> ChatRequest {
    let mut messages = vec![
        ChatMessage::system("You are a benchmark agent."),
        ChatMessage::user("do the work"),
    ];
    for i in 0..turns {
        let id = format!("call_{i}_0");
        messages.push(ChatMessage::assistant(
            None,
            vec![ToolCall::function(id.clone(), "work", "{}")],
        ));
        messages.push(ChatMessage::tool(id, "=== EXIT CODE: 0 ==="));
    }
    ChatRequest {
        model: "delta-scripted".into(),
        messages: messages.into(),
        ..ChatRequest::default()
    }
}

fn script() -> Arc<Script> {
    let yaml = "steps:\n".to_string() + &"  - tool: work\n".repeat(5) + "  - answer: done\n";
    Arc::new(Script::from_yaml_str(&yaml, "bench.yaml").unwrap())
}

fn model_side(c: &mut Criterion) {
    let mut g = short(c);
    let script = script();
    let request = conversation(5);
    let meta = RequestMeta::new("bench", "bench-run");
    g.bench_function("scripted/respond_12_messages", |b| {
        b.iter(|| script.respond(&request, &meta))
    });
    let backend: Arc<dyn ChatBackend> = Arc::new(ScriptedBackend::new(Arc::clone(&script)));
    let gate = LlmGate::new(Arc::clone(&backend), GateConfig::default());
    let rt = runtime();
    g.bench_function("llm/gate_admission_round_trip", |b| {
        b.iter(|| {
            rt.block_on(gate.complete(request.clone(), meta.clone(), |_| {}))
                .unwrap()
        })
    });
    g.finish();
}

fn engine(c: &mut Criterion) {
    let mut g = short(c);
    let agent_dir = tempfile::tempdir().unwrap();
    std::fs::write(
        agent_dir.path().join("agent.yaml"),
        "name: bench\nllm:\n  model: scripted\ntools:\n  - name: work\n    exec: \"true\"\n",
    )
    .unwrap();
    std::fs::write(
        agent_dir.path().join("system_prompt.md"),
        "You are a benchmark agent.\n",
    )
    .unwrap();
    std::fs::write(
        agent_dir.path().join("context.yaml"),
        "sources:\n  - type: file\n    id: system_prompt\n    path: '${AGENT_HOME}/system_prompt.md'\n  - type: journal\n    id: conversation_history\n",
    )
    .unwrap();
    let agent = Arc::new(load_agent(agent_dir.path()).unwrap());
    let answer_at_once =
        Arc::new(Script::from_yaml_str("steps:\n  - answer: done\n", "bench.yaml").unwrap());
    let work = tempfile::tempdir().unwrap();
    let supervisor = Supervisor::start(SupervisorConfig {
        journal_fsync: false,
        ..SupervisorConfig::default()
    })
    .unwrap();
    let rt = runtime();
    let request = |run_id: String| {
        let start = RunStart::New {
            task: "bench".into(),
        };
        let llm = LlmTarget::Scripted(Arc::clone(&answer_at_once));
        RunRequest::new(Arc::clone(&agent), work.path(), start, llm).with_run_id(run_id)
    };
    // A submission the supervisor actor refuses (invalid run id): one mailbox send and reply,
    // no run started.
    g.bench_function("actor/supervisor_round_trip", |b| {
        b.iter(|| {
            let refused = rt.block_on(supervisor.submit(request("not a valid id!".into())));
            assert!(refused.is_err());
        })
    });
    let counter = AtomicU64::new(0);
    g.bench_function("engine/one_call_run", |b| {
        b.iter(|| {
            let id = format!("r{}", counter.fetch_add(1, Ordering::Relaxed));
            let result = rt
                .block_on(async { supervisor.submit(request(id)).await.unwrap().wait().await })
                .unwrap();
            assert_eq!(result.metrics.iterations, 1);
        })
    });
    g.finish();
    supervisor.shutdown();
}

/// A run's journal after `iterations` iterations of one call each, whose results are 1.8 KB
/// pages (the issue-32 workload): start, task, then THOUGHT, ACTION_REQUEST, ACTION_RESULT.
fn page_journal(iterations: u32) -> Vec<delta_actors::journal::JournalEvent> {
    let mut events = vec![Event::UserMessage {
        content: "Read the book and summarize it.".into(),
    }];
    for i in 1..=iterations {
        let [thought, request, _] = iteration_events(i);
        events.push(thought);
        events.push(request);
        events.push(Event::ActionResult {
            iteration: i,
            action_id: format!("call_{i}_0"),
            tool_name: "list_files".into(),
            status: ActionStatus::Success,
            observation_content: format!("Page {i} of the book\n{}", "text ".repeat(360)),
            exit_code: Some(0),
            execution_ref: Some(format!("io/tool_executions/{i}_read_page.json")),
        });
    }
    events
        .into_iter()
        .enumerate()
        .map(|(i, event)| delta_actors::journal::JournalEvent {
            seq: i as u64 + 1,
            timestamp: String::new(),
            event,
        })
        .collect()
}

/// Issue 32: the cost of building the next request after `N` iterations, through a run's
/// builder (only the new iteration is converted and measured; the budget decides nothing
/// here) against converting the whole journal again (what every request cost before).
fn context_per_iteration(c: &mut Criterion) {
    use delta_actors::context::budget::Calibration;
    use delta_actors::context::{Budgeting, ContextBuilder, SourceParts};
    let mut g = short(c);
    let secrets = delta_actors::redact::SecretSet::default();
    let settings = delta_actors::agent::Compaction::default();
    let parts = SourceParts {
        messages: vec![ChatMessage {
            role: delta_actors::llm::Role::System,
            content: Some("# Context Block: system_prompt\n\nYou read books.".into()),
            tool_calls: None,
            tool_call_id: None,
        }],
        journal_at: Some(1),
        ..SourceParts::default()
    };
    for iterations in [10u32, 100, 500] {
        let events = page_journal(iterations);
        let calibration = Some(Calibration {
            bytes: 4_000,
            tokens: 1_000,
            growth: None,
        });
        let budgeting = Budgeting {
            budget: 100_000_000,
            settings: &settings,
            refusals: 0,
        };
        g.bench_with_input(
            BenchmarkId::new("context/next_request_builder", iterations),
            &events,
            |b, events| {
                b.iter_batched(
                    || {
                        let mut builder = ContextBuilder::new(300);
                        let before = &events[..events.len() - 3];
                        builder.build(&parts, before, &secrets, calibration, Some(budgeting));
                        builder
                    },
                    // The builder is returned with the request so that dropping its cached
                    // view (the whole conversation) is not timed as building.
                    |mut builder| {
                        let built =
                            builder.build(&parts, events, &secrets, calibration, Some(budgeting));
                        (builder, built)
                    },
                    criterion::BatchSize::LargeInput,
                )
            },
        );
        g.bench_with_input(
            BenchmarkId::new("context/next_request_whole_journal", iterations),
            &events,
            |b, events| b.iter(|| journal_to_messages(events, None, &secrets)),
        );
    }
    g.finish();
}

criterion_group!(
    benches,
    tool_templates,
    journal_append_and_replay,
    context,
    context_per_iteration,
    model_side,
    engine
);
criterion_main!(benches);
