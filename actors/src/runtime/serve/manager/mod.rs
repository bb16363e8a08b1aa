//! `ServeManager`: the one actor that owns the `delta serve` sessions and workers — the
//! in-memory model, `sessions.json`, the `WorkerActor` of each running worker, and the
//! dashboard feed. Every change goes through its mailbox, so a session and its workers are
//! never changed by two requests at once; slow steps (starting a holder, stopping a process
//! group) run in `spawn_blocking` and the result is applied when they finish, with the
//! worker marked busy in between (a second request for it gets 409).
//!
//! On start it re-attaches to every worker whose holder still answers (the program never
//! noticed the server was gone), shows the log of those that exited meanwhile, and revives
//! with the agent's continue args those whose holder is gone, in a new epoch. It also starts
//! the `delta continue` that carries a page's answer to a waiting run ([`answer`]).
//!
//! Must not: block its arbiter; speak HTTP (see [`super::web`]).

pub mod answer;
pub mod events;
pub mod messages;
pub mod process;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use actix::prelude::*;
use tokio::sync::broadcast;

use self::events::DashboardEvent;
use self::process::{holder_log, holder_state, launch, previous_output, terminate, HolderState};
use crate::runtime::serve::worker::messages::{WorkerNotice, WorkerNoticeKind};
use crate::runtime::serve::worker::{StopWorker, WorkerActor, WorkerSource, WorkerSpec};
use crate::serve::agents::{terminal_command, AgentCatalog};
use crate::serve::model::{HolderRef, Session, SessionStatus, Worker, WorkerKind};
use crate::serve::revival::{RevivalBudget, MAX_REVIVALS};
use crate::serve::screen::{SNAPSHOT_LOG_BYTES, TAIL_CAPACITY};
use crate::serve::store::SessionStore;
use crate::serve::ServeError;
use crate::session::pty::{PtySessions, TerminalSize};

/// Events kept for dashboard subscribers that are briefly behind.
const DASHBOARD_BACKLOG: usize = 1024;

/// Everything the manager needs, resolved at the edge.
#[derive(Clone)]
pub struct ManagerConfig {
    /// `sessions.json` in the state folder: where sessions and workers are saved.
    pub store: SessionStore,
    /// The PTY holders' folder and how holders are started (`delta-sessions-pty`).
    pub pty: PtySessions,
    /// The agents a worker can run (`--agents` and the built-in shell).
    pub agents: AgentCatalog,
    /// The `delta` executable, for the `{delta}` placeholder of agent commands.
    pub delta_exe: PathBuf,
    /// Where a new session's relative or `~` folder is taken from.
    pub paths: crate::serve::session_path::PathContext,
}

pub struct ServeManager {
    /// Agents, the session store and holder paths, from `delta serve`'s options. Set in `new`; read only.
    config: ManagerConfig,
    /// The sessions and their workers as last saved to the store; the session and worker
    /// handlers (`messages.rs`) add, remove and update them, and save after each change.
    sessions: Vec<Session>,
    /// The live worker actors by (session id, worker id); inserted at each launch (a restart
    /// replaces and stops the old one), removed when the worker or its session is deleted.
    actors: HashMap<(String, String), Addr<WorkerActor>>,
    /// Workers being started, restarted or deleted; a second such request for one gets 409.
    /// Marked before the work, released (`release`) when it ends.
    busy: HashSet<(String, String)>,
    /// How many automatic revivals each worker has left in its window; spent on each revival.
    revivals: RevivalBudget,
    /// Dashboard updates for the pages' event streams; the manager only sends on it.
    events: broadcast::Sender<DashboardEvent>,
    /// The threads worker actors are spread over. Set in `new`; read only.
    arbiters: Vec<ArbiterHandle>,
    /// Round-robin index into `arbiters`; advanced at each worker launch.
    next_arbiter: usize,
}

/// The PTY size a worker starts with (the page resizes it on attach).
const START_SIZE: TerminalSize = TerminalSize {
    cols: 120,
    rows: 32,
};

/// How a worker gets (re)started.
struct Launch {
    session_id: String,
    worker: Worker,
    argv: Vec<String>,
    location: PathBuf,
    /// Stop this holder first (restart).
    replace: Option<HolderRef>,
    prelude: String,
}

