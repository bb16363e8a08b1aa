//! The requests the web layer sends to the [`ServeManager`], one message type each, with
//! their handlers. Validation of ids and paths happens here, before anything touches disk.

use actix::prelude::*;

use super::events::{DashboardEvent, DashboardSync};
use super::process::terminate;
use super::{seam, Launch, ServeManager};
use crate::clock::now_rfc3339;
use crate::runtime::serve::worker::{History, StopWorker, WorkerActor};
use crate::serve::model::{
    check_id, new_id, CreateSessionRequest, CreateWorkerRequest, Session, SessionStatus, Worker,
    WorkerKind, MAX_NAME_LEN, MAX_SESSIONS, MAX_WORKERS_PER_SESSION,
};
use crate::serve::ServeError;

type Reply<T> = ResponseActFuture<ServeManager, Result<T, ServeError>>;

fn ready<T: 'static>(value: Result<T, ServeError>) -> Reply<T> {
    Box::pin(actix::fut::ready(value))
}

#[derive(Message)]
#[rtype(result = "Vec<Session>")]
pub struct ListSessions;

impl Handler<ListSessions> for ServeManager {
    type Result = MessageResult<ListSessions>;
    fn handle(&mut self, _: ListSessions, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.sessions.clone())
    }
}

/// The dashboard's first frame and a receiver for what follows.
#[derive(Message)]
#[rtype(result = "(DashboardSync, tokio::sync::broadcast::Receiver<DashboardEvent>)")]
pub struct SubscribeDashboard;

impl Handler<SubscribeDashboard> for ServeManager {
    type Result = MessageResult<SubscribeDashboard>;
    fn handle(&mut self, _: SubscribeDashboard, _: &mut Self::Context) -> Self::Result {
        MessageResult((
            DashboardSync::new(self.sessions.clone(), Vec::new()),
            self.events.subscribe(),
        ))
    }
}

/// Publishes an event that does not come from the manager itself (the runs poller).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Publish(pub DashboardEvent);

impl Handler<Publish> for ServeManager {
    type Result = ();
    fn handle(&mut self, Publish(event): Publish, _: &mut Self::Context) {
        self.publish(event);
    }
}

#[derive(Message)]
#[rtype(result = "Result<Session, ServeError>")]
pub struct GetSession(pub String);

impl Handler<GetSession> for ServeManager {
    type Result = Result<Session, ServeError>;
    fn handle(&mut self, GetSession(id): GetSession, _: &mut Self::Context) -> Self::Result {
        check_id("session id", &id)?;
        self.session(&id).cloned()
    }
}

#[derive(Message)]
#[rtype(result = "Result<Session, ServeError>")]
pub struct CreateSession(pub CreateSessionRequest);

impl Handler<CreateSession> for ServeManager {
    type Result = Reply<Session>;
    fn handle(
        &mut self,
        CreateSession(request): CreateSession,
        ctx: &mut Self::Context,
    ) -> Self::Result {
        if self.sessions.len() >= MAX_SESSIONS {
            return ready(Err(ServeError::Conflict(format!(
                "this server already has {MAX_SESSIONS} sessions; delete some first"
            ))));
        }
        let location = match self.config.paths.resolve(&request.location_path) {
            Ok(location) => location,
            Err(e) => return ready(Err(e)),
        };
        if !location.is_dir() {
            return ready(Err(ServeError::NoSuchFolder(location)));
        }
        let location = std::fs::canonicalize(&location).unwrap_or(location);
        if let Some(other) = self.sessions.iter().find(|s| s.location_path == location) {
            if !request.allow_duplicate {
                return ready(Err(ServeError::DuplicateFolder {
                    path: location,
                    session: other.id.clone(),
                }));
            }
        }
        if let Err(e) = request.kind.check() {
            return ready(Err(e));
        }
        if let Some(agent) = &request.agent_id {
            if self.config.agents.get(agent).is_none() {
                return ready(Err(ServeError::UnknownAgent(agent.clone())));
            }
        }
        let session = Session {
            id: new_id("s"),
            kind: request.kind.clone(),
            location_path: location,
            status: SessionStatus::Inactive,
            created_at: now_rfc3339(),
            server_pid: Some(std::process::id()),
            workers: Vec::new(),
        };
        let session_id = session.id.clone();
        self.sessions.push(session.clone());
        self.persist();
        self.publish(DashboardEvent::SessionCreated {
            session: session.clone(),
        });
        let Some(agent_id) = request.agent_id else {
            return ready(Ok(session));
        };
        let create = CreateWorkerRequest {
            kind: WorkerKind::Agent { agent_id },
            name: None,
            continue_conversation: request.continue_conversation,
        };
        let started = self.create_worker(&session_id, create, ctx);
        Box::pin(started.map(move |result, actor, _| {
            result?;
            actor.session(&session_id).cloned()
        }))
    }
}

