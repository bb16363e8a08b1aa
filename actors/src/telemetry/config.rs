//! [`TraceConfig`]: OpenTelemetry's standard variables, resolved once from the environment
//! map the binary read at its edge: whether traces are exported and where
//! (`OTEL_SDK_DISABLED`, `OTEL_TRACES_EXPORTER`, `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`,
//! `_HEADERS`, `_PROTOCOL`, `_TIMEOUT`), as which service (`OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`), which traces (`OTEL_TRACES_SAMPLER[_ARG]`), the export queue
//! (`OTEL_BSP_*`), and whether message content goes with them
//! (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`).
//!
//! Must not: read the process environment (it is handed the map), or print a header's value
//! (collector headers carry API keys: `Debug` names them only).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::protocol::TraceSpan;

/// Where and how traces are exported.
#[derive(Clone, PartialEq)]
pub struct TraceConfig {
    /// The URL spans are POSTed to (`.../v1/traces`).
    pub endpoint: String,
    /// Sent with each export (`OTEL_EXPORTER_OTLP_HEADERS`: API keys of hosted collectors).
    pub headers: Vec<(String, String)>,
    /// `service.name` of every span's resource (default `delta`).
    pub service_name: String,
    /// Further resource attributes (`OTEL_RESOURCE_ATTRIBUTES`).
    pub resource_attributes: Vec<(String, String)>,
    /// Which new traces are recorded.
    pub sampler: Sampler,
    /// Export the messages of model calls and tool arguments and results.
    pub capture_content: bool,
    /// Limit on each export request (default 10 s).
    pub timeout: Duration,
    /// Spans waiting for export at most; more are dropped and counted (default 2048).
    pub max_queue: usize,
    /// Spans per export request at most (default 512).
    pub max_batch: usize,
    /// Longest a finished span waits before it is sent (default 5 s).
    pub schedule_delay: Duration,
}

impl std::fmt::Debug for TraceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let header_names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("TraceConfig")
            .field("endpoint", &self.endpoint)
            .field("headers", &header_names)
            .field("service_name", &self.service_name)
            .field("sampler", &self.sampler)
            .field("capture_content", &self.capture_content)
            .finish_non_exhaustive()
    }
}

/// `OTEL_TRACES_SAMPLER`: which traces a new root records (children follow their parent).
#[derive(Debug, Clone, PartialEq)]
pub enum Sampler {
    /// Every trace.
    AlwaysOn,
    /// None.
    AlwaysOff,
    /// A fraction of traces, chosen by trace id (the same choice in every process).
    TraceIdRatio(f64),
    /// As the remote parent (`TRACEPARENT`) decided, else as the inner sampler.
    ParentBased(Box<Sampler>),
}

impl Sampler {
    /// Whether a new span of trace `trace_id` under `parent` (if any) is recorded.
    pub fn samples(&self, parent: Option<&TraceSpan>, trace_id: &[u8; 16]) -> bool {
        match self {
            Sampler::AlwaysOn => true,
            Sampler::AlwaysOff => false,
            Sampler::TraceIdRatio(ratio) => {
                // As OpenTelemetry's SDKs: the trace id's low 63 bits under ratio × 2^63.
                let mut low = [0u8; 8];
                low.copy_from_slice(&trace_id[8..]);
                let bound = (ratio.clamp(0.0, 1.0) * (1u64 << 63) as f64) as u64;
                (u64::from_be_bytes(low) >> 1) < bound
            }
            Sampler::ParentBased(root) => match parent {
                Some(parent) => parent.sampled,
                None => root.samples(None, trace_id),
            },
        }
    }
}

/// A variable that does not say something usable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{variable}={value:?}: {problem} (hint: {hint}; see docs/observability.md)")]
pub struct TraceConfigError {
    /// The variable.
    pub variable: String,
    /// Its value (a header variable's is not repeated).
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
    /// How to fix it.
    pub hint: String,
}

fn bad(variable: &str, value: &str, problem: &str, hint: &str) -> TraceConfigError {
    TraceConfigError {
        variable: variable.into(),
        value: value.into(),
        problem: problem.into(),
        hint: hint.into(),
    }
}

