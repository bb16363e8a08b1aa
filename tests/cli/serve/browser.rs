//! The page in a real browser (Debian's `chromium` + `chromedriver` over WebDriver): open it
//! with the token, create a session and a terminal worker, type a command and see its output,
//! reload and still see it, open the runs view of a workspace with a finished example
//! orchestration and see its stages and a run's timeline, and save screenshots; and where the
//! token goes: no cookie, nothing sent to another server on 127.0.0.1, a second tab works, a
//! stale token is said. Without chromium the tests fail loudly, unless DELTA_SKIP_BROWSER=1
//! says to skip them (they then print SKIPPED).

use super::webdriver::{which, Driver};
use super::{runtime, Root, Server};
use crate::harness::delta_exe;

fn browser() -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let chromium = which("chromium").or_else(|| which("chromium-browser"))?;
    let driver = which("chromedriver")?;
    Some((chromium, driver))
}

/// Runs the map-reduce example plan into `workspace` (offline, its scripted model).
pub fn finished_example_orchestration(workspace: &std::path::Path) {
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/plans/map-reduce");
    let output = std::process::Command::new(delta_exe())
        .current_dir(&example)
        .args([
            "orchestrate",
            "plan.yaml",
            "--llm-script",
            "llm-script.yaml",
            "--format",
            "json",
            "-w",
        ])
        .arg(workspace)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", workspace)
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Chromium and chromedriver, or `None` after saying SKIPPED when DELTA_SKIP_BROWSER=1 says
/// to skip knowingly (without it a missing browser fails the test).
pub(super) fn browser_or_skip(test: &str) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let found = browser();
    if found.is_none() {
        eprintln!("\n!!!!!!!!!! SKIPPED {test}: chromium or chromedriver is not installed (apt-get install chromium chromium-driver) !!!!!!!!!!\n");
        assert_eq!(
            std::env::var("DELTA_SKIP_BROWSER").as_deref(),
            Ok("1"),
            "the browser test needs chromium and chromedriver; set DELTA_SKIP_BROWSER=1 to skip it knowingly"
        );
    }
    found
}

/// The page opened with the printed URL has taken the token out of the address bar and is live.
pub(super) const OPENED: &str =
    "return !location.hash.includes('token') && document.getElementById('connection').textContent === 'live'";

#[test]
fn serve_browser_terminal_reload_and_runs_view() {
    let Some((chromium, chromedriver)) =
        browser_or_skip("serve_browser_terminal_reload_and_runs_view")
    else {
        return;
    };
    let root = Root::new();
    finished_example_orchestration(&root.workspace());
    let server = Server::start(&root);
    runtime().block_on(async {
        let driver = Driver::start(&chromium, &chromedriver).await;
        driver.goto(&format!("{}/#token={}", server.base, server.token)).await;
        driver.until("the page without the token in its address", OPENED).await;

        driver.type_into("#new-session-path", &root.workspace().display().to_string()).await;
        driver.click("#new-session").await;
        driver.click("#add-terminal").await;
        driver.until("the worker's tab", "return location.hash.includes('/worker/')").await;
        driver.until("a prompt", "return /[$#] *$/m.test(window.deltaServe.screenText())").await;
        driver.click("#terminal").await;
        driver.type_into(".xterm-helper-textarea", "echo hello-$((6*7))\u{E007}").await;
        driver.until("hello-42 in the terminal", "return window.deltaServe.screenText().includes('hello-42')").await;

        driver.refresh().await;
        driver.until("hello-42 after a reload", "return window.deltaServe.screenText().includes('hello-42')").await;
        let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-browser");
        driver.screenshot(&shot.join("terminal.png")).await;

        driver.goto(&format!("{}/#/runs", server.base)).await;
        driver.click("[data-orchestration] a").await;
        driver.until(
            "the example orchestration's stages",
            "const stages = [...document.querySelectorAll('#stage-graph [data-stage]')].map(s => s.dataset.stage + ':' + s.dataset.status);\
             return stages.includes('map:COMPLETED') && stages.includes('reduce:COMPLETED');",
        )
        .await;
        driver.screenshot(&shot.join("runs.png")).await;
        driver.click("#batch-runs-table tr.clickable a").await;
        driver.until(
            "a run's timeline",
            "const entries = [...document.querySelectorAll('#run-entries .entry')].map(e => e.dataset.kind + ':' + e.textContent);\
             return entries.some(e => e.startsWith('start:') && e.includes('Run started')) && entries.some(e => e.startsWith('end:') && e.includes('Completed'));",
        )
        .await;
        driver.screenshot(&shot.join("timeline.png")).await;
        eprintln!("screenshots in {}", shot.display());
        driver.quit().await;
    });
}