#[derive(Message)]
#[rtype(result = "Result<(), ServeError>")]
pub struct DeleteSession(pub String);

impl Handler<DeleteSession> for ServeManager {
    type Result = Reply<()>;
    fn handle(&mut self, DeleteSession(id): DeleteSession, _: &mut Self::Context) -> Self::Result {
        if let Err(e) = check_id("session id", &id).and_then(|()| self.session(&id).map(|_| ())) {
            return ready(Err(e));
        }
        let Some(index) = self.sessions.iter().position(|s| s.id == id) else {
            return ready(Err(ServeError::SessionNotFound(id)));
        };
        let session = self.sessions.remove(index);
        self.persist();
        let stops = self.stop_workers(
            &session.id,
            session
                .workers
                .iter()
                .map(|w| (w.id.clone(), w.holder.clone()))
                .collect(),
        );
        self.publish(DashboardEvent::SessionDeleted {
            session_id: session.id,
        });
        Box::pin(stops.into_actor(self).map(|_, _, _| Ok(())))
    }
}

/// Restarts a session's agent workers (with their continue args when asked).
#[derive(Message)]
#[rtype(result = "Result<Session, ServeError>")]
pub struct RestartSession {
    pub session_id: String,
    pub continue_conversation: bool,
}

impl Handler<RestartSession> for ServeManager {
    type Result = Reply<Session>;
    fn handle(&mut self, message: RestartSession, ctx: &mut Self::Context) -> Self::Result {
        let session = match check_id("session id", &message.session_id)
            .and_then(|()| self.session(&message.session_id))
        {
            Ok(session) => session.clone(),
            Err(e) => return ready(Err(e)),
        };
        let me = ctx.address();
        let restarts: Vec<_> = session
            .workers
            .iter()
            .filter(|w| w.agent_id().is_some())
            .map(|w| RestartWorker {
                session_id: session.id.clone(),
                worker_id: w.id.clone(),
                // Only agents with continue args have a conversation to continue.
                continue_conversation: message.continue_conversation
                    && self.continue_args(w).is_some(),
            })
            .collect();
        let session_id = session.id.clone();
        let restarting = async move {
            for restart in restarts {
                me.send(restart)
                    .await
                    .map_err(|e| ServeError::Worker(e.to_string()))??;
            }
            Ok::<(), ServeError>(())
        };
        Box::pin(restarting.into_actor(self).map(move |result, actor, _| {
            result?;
            actor.session(&session_id).cloned()
        }))
    }
}

#[derive(Message)]
#[rtype(result = "Result<Vec<Worker>, ServeError>")]
pub struct ListWorkers(pub String);

impl Handler<ListWorkers> for ServeManager {
    type Result = Result<Vec<Worker>, ServeError>;
    fn handle(&mut self, ListWorkers(id): ListWorkers, _: &mut Self::Context) -> Self::Result {
        check_id("session id", &id)?;
        Ok(self.session(&id)?.workers.clone())
    }
}

#[derive(Message)]
#[rtype(result = "Result<Worker, ServeError>")]
pub struct CreateWorker {
    pub session_id: String,
    pub request: CreateWorkerRequest,
}

impl Handler<CreateWorker> for ServeManager {
    type Result = Reply<Worker>;
    fn handle(&mut self, message: CreateWorker, ctx: &mut Self::Context) -> Self::Result {
        self.create_worker(&message.session_id, message.request, ctx)
    }
}

#[derive(Message)]
#[rtype(result = "Result<(), ServeError>")]
pub struct DeleteWorker {
    pub session_id: String,
    pub worker_id: String,
}