impl TraceConfig {
    /// The export the variables in `env` ask for: `None` when they ask for none (no OTLP
    /// endpoint set, `OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none`).
    pub fn from_env(
        env: &BTreeMap<String, String>,
    ) -> Result<Option<TraceConfig>, TraceConfigError> {
        let get = |name: &str| env.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
        if let Some(disabled) = get("OTEL_SDK_DISABLED") {
            if parse_bool("OTEL_SDK_DISABLED", disabled)? {
                return Ok(None);
            }
        }
        match get("OTEL_TRACES_EXPORTER") {
            None | Some("otlp") => {}
            Some("none") => return Ok(None),
            Some(other) => {
                return Err(bad(
                    "OTEL_TRACES_EXPORTER",
                    other,
                    "delta exports traces over OTLP only",
                    "set OTEL_TRACES_EXPORTER=otlp (or none), or unset it",
                ))
            }
        }
        let endpoint = match (
            get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            get("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(url), _) => checked_url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url)?,
            (None, Some(base)) => format!(
                "{}/v1/traces",
                checked_url("OTEL_EXPORTER_OTLP_ENDPOINT", base)?.trim_end_matches('/')
            ),
            (None, None) => return Ok(None),
        };
        for name in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(protocol) = get(name) {
                if protocol != "http/protobuf" {
                    return Err(bad(
                        name,
                        protocol,
                        "delta sends OTLP over HTTP with protobuf bodies only (no gRPC, no JSON)",
                        "set it to http/protobuf and point the endpoint at the collector's OTLP/HTTP port (usually 4318)",
                    ));
                }
                break;
            }
        }
        let headers_var = if get("OTEL_EXPORTER_OTLP_TRACES_HEADERS").is_some() {
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
        } else {
            "OTEL_EXPORTER_OTLP_HEADERS"
        };
        let headers = match get(headers_var) {
            Some(list) => parse_pairs(headers_var, list, true)?,
            None => Vec::new(),
        };
        let mut resource_attributes = match get("OTEL_RESOURCE_ATTRIBUTES") {
            Some(list) => parse_pairs("OTEL_RESOURCE_ATTRIBUTES", list, false)?,
            None => Vec::new(),
        };
        let from_attributes = resource_attributes
            .iter()
            .position(|(k, _)| k == "service.name")
            .map(|i| resource_attributes.remove(i).1);
        let service_name = get("OTEL_SERVICE_NAME")
            .map(str::to_string)
            .or(from_attributes)
            .unwrap_or_else(|| "delta".into());
        let timeout_var = if get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT").is_some() {
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
        } else {
            "OTEL_EXPORTER_OTLP_TIMEOUT"
        };
        Ok(Some(TraceConfig {
            endpoint,
            headers,
            service_name,
            resource_attributes,
            sampler: sampler(get("OTEL_TRACES_SAMPLER"), get("OTEL_TRACES_SAMPLER_ARG"))?,
            capture_content: match get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT") {
                Some(v) => parse_bool("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", v)?,
                None => false,
            },
            timeout: millis(timeout_var, get(timeout_var), 10_000, 1, 600_000)?,
            max_queue: number(
                "OTEL_BSP_MAX_QUEUE_SIZE",
                get("OTEL_BSP_MAX_QUEUE_SIZE"),
                2048,
                1,
                1 << 20,
            )?,
            max_batch: number(
                "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
                get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE"),
                512,
                1,
                1 << 16,
            )?,
            schedule_delay: millis(
                "OTEL_BSP_SCHEDULE_DELAY",
                get("OTEL_BSP_SCHEDULE_DELAY"),
                5_000,
                1,
                600_000,
            )?,
        }))
    }

    /// A new root span for work that has no span yet (a plan, a lone run): a fresh span id
    /// under `parent` (the caller's `TRACEPARENT`, continued) or in a new trace, recorded as
    /// the sampler says. `random` supplies the ids.
    pub fn new_root(&self, parent: Option<&TraceSpan>, random: [u8; 24]) -> TraceSpan {
        match parent {
            Some(parent) => {
                let mut span_id = [0u8; 8];
                span_id.copy_from_slice(&random[16..]);
                let mut span = parent.child_with_id(span_id);
                span.sampled = self.sampler.samples(Some(parent), &parent.trace_id);
                span
            }
            None => {
                let mut span = TraceSpan::root(random, true);
                span.sampled = self.sampler.samples(None, &span.trace_id);
                span
            }
        }
    }
}