/// Regression (issue 31 item 17): `delta serve -w DIR` opened on the empty Sessions page,
/// while the runs of DIR were what it was started for. Opened without an address, the page
/// now shows Runs & batches when `-w` was given, and the sessions when it was not; an
/// address given in the URL is kept.
#[test]
fn serve_browser_opens_on_runs_and_batches_when_started_with_w() {
    let Some((chromium, chromedriver)) =
        browser_or_skip("serve_browser_opens_on_runs_and_batches_when_started_with_w")
    else {
        return;
    };
    let root = Root::new();
    let bare = Root::new();
    let with_w = Server::start(&root);
    let without_w = Server::start_without_workspace(&bare);
    let runs_shown = "return location.hash === '#/runs' && !document.getElementById('runs-view').hidden && document.getElementById('session-view').hidden && document.getElementById('nav-runs').classList.contains('current')";
    let sessions_shown = "return location.hash === '' && document.getElementById('runs-view').hidden && !document.getElementById('session-view').hidden && document.getElementById('nav-sessions').classList.contains('current')";
    runtime().block_on(async {
        let driver = Driver::start(&chromium, &chromedriver).await;
        driver.goto(&format!("{}/#token={}", with_w.base, with_w.token)).await;
        driver.until("the page opened", OPENED).await;
        driver.until("Runs & batches shown", runs_shown).await;
        driver.until("the -w workspace listed", &format!("return !!document.querySelector('[data-workspace={:?}]')", root.workspace().canonicalize().unwrap().display().to_string())).await;
        driver.goto(&format!("{}/#/session/none", with_w.base)).await;
        driver.refresh().await;
        driver.until("an address given is kept", "return location.hash === '#/session/none' && !document.getElementById('session-view').hidden && document.getElementById('connection').textContent === 'live'").await;

        driver.goto(&format!("{}/#token={}", without_w.base, without_w.token)).await;
        driver.until("the page opened", OPENED).await;
        driver.until("the sessions shown", sessions_shown).await;
        driver.quit().await;
    });
}

/// Another HTTP server on 127.0.0.1 (a dev server, another user's server, a program that took
/// a stopped server's port): it answers `/control` with a small page of its own, every other
/// request with its `page`, and keeps every request head it received.
pub(super) struct OtherLocalServer {
    pub url: String,
    pub heads: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// What [`OtherLocalServer`] answers by default.
pub(super) const OTHER_PAGE: &str =
    "<!doctype html><title>other</title><p id=other>another local server</p>";

impl OtherLocalServer {
    pub fn start() -> OtherLocalServer {
        Self::start_on("127.0.0.1:0", OTHER_PAGE.to_string())
    }

    /// Listens on `address` (a port another server just left: retried, bounded, until it is
    /// free) and answers with `page`.
    pub fn start_on(address: &str, page: String) -> OtherLocalServer {
        use std::io::{Read, Write};
        let deadline = std::time::Instant::now() + super::LIMIT;
        let listener = loop {
            match std::net::TcpListener::bind(address) {
                Ok(listener) => break listener,
                Err(e) if std::time::Instant::now() < deadline => {
                    eprintln!("waiting for {address} to be free: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => panic!("cannot listen on {address}: {e}"),
            }
        };
        let url = format!("http://{}", listener.local_addr().unwrap());
        let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = heads.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let answer = if head.starts_with("GET /control ") {
                    "<!doctype html><title>control</title><p id=control-ok>the other server's own page</p>"
                } else {
                    page.as_str()
                };
                kept.lock().unwrap().push(head);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                    answer.len()
                );
            }
        });
        OtherLocalServer { url, heads }
    }

    /// Every request head received so far.
    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