impl ServeManager {
    pub fn new(
        config: ManagerConfig,
        sessions: Vec<Session>,
        arbiters: Vec<ArbiterHandle>,
    ) -> Self {
        let (events, _) = broadcast::channel(DASHBOARD_BACKLOG);
        ServeManager {
            config,
            sessions,
            actors: HashMap::new(),
            busy: HashSet::new(),
            revivals: RevivalBudget::default(),
            events,
            arbiters,
            next_arbiter: 0,
        }
    }

    pub fn events(&self) -> broadcast::Sender<DashboardEvent> {
        self.events.clone()
    }

    fn publish(&self, event: DashboardEvent) {
        let _ = self.events.send(event);
    }

    fn persist(&mut self) {
        for session in &mut self.sessions {
            session.status = if session.workers.iter().any(Worker::is_running) {
                SessionStatus::Active
            } else {
                SessionStatus::Inactive
            };
            session.server_pid = Some(std::process::id());
        }
        if let Err(e) = self.config.store.save(&self.sessions) {
            tracing::error!("cannot save the sessions: {e}");
        }
    }

    fn session(&self, id: &str) -> Result<&Session, ServeError> {
        self.sessions
            .iter()
            .find(|s| s.id == id)
            .ok_or_else(|| ServeError::SessionNotFound(id.to_string()))
    }

    fn worker(&self, session_id: &str, worker_id: &str) -> Result<&Worker, ServeError> {
        self.session(session_id)?
            .worker(worker_id)
            .ok_or_else(|| ServeError::WorkerNotFound {
                session: session_id.to_string(),
                worker: worker_id.to_string(),
            })
    }

    fn worker_mut(&mut self, session_id: &str, worker_id: &str) -> Option<&mut Worker> {
        self.sessions
            .iter_mut()
            .find(|s| s.id == session_id)?
            .worker_mut(worker_id)
    }

    fn claim(&mut self, session_id: &str, worker_id: &str) -> Result<(), ServeError> {
        if !self
            .busy
            .insert((session_id.to_string(), worker_id.to_string()))
        {
            return Err(ServeError::Conflict(format!(
                "worker `{worker_id}` is being started, restarted or deleted; try again"
            )));
        }
        Ok(())
    }

    fn release(&mut self, session_id: &str, worker_id: &str) {
        self.busy
            .remove(&(session_id.to_string(), worker_id.to_string()));
    }

    /// The argv of `worker` in `location`.
    /// The continue args of the worker's agent, as one line (`None`: a terminal, or an agent
    /// without any: nothing to continue).
    fn continue_args(&self, worker: &Worker) -> Option<String> {
        let agent = self.config.agents.get(worker.agent_id()?)?;
        (!agent.continue_args.is_empty()).then(|| agent.continue_args.join(" "))
    }

    fn argv(
        &self,
        worker: &Worker,
        location: &std::path::Path,
        continuing: bool,
    ) -> Result<Vec<String>, ServeError> {
        match &worker.kind {
            WorkerKind::Agent { agent_id } => {
                let agent = self
                    .config
                    .agents
                    .get(agent_id)
                    .ok_or_else(|| ServeError::UnknownAgent(agent_id.clone()))?;
                Ok(agent.argv(&self.config.delta_exe, location, continuing))
            }
            _ => Ok(terminal_command()),
        }
    }

    fn spawn_actor(
        &mut self,
        session_id: &str,
        worker: &Worker,
        source: WorkerSource,
        prelude: String,
        ctx: &mut Context<Self>,
    ) {
        let patterns = worker
            .agent_id()
            .map(|agent| self.config.agents.patterns(agent).to_vec());
        let spec = WorkerSpec {
            session_id: session_id.to_string(),
            worker_id: worker.id.clone(),
            epoch: worker.epoch,
            source,
            size: START_SIZE,
            patterns,
            prelude,
            notices: ctx.address().recipient(),
        };
        let addr = if self.arbiters.is_empty() {
            WorkerActor::new(spec).start()
        } else {
            let arbiter = &self.arbiters[self.next_arbiter % self.arbiters.len()];
            self.next_arbiter += 1;
            WorkerActor::start_in_arbiter(arbiter, move |_| WorkerActor::new(spec))
        };
        if let Some(old) = self
            .actors
            .insert((session_id.to_string(), worker.id.clone()), addr)
        {
            old.do_send(StopWorker { restarted: true });
        }
    }

