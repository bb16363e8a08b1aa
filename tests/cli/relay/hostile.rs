//! Issue 24 §7: `delta relay` against hostile callers, as a real process — unauthenticated
//! bodies are refused unread, bodies are capped in size and, all together, in memory; callers
//! that leave are forgotten (queued calls dropped, calls in progress cancelled upstream); and
//! the provider key and the base URL's user-info and query never come back in an answer or a
//! log line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::Duration;

use super::upstream::{json_response, Behaviour, Seen, Upstream};
use super::{chat_body, read_answer, send, write_head, RelayProcess, KEY, TOKEN};
use crate::harness::wait_until;

const LIMIT: Duration = Duration::from_secs(20);
const MIB: usize = 1024 * 1024;

fn scripted_relay(extra: &[&str]) -> (RelayProcess, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let script = super::script_file(dir.path());
    let mut args = vec!["--llm-script", script.to_str().unwrap()];
    args.extend_from_slice(extra);
    let relay = RelayProcess::start(&args, &[("DELTA_RELAY_TOKEN", TOKEN)]);
    (relay, dir)
}

/// Regression: the relay read up to 64 MiB of body before checking the token (16
/// unauthenticated 60 MiB POSTs: 1,169 MiB resident).
#[test]
fn relay_answers_401_before_reading_an_unauthenticated_body() {
    // Limits as large as the old relay's, so only the order of the checks is tested.
    let (relay, _dir) = scripted_relay(&["--max-body", "64MiB", "--max-body-memory", "2GiB"]);
    let authority = relay.authority();
    // Announce 60 MiB and send none of it: the answer must not wait for the body.
    let mut stream = TcpStream::connect(&authority).unwrap();
    stream.set_read_timeout(Some(LIMIT)).unwrap();
    write_head(
        &mut stream,
        &authority,
        "POST",
        "/v1/chat/completions",
        None,
        Some(60 * MIB),
    );
    let answer = read_answer(&mut stream);
    assert_eq!(answer.status, 401, "{}", answer.head);
    assert!(answer.text().contains("relay token"), "{}", answer.text());

    // 16 callers pushing 60 MiB each without the token: none of it is kept.
    let before = relay.peak_rss_kib();
    let pushers: Vec<_> = (0..16)
        .map(|_| {
            let authority = authority.clone();
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(&authority).unwrap();
                stream.set_write_timeout(Some(LIMIT)).unwrap();
                write_head(
                    &mut stream,
                    &authority,
                    "POST",
                    "/v1/chat/completions",
                    Some("not-the-token"),
                    Some(60 * MIB),
                );
                let piece = vec![b'x'; MIB];
                for _ in 0..60 {
                    if stream.write_all(&piece).is_err() {
                        break;
                    }
                }
            })
        })
        .collect();
    for pusher in pushers {
        pusher.join().unwrap();
    }
    let grown_mib = (relay.peak_rss_kib() - before) / 1024;
    assert!(grown_mib < 32, "the relay grew by {grown_mib} MiB");
}

#[test]
fn relay_refuses_a_body_over_max_body_with_413() {
    let (relay, _dir) = scripted_relay(&["--max-body", "64KiB"]);
    let authority = relay.authority();
    // Declared too large: refused before any of it is sent.
    let mut stream = TcpStream::connect(&authority).unwrap();
    stream.set_read_timeout(Some(LIMIT)).unwrap();
    write_head(
        &mut stream,
        &authority,
        "POST",
        "/v1/chat/completions",
        Some(TOKEN),
        Some(MIB),
    );
    let answer = read_answer(&mut stream);
    assert_eq!(answer.status, 413, "{}", answer.head);
    assert!(answer.text().contains("--max-body"), "{}", answer.text());
    // Undeclared (chunked), found too large while read.
    let mut stream = TcpStream::connect(&authority).unwrap();
    stream.set_read_timeout(Some(LIMIT)).unwrap();
    write_head(
        &mut stream,
        &authority,
        "POST",
        "/v1/chat/completions",
        Some(TOKEN),
        None,
    );
    let piece = vec![b' '; 16 * 1024];
    for _ in 0..5 {
        let _ = write!(stream, "{:x}\r\n", piece.len());
        let _ = stream.write_all(&piece);
        let _ = stream.write_all(b"\r\n");
    }
    let _ = stream.write_all(b"0\r\n\r\n");
    let answer = read_answer(&mut stream);
    assert_eq!(answer.status, 413, "{}", answer.head);
    // Under the limit: served.
    let answer = send(
        &authority,
        "POST",
        "/v1/chat/completions",
        Some(TOKEN),
        &chat_body("hi", false),
    );
    assert_eq!(answer.status, 200, "{}", answer.text());
}

/// A body of `size` bytes carrying `marker`.
fn big_chat_body(marker: &str, size: usize) -> Vec<u8> {
    let filler = "x".repeat(size.saturating_sub(100));
    serde_json::json!({"model": "m", "messages": [{"role": "user", "content": format!("{marker} {filler}")}]})
        .to_string()
        .into_bytes()
}