/// Regression (issue 24 item 1): opening `/?token=` stored the token in a cookie, which the
/// browser then sent to every server on 127.0.0.1 whatever its port, where it ran terminals
/// as the user. Now the printed URL carries the token in its fragment; the page keeps it in
/// localStorage (scoped by port) and sends no cookie anywhere; a reload and a second tab
/// opened without the token keep working; a wrong token is said on the page.
#[test]
fn serve_browser_the_token_never_reaches_another_local_server_and_new_tabs_work() {
    let Some((chromium, chromedriver)) = browser_or_skip(
        "serve_browser_the_token_never_reaches_another_local_server_and_new_tabs_work",
    ) else {
        return;
    };
    let root = Root::new();
    let server = Server::start(&root);
    let other = OtherLocalServer::start();
    runtime().block_on(async {
        let driver = Driver::start(&chromium, &chromedriver).await;
        driver.goto(&format!("{}/#token={}", server.base, server.token)).await;
        driver.until("the page without the token in its address", OPENED).await;
        assert_eq!(driver.cookies().await, serde_json::json!([]), "no cookie");
        assert_eq!(driver.script("return document.cookie").await, "");

        driver.type_into("#new-session-path", &root.workspace().display().to_string()).await;
        driver.click("#new-session").await;
        driver.click("#add-terminal").await;
        driver.until("the worker's tab", "return location.hash.includes('/worker/')").await;
        driver.until("a prompt", "return /[$#] *$/m.test(window.deltaServe.screenText())").await;
        driver.click("#terminal").await;
        driver.type_into(".xterm-helper-textarea", "echo tab-$((6*7))\u{E007}").await;
        driver.until("tab-42 in the terminal", "return window.deltaServe.screenText().includes('tab-42')").await;
        let worker_view = driver.script("return location.hash").await;
        let worker_view = worker_view.as_str().unwrap().to_string();
        driver.refresh().await;
        driver.until("tab-42 after a reload", "return window.deltaServe.screenText().includes('tab-42')").await;

        // A second tab on the worker's own address, without the token: it finds it.
        let tab = driver.new_tab().await;
        driver.switch_to(&tab).await;
        driver.goto(&format!("{}/{worker_view}", server.base)).await;
        driver.until("tab-42 in a new tab", "return document.getElementById('connection').textContent === 'live' && window.deltaServe.screenText().includes('tab-42')").await;

        // Another server on 127.0.0.1 receives nothing of the token, and cannot read it.
        driver.goto(&format!("{}/", other.url)).await;
        driver.until("the other server's page", "return document.getElementById('other') !== null").await;
        assert_eq!(driver.script("return document.cookie").await, "");
        assert_eq!(
            driver.script("return localStorage.getItem('delta-serve-token')").await,
            serde_json::Value::Null
        );
        let heads = other.heads.lock().unwrap().clone();
        assert!(!heads.is_empty());
        for head in &heads {
            assert!(!head.contains(&server.token), "the token reached another server: {head}");
            assert!(!head.to_ascii_lowercase().contains("cookie"), "{head}");
        }

        // A stored token that is not the server's (an old one, after a restart) is said.
        driver.goto(&format!("{}/#/runs", server.base)).await;
        driver.script("localStorage.setItem('delta-serve-token', 'not-this-servers-token'); return true").await;
        driver.refresh().await;
        driver.until(
            "the stale-token message",
            "const box = document.getElementById('token-problem'); return !box.hidden && box.textContent.includes('Open the URL that `delta serve` printed');",
        )
        .await;
        driver.quit().await;
    });
}
