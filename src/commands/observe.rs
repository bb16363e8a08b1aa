//! What `run`, `continue`, `orchestrate` and `exec-planned` share of trace and metric export
//! (docs/observability.md): the standard `OTEL_*` variables read once from the command's
//! environment (after the `.env` cascade), the engine told its events through the library's
//! `Telemetry`, the root span of the work (under an inherited `TRACEPARENT`, else a new
//! trace), `/metrics` for `--metrics-listen`, and at the end the spans still queued sent
//! within [`EXIT_DEADLINE`] and what did not reach the collector reported once on stderr.
//!
//! Must not: slow or fail a run because of its collector (export problems are warnings),
//! print to stdout, or show a collector header's value.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use delta_actors::protocol::TraceSpan;
use delta_actors::request::ObserverHandle;
use delta_actors::telemetry::config::TraceConfig;
use delta_actors::telemetry::endpoint::{MetricsAccess, MetricsEndpoint, MetricsEndpointError};
use delta_actors::telemetry::{inherited_parent, Telemetry};
use delta_actors::SupervisorConfig;

use crate::error::CliError;

/// Longest the process waits at its end for the collector to take the last spans: a
/// collector that is down or hangs costs a finished command at most this much.
pub const EXIT_DEADLINE: Duration = Duration::from_secs(2);

/// The variable holding the token `/metrics` asks for (see docs/observability.md).
pub const METRICS_TOKEN_VAR: &str = "DELTA_METRICS_TOKEN";

/// `--metrics-listen ADDR` and `--metrics-public`.
#[derive(Debug, Clone, Copy)]
pub struct MetricsListen {
    /// Where `/metrics` is served.
    pub addr: SocketAddr,
    /// A non-loopback address is allowed (then `DELTA_METRICS_TOKEN` is required).
    pub public: bool,
}

/// Export for one command; [`Observability::finish`] at its end.
pub struct Observability {
    telemetry: Arc<Telemetry>,
    endpoint: Option<MetricsEndpoint>,
    inherited: Option<TraceSpan>,
}

impl Observability {
    /// What `env` and `metrics` ask for; `None` when nothing is exported.
    pub fn from_env(
        env: &BTreeMap<String, String>,
        metrics: Option<MetricsListen>,
    ) -> Result<Option<Observability>, CliError> {
        let traces = TraceConfig::from_env(env).map_err(|e| CliError::Config(e.to_string()))?;
        let mut telemetry = Telemetry::new();
        if metrics.is_some() {
            telemetry = telemetry.with_metrics();
        }
        if let Some(config) = traces {
            telemetry = telemetry.with_traces(config).map_err(CliError::Runtime)?;
        }
        if !telemetry.is_active() {
            return Ok(None);
        }
        let telemetry = Arc::new(telemetry);
        let endpoint = match metrics {
            Some(listen) => {
                let access = MetricsAccess {
                    allow_remote: listen.public,
                    token: env
                        .get(METRICS_TOKEN_VAR)
                        .filter(|t| !t.is_empty())
                        .cloned(),
                };
                let shown = Arc::clone(&telemetry);
                let endpoint = MetricsEndpoint::start(
                    listen.addr,
                    access,
                    Arc::new(move || shown.render_metrics()),
                )
                .map_err(|e| match e {
                    MetricsEndpointError::NotLoopback { .. } | MetricsEndpointError::WeakToken => {
                        CliError::Usage(format!("--metrics-listen {}: {e}", listen.addr))
                    }
                    other => {
                        CliError::Runtime(format!("--metrics-listen {}: {other}", listen.addr))
                    }
                })?;
                // The address Prometheus scrapes (the real port when 0 was asked for).
                crate::notice!("metrics: http://{}/metrics", endpoint.addr);
                Some(endpoint)
            }
            None => None,
        };
        Ok(Some(Observability {
            telemetry,
            endpoint,
            inherited: inherited_parent(env),
        }))
    }

    /// The engine's settings with this export told every event.
    pub fn attach(&self, config: &mut SupervisorConfig) {
        config.observer = Some(ObserverHandle(self.telemetry.clone()));
        config.capture_message_content = self.telemetry.captures_content();
    }

    /// The root span of the command's work (a plan's, or a lone run's): under the
    /// inherited `TRACEPARENT`, else in a new trace; `None` when spans are not exported.
    pub fn root_span(&self) -> Option<TraceSpan> {
        self.telemetry.new_root(self.inherited.as_ref())
    }

    /// Stops `/metrics`, sends the spans still queued (at most [`EXIT_DEADLINE`]), and says
    /// once on stderr what did not reach the collector.
    pub fn finish(self) {
        if let Some(endpoint) = self.endpoint {
            endpoint.stop();
        }
        let endpoint = self
            .telemetry
            .trace_endpoint()
            .unwrap_or_default()
            .to_string();
        if let Some(report) = self.telemetry.shutdown(EXIT_DEADLINE) {
            if report.lost() > 0 {
                crate::notice!(
                    "warning: {} of {} trace spans did not reach the collector at {endpoint} ({} dropped while it could not keep up, {} in exports that failed: {}); the runs are not affected",
                    report.lost(),
                    report.lost() + report.exported,
                    report.dropped,
                    report.failed,
                    report.last_error.as_deref().unwrap_or("no answer"),
                );
            }
        }
    }
}

/// Builds the export for `env`, attaches it to `config`; the caller gives the root span to
/// its request and calls [`Observability::finish`] at the end.
pub fn observe(
    env: &BTreeMap<String, String>,
    metrics: Option<MetricsListen>,
    config: &mut SupervisorConfig,
) -> Result<Option<Observability>, CliError> {
    let observability = Observability::from_env(env, metrics)?;
    if let Some(observability) = &observability {
        observability.attach(config);
    }
    Ok(observability)
}
