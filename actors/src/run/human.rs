//! ask_human bookkeeping (spec §2.5): the pause request file, recording an answer, and
//! keeping sensitive answers out of every log. A sensitive answer lives only in a 0600 file
//! under the run's `secrets/` folder and joins the run's [`Redactor`], so every writer from
//! then on replaces it by its marker; the answer's own journal fields hold the marker
//! whatever the answer's length.
//!
//! Must not: prompt anyone (the CLI's prompter does that) or decide run status.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};

use serde_json::json;

use crate::clock::now_rfc3339;
use crate::journal::{ActionStatus, Event, Journal, JournalError, JournalEvent};
use crate::redact::{marker, secret_id, Redactor, SecretSet, MIN_SECRET_CHARS};
use crate::workspace::RunPaths;

use crate::journal::PendingQuestion;

/// Writes `interaction/request.json` (spec §2.5.3); a prompt that repeats an earlier
/// sensitive answer shows its marker.
pub fn write_request(
    paths: &RunPaths,
    request_id: &str,
    prompt: &str,
    input_type: &str,
    sensitive: bool,
    secrets: &SecretSet,
) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&paths.interaction_dir)?;
    let body = json!({
        "request_id": request_id,
        "timestamp": now_rfc3339(),
        "prompt": secrets.redact(prompt),
        "input_type": input_type,
        "sensitive": sensitive,
        "respond_with": format!("delta continue --run-id <id> -w <workspace> -m \"<answer>\" (or write {})", paths.interaction_dir.join("response.txt").display()),
    });
    let text = serde_json::to_string_pretty(&body).map_err(std::io::Error::other)?;
    crate::workspace::write_private_file(
        &paths.interaction_dir.join("request.json"),
        text.as_bytes(),
    )
}

/// Journals an answer: HUMAN_INPUT_RECEIVED, then the call's ACTION_RESULT (and a WARNING
/// when a sensitive answer is too short to be searched for in later text). A sensitive answer
/// is stored under `secrets/` and added to `secrets` first. The events returned carry the
/// answer itself (what the model is shown); the journal lines carry its marker.
pub fn record_answer(
    journal: &mut Journal,
    paths: &RunPaths,
    question: &PendingQuestion,
    answer: &str,
    secrets: &Redactor,
) -> Result<Vec<JournalEvent>, JournalError> {
    let mut recorded = Vec::with_capacity(3);
    let id = secret_id(&question.action_id);
    let shown = if question.sensitive {
        store_secret(paths, &id, answer).map_err(|e| JournalError::Io {
            path: paths.secrets_dir.clone(),
            source: e,
        })?;
        secrets.add(&id, answer);
        if answer.chars().count() < MIN_SECRET_CHARS {
            recorded.push(journal.append(Event::Warning {
                message: format!(
                    "the sensitive answer to {} has fewer than {MIN_SECRET_CHARS} characters: its own record is redacted, but later text repeating it is not searched for it (too short to tell from ordinary text)",
                    question.action_id
                ),
            })?);
        }
        marker(&id)
    } else {
        answer.to_string()
    };
    let mut received = journal.append(Event::HumanInputReceived {
        iteration: question.iteration,
        action_id: question.action_id.clone(),
        response: shown.clone(),
        redacted: question.sensitive,
    })?;
    let mut result = journal.append(Event::ActionResult {
        iteration: question.iteration,
        action_id: question.action_id.clone(),
        tool_name: "ask_human".into(),
        status: ActionStatus::Success,
        observation_content: shown,
        exit_code: Some(0),
        execution_ref: None,
    })?;
    if let Event::HumanInputReceived { response, .. } = &mut received.event {
        *response = answer.to_string();
    }
    if let Event::ActionResult {
        observation_content,
        ..
    } = &mut result.event
    {
        *observation_content = answer.to_string();
    }
    recorded.push(received);
    recorded.push(result);
    Ok(recorded)
}

fn store_secret(paths: &RunPaths, id: &str, answer: &str) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&paths.secrets_dir)?;
    // The answer goes into the run's own folder or nowhere: not through a `secrets` link
    // or a link in its place (a tool could have put either there).
    if std::fs::symlink_metadata(&paths.secrets_dir)?
        .file_type()
        .is_symlink()
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{} is a symbolic link, not the run's own folder (hint: remove the link)",
                paths.secrets_dir.display()
            ),
        ));
    }
    let mut options = std::fs::OpenOptions::new();
    options.create(true).write(true).truncate(false).mode(0o600);
    // Never through a link (symbolic or hard): the answer must not land in another file.
    crate::private_file::write_own_file(&paths.secrets_dir.join(id), &options, answer.as_bytes())?
        .sync_all()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::journal::JournalOptions;
    use crate::workspace::create_run_dir;

    fn question(sensitive: bool) -> PendingQuestion {
        PendingQuestion {
            iteration: 1,
            action_id: "call_1_0".into(),
            sensitive,
        }
    }

    #[test]
    fn a_sensitive_answer_is_stored_privately_and_journaled_as_its_marker() {
        let work = tempfile::tempdir().unwrap();
        let paths = create_run_dir(work.path(), "r1").unwrap();
        let mut journal = Journal::create(&paths.run_dir, JournalOptions::default()).unwrap();
        let secrets = Redactor::default();
        journal.set_secrets(secrets.clone());
        let events =
            record_answer(&mut journal, &paths, &question(true), "canary-31", &secrets).unwrap();
        assert_eq!(events.len(), 2);
        assert!(
            matches!(&events[1].event, Event::ActionResult { observation_content, .. } if observation_content == "canary-31")
        );
        let text = std::fs::read_to_string(&paths.journal).unwrap();
        assert!(!text.contains("canary-31"), "{text}");
        assert_eq!(text.matches(&marker("call_1_0")).count(), 2, "{text}");
        assert_eq!(
            std::fs::read_to_string(paths.secrets_dir.join("call_1_0")).unwrap(),
            "canary-31"
        );
        assert_eq!(secrets.snapshot().get("call_1_0"), Some("canary-31"));
    }

    #[test]
    fn a_short_sensitive_answer_is_still_a_marker_and_gets_a_warning() {
        let work = tempfile::tempdir().unwrap();
        let paths = create_run_dir(work.path(), "r1").unwrap();
        let mut journal = Journal::create(&paths.run_dir, JournalOptions::default()).unwrap();
        let secrets = Redactor::default();
        let events = record_answer(&mut journal, &paths, &question(true), "42", &secrets).unwrap();
        assert!(
            matches!(&events[0].event, Event::Warning { message } if message.contains("fewer than 4 characters"))
        );
        let text = std::fs::read_to_string(&paths.journal).unwrap();
        assert!(!text.contains("\"42\""), "{text}");
    }

    #[test]
    fn an_ordinary_answer_is_journaled_as_given() {
        let work = tempfile::tempdir().unwrap();
        let paths = create_run_dir(work.path(), "r1").unwrap();
        let mut journal = Journal::create(&paths.run_dir, JournalOptions::default()).unwrap();
        let secrets = Redactor::default();
        record_answer(&mut journal, &paths, &question(false), "blue", &secrets).unwrap();
        let text = std::fs::read_to_string(&paths.journal).unwrap();
        assert_eq!(text.matches("\"blue\"").count(), 2, "{text}");
        assert!(secrets.snapshot().is_empty());
        assert!(!paths.secrets_dir.exists());
    }
}