/// Eight authenticated callers with 16 MiB bodies, the endpoint holding the first: with
/// `--max-body-memory 32MiB` the relay takes two bodies and leaves the others unread.
#[test]
fn relay_holds_at_most_its_body_memory_of_request_bodies() {
    let upstream = Upstream::start(|_| Behaviour::Hold);
    let relay = RelayProcess::start(
        &[
            "--max-in-flight",
            "1",
            "--max-body",
            "16MiB",
            "--max-body-memory",
            "32MiB",
        ],
        &[
            ("DELTA_BASE_URL", upstream.base_url.as_str()),
            ("DELTA_API_KEY", KEY),
            ("DELTA_RELAY_TOKEN", TOKEN),
        ],
    );
    let before = relay.peak_rss_kib();
    let authority = relay.authority();
    let (written_tx, written_rx) = mpsc::channel();
    let mut callers = Vec::new();
    for i in 0..8 {
        let authority = authority.clone();
        let written_tx = written_tx.clone();
        let body = big_chat_body(&format!("caller-{i}"), 16 * MIB - 1024);
        let mut stream = TcpStream::connect(&authority).unwrap();
        callers.push(stream.try_clone().unwrap());
        std::thread::spawn(move || {
            write_head(
                &mut stream,
                &authority,
                "POST",
                "/v1/chat/completions",
                Some(TOKEN),
                Some(body.len()),
            );
            if stream.write_all(&body).is_ok() {
                let _ = written_tx.send(i);
            }
        });
    }
    assert!(
        matches!(upstream.next(LIMIT), Some(Seen::Request { .. })),
        "the first body reached the endpoint"
    );
    // Without the cap every body is read at once; with it, the others stay unsent.
    let mut written = 0;
    wait_until(Duration::from_secs(3), || {
        while written_rx.try_recv().is_ok() {
            written += 1;
        }
        written == 8
    });
    let grown_mib = (relay.peak_rss_kib() - before) / 1024;
    assert!(written <= 3, "{written} bodies of 16 MiB were taken in");
    assert!(
        grown_mib < 80,
        "the relay grew by {grown_mib} MiB for bodies"
    );
    for caller in callers {
        let _ = caller.shutdown(std::net::Shutdown::Both);
    }
}