fn checked_url(variable: &str, url: &str) -> Result<String, TraceConfigError> {
    match reqwest::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some() => {
            Ok(url.to_string())
        }
        _ => Err(bad(
            variable,
            url,
            "not an http:// or https:// URL",
            "give the collector's OTLP/HTTP address, e.g. http://127.0.0.1:4318",
        )),
    }
}

fn parse_bool(variable: &str, value: &str) -> Result<bool, TraceConfigError> {
    match value.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(bad(
            variable,
            value,
            "not true or false",
            "set it to true or false",
        )),
    }
}

fn number(
    variable: &str,
    value: Option<&str>,
    default: usize,
    min: usize,
    max: usize,
) -> Result<usize, TraceConfigError> {
    let Some(value) = value else {
        return Ok(default);
    };
    match value.parse::<usize>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(bad(
            variable,
            value,
            &format!("not a whole number from {min} to {max}"),
            &format!("unset it for the default, {default}"),
        )),
    }
}

fn millis(
    variable: &str,
    value: Option<&str>,
    default: u64,
    min: u64,
    max: u64,
) -> Result<Duration, TraceConfigError> {
    let n = number(
        variable,
        value,
        default as usize,
        min as usize,
        max as usize,
    )?;
    Ok(Duration::from_millis(n as u64))
}

/// `k=v,k2=v2` with percent-encoded values (W3C baggage form). A header list's values are
/// secrets: its errors do not repeat the text.
fn parse_pairs(
    variable: &str,
    list: &str,
    secret: bool,
) -> Result<Vec<(String, String)>, TraceConfigError> {
    let shown = if secret { "<not shown>" } else { list };
    list.split(',')
        .filter(|item| !item.trim().is_empty())
        .map(|item| {
            let (key, value) = item.split_once('=').ok_or_else(|| {
                bad(
                    variable,
                    shown,
                    "an entry is not key=value",
                    "write key=value pairs separated by commas, values percent-encoded",
                )
            })?;
            let key = key.trim();
            if key.is_empty() || !key.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(bad(
                    variable,
                    shown,
                    "an entry has an empty or unprintable key",
                    "write key=value pairs separated by commas",
                ));
            }
            let value = crate::llm::endpoint::decode_header_value(value.trim());
            if secret && value.chars().any(|c| c.is_control()) {
                return Err(bad(
                    variable,
                    shown,
                    "a header value holds a control character",
                    "percent-encode only printable text",
                ));
            }
            Ok((key.to_string(), value))
        })
        .collect()
}

