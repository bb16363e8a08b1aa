//! ask_human inside the run loop (spec §2.5): asking on the terminal through the request's
//! prompter (the answer is journaled as HUMAN_INPUT_RECEIVED + the call's result), or, without
//! a prompter, pausing the run WAITING_FOR_INPUT once the reply's other calls have run.
//!
//! Must not: prompt directly (the prompter does) or write answers in clear when sensitive
//! (`human.rs` keeps them out of every log).

use std::sync::Arc;

use actix::prelude::*;

use crate::api::InteractionInfo;
use crate::journal::Event;
use crate::protocol::RunStatus;

use super::calls::Slot;
use super::human::{record_answer, write_request};
use super::setup::PendingQuestion;
use super::{error_info, RunActor};

impl RunActor {
    pub(super) fn start_question(
        &mut self,
        i: usize,
        prompt: String,
        input_type: String,
        sensitive: bool,
        ctx: &mut Context<Self>,
    ) {
        let Some(acting) = self.acting.as_mut() else {
            return;
        };
        let question = PendingQuestion {
            iteration: acting.iteration,
            action_id: acting.calls[i].action_id.clone(),
            sensitive,
        };
        let info = InteractionInfo {
            prompt: prompt.clone(),
            input_type: input_type.clone(),
            sensitive,
        };
        let Some(prompter) = self.request.prompter.clone() else {
            acting.slots[i] = Slot::Deferred;
            acting.pause = Some((question, info));
            return;
        };
        acting.slots[i] = Slot::InFlight;
        acting.in_flight += 1;
        let request = Event::HumanInputRequest {
            iteration: question.iteration,
            action_id: question.action_id.clone(),
            prompt: prompt.clone(),
            input_type: input_type.clone(),
            sensitive,
        };
        if !self.append(request, ctx) {
            return;
        }
        let ask =
            tokio::task::spawn_blocking(move || prompter.ask(&prompt, &input_type, sensitive));
        ask.into_actor(self)
            .map(move |answer, act, ctx| {
                let answer = answer.unwrap_or_else(|e| Err(format!("the prompt failed: {e}")));
                act.on_answer(i, question, answer, ctx);
            })
            .spawn(ctx);
    }

    fn on_answer(
        &mut self,
        i: usize,
        question: PendingQuestion,
        answer: Result<String, String>,
        ctx: &mut Context<Self>,
    ) {
        if self.finished {
            return;
        }
        let answer = match answer {
            Ok(a) => a,
            Err(message) => {
                self.finish(
                    RunStatus::Failed,
                    None,
                    Some(error_info(
                        "human_input_error",
                        format!("no answer to ask_human: {message}"),
                    )),
                    None,
                    ctx,
                );
                return;
            }
        };
        let Some(journal) = self.journal.as_mut() else {
            return;
        };
        match record_answer(journal, &self.paths, &question, &answer, &self.secrets) {
            Ok(events) => Arc::make_mut(&mut self.events).extend(events),
            Err(e) => {
                self.finish(
                    RunStatus::Failed,
                    None,
                    Some(error_info(
                        "journal_error",
                        format!("cannot write the journal: {e}"),
                    )),
                    None,
                    ctx,
                );
                return;
            }
        }
        if let Some(acting) = self.acting.as_mut() {
            // The answer's ACTION_RESULT is already journaled by record_answer.
            acting.slots[i] = Slot::Recorded;
            acting.in_flight -= 1;
        }
        self.pump(ctx);
    }

    pub(super) fn pause_for_human(
        &mut self,
        question: PendingQuestion,
        info: InteractionInfo,
        ctx: &mut Context<Self>,
    ) {
        let request_id = uuid::Uuid::new_v4().to_string();
        if let Err(e) = write_request(
            &self.paths,
            &request_id,
            &info.prompt,
            &info.input_type,
            info.sensitive,
            &self.secrets.snapshot(),
        ) {
            self.finish(
                RunStatus::Failed,
                None,
                Some(error_info(
                    "setup_error",
                    format!("cannot write interaction/request.json: {e}"),
                )),
                None,
                ctx,
            );
            return;
        }
        let event = Event::HumanInputRequest {
            iteration: question.iteration,
            action_id: question.action_id,
            prompt: info.prompt.clone(),
            input_type: info.input_type.clone(),
            sensitive: info.sensitive,
        };
        if !self.append(event, ctx) {
            return;
        }
        self.finish(RunStatus::WaitingForInput, None, None, Some(info), ctx);
    }
}