/// Regression: a caller that disconnected kept its call queued, then sent upstream, where it
/// held the endpoint's place for 54 s and spent the per-minute budget.
#[test]
fn relay_drops_queued_calls_and_cancels_upstream_calls_whose_caller_left() {
    let upstream = Upstream::start(|body| {
        if body.contains("hold") {
            Behaviour::Hold
        } else {
            Behaviour::Respond(json_response(
                200,
                "",
                r#"{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}"#,
            ))
        }
    });
    let relay = RelayProcess::start(
        &["--max-in-flight", "1"],
        &[
            ("DELTA_BASE_URL", upstream.base_url.as_str()),
            ("DELTA_API_KEY", KEY),
            ("DELTA_RELAY_TOKEN", TOKEN),
            ("DELTA_LOG", "info,delta_actors::runtime::relay=debug"),
        ],
    );
    let authority = relay.authority();
    let open = |marker: &str, run_id: &str| {
        let body = chat_body(marker, false);
        let mut stream = TcpStream::connect(&authority).unwrap();
        write!(
            stream,
            "POST /v1/chat/completions HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {TOKEN}\r\nx-delta-run-id: {run_id}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .unwrap();
        stream.write_all(&body).unwrap();
        stream
    };
    // A is sent upstream and held there; B waits for the only place.
    let a = open("hold-A", "run-A");
    let Some(Seen::Request { body, .. }) = upstream.next(LIMIT) else {
        panic!("A never reached the endpoint");
    };
    assert!(body.contains("hold-A"));
    let b = open("hold-B", "run-B");
    let queued = |text: String| {
        text.lines()
            .any(|line| line.contains("queued") && line.contains("run-B"))
    };
    assert!(
        wait_until(LIMIT, || queued(relay.stderr_text())),
        "B was never queued: {}",
        relay.stderr_text()
    );
    drop(b);
    drop(a);
    // A's call is cancelled: the relay closes its connection to the endpoint.
    match upstream.next(LIMIT) {
        Some(Seen::Closed { body }) => assert!(body.contains("hold-A"), "{body}"),
        other => panic!("A's upstream call was not cancelled: {other:?}"),
    }
    // B never goes out: the next request the endpoint sees is C.
    let answer = send(
        &authority,
        "POST",
        "/v1/chat/completions",
        Some(TOKEN),
        &chat_body("answer-C", false),
    );
    assert_eq!(answer.status, 200, "{}", answer.text());
    match upstream.next(LIMIT) {
        Some(Seen::Request { body, .. }) => {
            assert!(body.contains("answer-C"), "B was sent: {body}")
        }
        other => panic!("C never reached the endpoint: {other:?}"),
    }
    let stderr = relay.stop();
    assert!(
        stderr.contains("1 requests answered")
            && stderr.contains("2 callers left before their answer"),
        "{stderr}"
    );
}

/// Regression: an endpoint error quoting `Bearer sk-...` came back verbatim. The key and the
/// base URL's user-info and query values are redacted from answers (JSON or not, streamed or
/// not, and the relay's own errors) and from every log line.
#[test]
fn relay_redacts_the_key_and_the_url_secrets_from_answers_and_logs() {
    const PASSWORD: &str = "pw-secret-4321";
    const QUERY: &str = "qsecret-9876";
    let echo = format!(
        r#"{{"error":{{"message":"Incorrect API key provided: Bearer {KEY} for /v1?key={QUERY}","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}}}"#
    );
    let plain = format!("upstream rejected Authorization: Bearer {KEY} (user proxy:{PASSWORD})");
    let event = format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"your key is {KEY}\"}}}}]}}\n\n");
    let upstream = Upstream::start(move |body| {
        if body.contains("json") {
            Behaviour::Respond(json_response(401, "", &echo))
        } else if body.contains("plain") {
            Behaviour::Respond(
                format!(
                    "HTTP/1.1 500 X\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{plain}",
                    plain.len()
                )
                .into_bytes(),
            )
        } else {
            Behaviour::Stream {
                events: vec![event.clone(), "data: [DONE]\n\n".to_owned()],
                pause_before: usize::MAX,
                latch: Default::default(),
            }
        }
    });
    let secret_url = |base: &str| {
        base.replacen("http://", &format!("http://proxy:{PASSWORD}@"), 1) + &format!("?key={QUERY}")
    };
    let leaks = |text: &str| {
        [KEY, PASSWORD, QUERY]
            .into_iter()
            .filter(|s| text.contains(s))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let env = |url: &str| {
        vec![
            ("DELTA_BASE_URL", url.to_owned()),
            ("DELTA_API_KEY", KEY.to_owned()),
            ("DELTA_RELAY_TOKEN", TOKEN.to_owned()),
            ("DELTA_LOG", "info".to_owned()),
        ]
    };
    let url = secret_url(&upstream.base_url);
    let env_pairs = env(&url);
    let env_refs: Vec<(&str, &str)> = env_pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let relay = RelayProcess::start(&[], &env_refs);
    let authority = relay.authority();
    let path = "/v1/chat/completions";
    for marker in ["json", "plain", "stream"] {
        let answer = send(
            &authority,
            "POST",
            path,
            Some(TOKEN),
            &chat_body(marker, marker == "stream"),
        );
        let text = answer.text();
        assert!(
            leaks(&text).is_empty(),
            "{marker}: {:?} in {text}",
            leaks(&text)
        );
        assert!(text.contains("[REDACTED]"), "{marker}: {text}");
    }
    let stderr = relay.stop();
    assert!(
        leaks(&stderr).is_empty(),
        "{:?} in the log: {stderr}",
        leaks(&stderr)
    );
    assert!(
        stderr.contains("forwarding to http://[REDACTED]@127.0.0.1:")
            && stderr.contains("?key=[REDACTED]"),
        "{stderr}"
    );

    // An endpoint that cannot be reached: the relay's own error names it, redacted.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = secret_url(&format!("http://{}/v1", closed.local_addr().unwrap()));
    drop(closed);
    let env_pairs = env(&dead);
    let env_refs: Vec<(&str, &str)> = env_pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let relay = RelayProcess::start(&[], &env_refs);
    let answer = send(
        &relay.authority(),
        "POST",
        path,
        Some(TOKEN),
        &chat_body("x", false),
    );
    assert_eq!(answer.status, 502, "{}", answer.text());
    assert!(
        answer.text().contains("cannot connect"),
        "{}",
        answer.text()
    );
    assert!(leaks(&answer.text()).is_empty(), "{}", answer.text());
    let stderr = relay.stop();
    assert!(stderr.contains("cannot connect"), "{stderr}");
    assert!(leaks(&stderr).is_empty(), "{stderr}");

    // A base URL that does not parse is refused without being repeated.
    let broken = format!("http://proxy:{PASSWORD}@127.0.0.1:99999/v1?key={QUERY}");
    let env_pairs = env(&broken);
    let env_refs: Vec<(&str, &str)> = env_pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let stderr = RelayProcess::try_start(&[], &env_refs).err().unwrap();
    assert!(stderr.contains("not a valid URL"), "{stderr}");
    assert!(leaks(&stderr).is_empty(), "{stderr}");
}

/// Regression (a fresh-clone CI run): the relay printed its address before it caught
/// SIGTERM, so a caller that stopped it right after reading the address could kill it by
/// the signal's default action (no summary, exit by signal 15). Stopped the instant its
/// address is out, it still stops cleanly, every time.
#[test]
fn a_relay_stopped_the_moment_it_prints_its_address_stops_cleanly() {
    for _ in 0..5 {
        let (relay, _dir) = scripted_relay(&[]);
        let stderr = relay.stop();
        assert!(
            stderr.contains("relay stopped: 0 requests answered"),
            "{stderr}"
        );
    }
}