    /// Starts (or restarts) a worker's program in the background; `done` gets the worker.
    fn launch(
        &mut self,
        plan: Launch,
        ctx: &mut Context<Self>,
    ) -> ResponseActFuture<Self, Result<Worker, ServeError>> {
        let pty = self.config.pty.clone();
        let session_id = plan.session_id.clone();
        let worker_id = plan.worker.id.clone();
        let blocking = {
            let session_id = session_id.clone();
            let worker_id = worker_id.clone();
            tokio::task::spawn_blocking(move || {
                if let Some(old) = &plan.replace {
                    terminate(&pty, Some(old), &session_id, &worker_id);
                }
                launch(
                    &pty,
                    &plan.argv,
                    &plan.location,
                    START_SIZE,
                    &session_id,
                    &worker_id,
                )
                .map(|launched| (launched, plan.prelude))
            })
        };
        let _ = ctx;
        Box::pin(blocking.into_actor(self).map(move |joined, actor, ctx| {
            actor.release(&session_id, &worker_id);
            let (launched, prelude) =
                joined.map_err(|e| ServeError::Worker(format!("the start task failed: {e}")))??;
            let Some(worker) = actor.worker_mut(&session_id, &worker_id) else {
                // Deleted meanwhile: do not leave the program behind.
                let pty = actor.config.pty.clone();
                let holder = launched.holder;
                tokio::task::spawn_blocking(move || {
                    terminate(&pty, Some(&holder), &session_id, &worker_id)
                });
                return Err(ServeError::Conflict(
                    "the worker was deleted while it started".into(),
                ));
            };
            worker.epoch += 1;
            worker.pid = launched.pid;
            worker.holder = Some(launched.holder.clone());
            worker.exit_code = None;
            worker.activity = Default::default();
            let worker = worker.clone();
            let source = WorkerSource::Live {
                socket: launched.holder.socket,
                from: 0,
                at_most: None,
            };
            actor.spawn_actor(&session_id, &worker, source, prelude, ctx);
            actor.persist();
            Ok(worker)
        }))
    }

    /// Re-attaches or revives every worker after a server start.
    fn recover(&mut self, ctx: &mut Context<Self>) {
        let pty = self.config.pty.clone();
        let holders: Vec<(String, String, Option<HolderRef>, Option<i32>)> = self
            .sessions
            .iter()
            .flat_map(|s| {
                s.workers
                    .iter()
                    .map(move |w| (s.id.clone(), w.id.clone(), w.holder.clone(), w.exit_code))
            })
            .collect();
        let probing = tokio::task::spawn_blocking(move || {
            holders
                .into_iter()
                .map(|(session, worker, holder, exit_code)| {
                    let state = match (&holder, exit_code) {
                        (Some(holder), None) => holder_state(&pty, holder),
                        (Some(holder), Some(code)) => HolderState::Exited {
                            exit_code: Some(code),
                            log: holder_log(&pty, holder).unwrap_or_default(),
                        },
                        (None, _) => HolderState::Lost,
                    };
                    (session, worker, state)
                })
                .collect::<Vec<_>>()
        });
        ctx.wait(probing.into_actor(self).map(|probed, actor, ctx| {
            for (session_id, worker_id, state) in probed.unwrap_or_default() {
                actor.recover_worker(&session_id, &worker_id, state, ctx);
            }
            actor.persist();
        }));
    }

    fn recover_worker(
        &mut self,
        session_id: &str,
        worker_id: &str,
        state: HolderState,
        ctx: &mut Context<Self>,
    ) {
        let Ok(worker) = self.worker(session_id, worker_id).cloned() else {
            return;
        };
        match state {
            HolderState::Alive { socket } => {
                let source = WorkerSource::Live {
                    socket,
                    from: 0,
                    at_most: Some(TAIL_CAPACITY as u64),
                };
                self.spawn_actor(session_id, &worker, source, String::new(), ctx);
            }
            HolderState::Exited { exit_code, log } => {
                if let Some(w) = self.worker_mut(session_id, worker_id) {
                    w.exit_code = Some(exit_code.unwrap_or(-1));
                    w.activity = Default::default();
                }
                self.spawn_actor(
                    session_id,
                    &worker,
                    WorkerSource::Finished { log, exit_code },
                    String::new(),
                    ctx,
                );
            }
            HolderState::Lost => self.revive(session_id, worker_id, ctx),
        }
    }