impl Handler<DeleteWorker> for ServeManager {
    type Result = Reply<()>;
    fn handle(&mut self, message: DeleteWorker, _: &mut Self::Context) -> Self::Result {
        let DeleteWorker {
            session_id,
            worker_id,
        } = message;
        let checked = check_id("session id", &session_id)
            .and_then(|()| check_id("worker id", &worker_id))
            .and_then(|()| self.worker(&session_id, &worker_id).map(|_| ()))
            .and_then(|()| self.claim(&session_id, &worker_id));
        if let Err(e) = checked {
            return ready(Err(e));
        }
        let Some(session) = self.sessions.iter_mut().find(|s| s.id == session_id) else {
            return ready(Err(ServeError::SessionNotFound(session_id)));
        };
        let Some(index) = session.workers.iter().position(|w| w.id == worker_id) else {
            return ready(Err(ServeError::WorkerNotFound {
                session: session_id,
                worker: worker_id,
            }));
        };
        let worker = session.workers.remove(index);
        self.persist();
        let stops = self.stop_workers(
            &session_id,
            vec![(worker.id.clone(), worker.holder.clone())],
        );
        self.publish(DashboardEvent::WorkerDeleted {
            session_id: session_id.clone(),
            worker_id: worker_id.clone(),
        });
        Box::pin(stops.into_actor(self).map(move |_, actor, _| {
            actor.release(&session_id, &worker_id);
            Ok(())
        }))
    }
}

#[derive(Message)]
#[rtype(result = "Result<Worker, ServeError>")]
pub struct RestartWorker {
    pub session_id: String,
    pub worker_id: String,
    pub continue_conversation: bool,
}

impl Handler<RestartWorker> for ServeManager {
    type Result = Reply<Worker>;
    fn handle(&mut self, message: RestartWorker, ctx: &mut Self::Context) -> Self::Result {
        self.restart_worker(
            &message.session_id,
            &message.worker_id,
            message.continue_conversation,
            ctx,
        )
    }
}

/// The actor of a running (or finished) worker, for a WebSocket or an input.
#[derive(Message)]
#[rtype(result = "Result<Addr<WorkerActor>, ServeError>")]
pub struct FindWorker {
    pub session_id: String,
    pub worker_id: String,
}

impl Handler<FindWorker> for ServeManager {
    type Result = Result<Addr<WorkerActor>, ServeError>;
    fn handle(&mut self, message: FindWorker, _: &mut Self::Context) -> Self::Result {
        check_id("session id", &message.session_id)?;
        check_id("worker id", &message.worker_id)?;
        self.worker(&message.session_id, &message.worker_id)?;
        self.actors
            .get(&(message.session_id, message.worker_id))
            .cloned()
            .ok_or_else(|| ServeError::Conflict("the worker is starting; try again".into()))
    }
}