fn sampler(name: Option<&str>, arg: Option<&str>) -> Result<Sampler, TraceConfigError> {
    let ratio = || -> Result<f64, TraceConfigError> {
        let Some(arg) = arg else { return Ok(1.0) };
        match arg.parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
            _ => Err(bad(
                "OTEL_TRACES_SAMPLER_ARG",
                arg,
                "not a ratio from 0 to 1",
                "e.g. 0.1 records one trace in ten",
            )),
        }
    };
    Ok(match name.unwrap_or("parentbased_always_on") {
        "always_on" => Sampler::AlwaysOn,
        "always_off" => Sampler::AlwaysOff,
        "traceidratio" => Sampler::TraceIdRatio(ratio()?),
        "parentbased_always_on" => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
        "parentbased_always_off" => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
        "parentbased_traceidratio" => Sampler::ParentBased(Box::new(Sampler::TraceIdRatio(ratio()?))),
        other => {
            return Err(bad(
                "OTEL_TRACES_SAMPLER",
                other,
                "not a sampler delta knows",
                "use always_on, always_off, traceidratio, parentbased_always_on (the default), parentbased_always_off or parentbased_traceidratio",
            ))
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn nothing_is_exported_unless_an_endpoint_is_set_and_export_is_not_off() {
        assert_eq!(TraceConfig::from_env(&env(&[])), Ok(None));
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/");
        assert_eq!(
            TraceConfig::from_env(&env(&[base, ("OTEL_SDK_DISABLED", "true")])),
            Ok(None)
        );
        assert_eq!(
            TraceConfig::from_env(&env(&[base, ("OTEL_TRACES_EXPORTER", "none")])),
            Ok(None)
        );
        let config = TraceConfig::from_env(&env(&[base])).unwrap().unwrap();
        assert_eq!(config.endpoint, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(config.service_name, "delta");
        assert_eq!(
            config.sampler,
            Sampler::ParentBased(Box::new(Sampler::AlwaysOn))
        );
        assert!(!config.capture_content);
        // The signal's own variable is used as it is.
        let config = TraceConfig::from_env(&env(&[
            base,
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://c.example/in"),
            ("OTEL_SERVICE_NAME", "batch"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "openinference.project.name=p,service.name=x",
            ),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "authorization=Bearer%20sk-1,x-team=a",
            ),
            ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(config.endpoint, "https://c.example/in");
        assert_eq!(config.service_name, "batch");
        assert_eq!(
            config.resource_attributes,
            vec![("openinference.project.name".to_string(), "p".to_string())]
        );
        assert_eq!(
            config.headers[0],
            ("authorization".to_string(), "Bearer sk-1".to_string())
        );
        assert!(config.capture_content);
        assert!(!format!("{config:?}").contains("sk-1"), "{config:?}");
    }

    #[test]
    fn unusable_values_are_refused_naming_the_variable_without_secrets() {
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        for (pairs, variable) in [
            (
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318")],
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ),
            (
                vec![base, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")],
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ),
            (
                vec![base, ("OTEL_TRACES_SAMPLER", "sometimes")],
                "OTEL_TRACES_SAMPLER",
            ),
            (
                vec![
                    base,
                    ("OTEL_TRACES_SAMPLER", "traceidratio"),
                    ("OTEL_TRACES_SAMPLER_ARG", "2"),
                ],
                "OTEL_TRACES_SAMPLER_ARG",
            ),
            (
                vec![base, ("OTEL_BSP_MAX_QUEUE_SIZE", "0")],
                "OTEL_BSP_MAX_QUEUE_SIZE",
            ),
            (
                vec![base, ("OTEL_SDK_DISABLED", "yes")],
                "OTEL_SDK_DISABLED",
            ),
            (
                vec![base, ("OTEL_EXPORTER_OTLP_HEADERS", "sk-secret-no-equals")],
                "OTEL_EXPORTER_OTLP_HEADERS",
            ),
        ] {
            let error = TraceConfig::from_env(&env(&pairs)).unwrap_err();
            assert_eq!(error.variable, variable);
            let text = error.to_string();
            assert!(text.contains(variable) && text.contains("hint:"), "{text}");
            assert!(!text.contains("sk-secret"), "{text}");
        }
    }

    #[test]
    fn roots_follow_the_sampler_and_continue_a_remote_parent() {
        let config = TraceConfig::from_env(&env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:1")]))
            .unwrap()
            .unwrap();
        let root = config.new_root(None, [4; 24]);
        assert!(root.sampled && root.parent_span_id.is_none());
        let remote = TraceSpan::from_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
            None,
        )
        .unwrap();
        let child = config.new_root(Some(&remote), [4; 24]);
        assert_eq!(child.trace_id, remote.trace_id);
        assert_eq!(child.parent_span_id, Some(remote.span_id));
        assert!(!child.sampled, "the parent decided not to record");
        assert!(!Sampler::TraceIdRatio(0.0).samples(None, &[0xff; 16]));
        assert!(Sampler::TraceIdRatio(1.0).samples(None, &[0xff; 16]));
        assert!(Sampler::TraceIdRatio(0.5).samples(None, &[0; 16]));
    }
}