    /// Starts a worker whose holder is gone again, with the agent's continue args.
    fn revive(&mut self, session_id: &str, worker_id: &str, ctx: &mut Context<Self>) {
        let Ok(session) = self.session(session_id) else {
            return;
        };
        let location = session.location_path.clone();
        let Some(worker) = session.worker(worker_id).cloned() else {
            return;
        };
        let Ok(argv) = self.argv(&worker, &location, true) else {
            tracing::warn!(worker = %worker_id, "cannot revive: unknown agent");
            return;
        };
        if !self.revivals.allow(worker_id, std::time::Instant::now()) {
            tracing::warn!(worker = %worker_id, "its holder disappeared {MAX_REVIVALS} times within a minute: not reviving it again");
            if let Some(w) = self.worker_mut(session_id, worker_id) {
                w.exit_code = Some(-1);
            }
            self.persist();
            self.publish(DashboardEvent::WorkerExited {
                session_id: session_id.to_string(),
                worker_id: worker_id.to_string(),
                exit_code: None,
            });
            return;
        }
        if self.claim(session_id, worker_id).is_err() {
            return;
        }
        let log = worker
            .holder
            .as_ref()
            .and_then(|h| holder_log(&self.config.pty, h));
        let mut prelude = previous_output(log.as_deref(), SNAPSHOT_LOG_BYTES as u64);
        let why = match self.continue_args(&worker) {
            Some(args) => format!("its process was gone; revived with its continue args ({args})"),
            None => "its process was gone; started again".to_string(),
        };
        prelude.push_str(&seam(worker.epoch + 1, &why));
        let plan = Launch {
            session_id: session_id.to_string(),
            replace: worker.holder.clone(),
            worker,
            argv,
            location,
            prelude,
        };
        let session_id = session_id.to_string();
        let fut = self
            .launch(plan, ctx)
            .map(move |result, actor, _| match result {
                Ok(worker) => actor.publish(DashboardEvent::WorkerRestarted { session_id, worker }),
                Err(e) => tracing::warn!(worker = %worker_id_of(&e), "cannot revive a worker: {e}"),
            });
        ctx.spawn(fut);
    }
}

fn worker_id_of(error: &ServeError) -> String {
    error.code().to_string()
}

/// The line that marks where one epoch ends and the next begins.
pub fn seam(epoch: u32, why: &str) -> String {
    format!("\r\n\x1b[0m\x1b[7m delta serve: epoch {epoch}: {why} \x1b[0m\r\n")
}

impl Actor for ServeManager {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.recover(ctx);
    }
}

impl Handler<WorkerNotice> for ServeManager {
    type Result = ();

    fn handle(&mut self, notice: WorkerNotice, ctx: &mut Self::Context) {
        let WorkerNotice {
            session_id,
            worker_id,
            epoch,
            kind,
        } = notice;
        let Some(worker) = self.worker_mut(&session_id, &worker_id) else {
            return;
        };
        if worker.epoch != epoch {
            return;
        }
        match kind {
            // An exited program asks nothing: a late judgement of its last screen is dropped.
            WorkerNoticeKind::Activity { .. } if worker.exit_code.is_some() => {}
            WorkerNoticeKind::Activity { state, source } => {
                worker.activity = state;
                self.publish(DashboardEvent::WorkerActivity {
                    session_id,
                    worker_id,
                    state,
                    source,
                });
            }
            WorkerNoticeKind::Exited { exit_code } => {
                worker.exit_code = Some(exit_code.unwrap_or(-1));
                // Regression (issue 27): an exited worker went on reporting `asking`.
                worker.activity = Default::default();
                self.persist();
                self.publish(DashboardEvent::WorkerExited {
                    session_id,
                    worker_id,
                    exit_code,
                });
            }
            WorkerNoticeKind::HolderLost => self.revive(&session_id, &worker_id, ctx),
        }
    }
}