impl ServeManager {
    fn create_worker(
        &mut self,
        session_id: &str,
        request: CreateWorkerRequest,
        ctx: &mut Context<Self>,
    ) -> Reply<Worker> {
        let session =
            match check_id("session id", session_id).and_then(|()| self.session(session_id)) {
                Ok(session) => session,
                Err(e) => return ready(Err(e)),
            };
        let location = session.location_path.clone();
        let count = session.workers.len();
        if count >= MAX_WORKERS_PER_SESSION {
            return ready(Err(ServeError::Conflict(format!(
                "session `{session_id}` already has {MAX_WORKERS_PER_SESSION} workers; delete some first"
            ))));
        }
        let name = match request.name {
            Some(name) if name.chars().count() > MAX_NAME_LEN => {
                return ready(Err(ServeError::BadRequest(format!(
                    "name is longer than {MAX_NAME_LEN} characters"
                ))))
            }
            Some(name) if !name.trim().is_empty() => name,
            _ => match &request.kind {
                WorkerKind::Agent { agent_id } => self
                    .config
                    .agents
                    .get(agent_id)
                    .map(|a| a.name.clone())
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| agent_id.clone()),
                _ => format!("Terminal {}", count + 1),
            },
        };
        let worker = Worker::new(new_id("w"), name, request.kind);
        let argv = match self.argv(&worker, &location, request.continue_conversation) {
            Ok(argv) => argv,
            Err(e) => return ready(Err(e)),
        };
        if let Err(e) = self.claim(session_id, &worker.id) {
            return ready(Err(e));
        }
        if let Some(session) = self.sessions.iter_mut().find(|s| s.id == session_id) {
            session.workers.push(worker.clone());
        }
        let plan = Launch {
            session_id: session_id.to_string(),
            worker: worker.clone(),
            argv,
            location,
            replace: None,
            prelude: String::new(),
        };
        let session_id = session_id.to_string();
        Box::pin(
            self.launch(plan, ctx)
                .map(move |result, actor, _| match result {
                    Ok(worker) => {
                        actor.publish(DashboardEvent::WorkerCreated {
                            session_id,
                            worker: worker.clone(),
                        });
                        Ok(worker)
                    }
                    Err(e) => {
                        if let Some(session) =
                            actor.sessions.iter_mut().find(|s| s.id == session_id)
                        {
                            session.workers.retain(|w| w.id != worker.id);
                        }
                        actor.persist();
                        Err(e)
                    }
                }),
        )
    }

    fn restart_worker(
        &mut self,
        session_id: &str,
        worker_id: &str,
        continuing: bool,
        _: &mut Context<Self>,
    ) -> Reply<Worker> {
        let found = check_id("session id", session_id)
            .and_then(|()| check_id("worker id", worker_id))
            .and_then(|()| self.session(session_id).cloned())
            .and_then(|session| {
                let worker = self.worker(session_id, worker_id)?.clone();
                Ok((session.location_path, worker))
            });
        let (location, worker) = match found {
            Ok(found) => found,
            Err(e) => return ready(Err(e)),
        };
        let continue_args = self.continue_args(&worker);
        if continuing && continue_args.is_none() {
            return ready(Err(ServeError::NoContinueArgs {
                worker: worker.id.clone(),
                what: worker
                    .agent_id()
                    .map_or("a terminal".to_string(), |a| format!("agent `{a}`")),
            }));
        }
        let argv = match self.argv(&worker, &location, continuing) {
            Ok(argv) => argv,
            Err(e) => return ready(Err(e)),
        };
        if let Err(e) = self.claim(session_id, worker_id) {
            return ready(Err(e));
        }
        let old = self
            .actors
            .remove(&(session_id.to_string(), worker_id.to_string()));
        let why = match (continuing, continue_args) {
            (true, Some(args)) => format!("restarted with its continue args ({args})"),
            _ => "restarted".to_string(),
        };
        let seam_text = seam(worker.epoch + 1, &why);
        let history = async move {
            let mut prelude = match &old {
                Some(addr) => addr.send(History).await.unwrap_or_default(),
                None => String::new(),
            };
            if let Some(addr) = old {
                addr.do_send(StopWorker { restarted: true });
            }
            prelude.push_str(&seam_text);
            prelude
        };
        let session_id = session_id.to_string();
        let plan_worker = worker.clone();
        Box::pin(history.into_actor(self).then(move |prelude, actor, ctx| {
            let plan = Launch {
                session_id: session_id.clone(),
                replace: plan_worker.holder.clone(),
                worker: plan_worker,
                argv,
                location,
                prelude,
            };
            actor.launch(plan, ctx).map(move |result, actor, _| {
                if let Ok(worker) = &result {
                    actor.publish(DashboardEvent::WorkerRestarted {
                        session_id,
                        worker: worker.clone(),
                    });
                }
                result
            })
        }))
    }

    /// Stops the actors (close code 1000) and, in the background, the programs.
    fn stop_workers(
        &mut self,
        session_id: &str,
        workers: Vec<(String, Option<crate::serve::model::HolderRef>)>,
    ) -> impl std::future::Future<Output = ()> {
        for (worker_id, _) in &workers {
            if let Some(addr) = self
                .actors
                .remove(&(session_id.to_string(), worker_id.clone()))
            {
                addr.do_send(StopWorker { restarted: false });
            }
        }
        let pty = self.config.pty.clone();
        let session_id = session_id.to_string();
        async move {
            let _ = tokio::task::spawn_blocking(move || {
                for (worker_id, holder) in workers {
                    terminate(&pty, holder.as_ref(), &session_id, &worker_id);
                }
            })
            .await;
        }
    }
}
