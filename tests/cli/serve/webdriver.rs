//! A small W3C WebDriver client over reqwest (WebDriver is plain HTTP + JSON), driving
//! Debian's `chromium` through `chromedriver` for the browser test. Only what the test uses:
//! open a session, navigate, find, click, type, hover, run a script, refresh, back, window
//! size, tabs, frames, cookies, screenshot.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use super::LIMIT;

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Finds a program on PATH.
pub fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(program))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .into_iter()
        .find(|path| path.is_file())
}

pub struct Driver {
    child: Child,
    base: String,
    session: String,
    http: reqwest::Client,
    _profile: tempfile::TempDir,
}

impl Driver {
    pub async fn start(chromium: &Path, chromedriver: &Path) -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // In a process group of its own, which the browser it starts joins: a test that fails
        // (and never quits the session) still ends the browser with it, see `Drop`.
        use std::os::unix::process::CommandExt;
        let child = std::process::Command::new(chromedriver)
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn chromedriver");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::builder().timeout(LIMIT).build().unwrap();
        let profile = tempfile::tempdir().unwrap();
        let mut driver = Driver {
            child,
            base,
            session: String::new(),
            http,
            _profile: profile,
        };
        super::eventually("chromedriver answering", || async {
            driver
                .http
                .get(format!("{}/status", driver.base))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        })
        .await;
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,800",
        ]
        .iter()
        .map(|a| a.to_string())
        .chain([format!(
            "--user-data-dir={}",
            driver._profile.path().display()
        )])
        .collect::<Vec<_>>();
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args}
        }}});
        let answer = driver.call("POST", "/session", Some(capabilities)).await;
        driver.session = answer["sessionId"]
            .as_str()
            .expect("a WebDriver session")
            .to_string();
        driver
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.base);
        let request = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self.http.post(url).json(&body.unwrap_or(json!({}))),
        };
        let response = request.send().await.unwrap();
        let status = response.status();
        let value: Value = response.json().await.unwrap();
        assert!(status.is_success(), "WebDriver {method} {path}: {value}");
        value["value"].clone()
    }

    fn path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    pub async fn goto(&self, url: &str) {
        self.call("POST", &self.path("/url"), Some(json!({"url": url})))
            .await;
    }

    pub async fn refresh(&self) {
        self.call("POST", &self.path("/refresh"), None).await;
    }

    /// The browser's back button.
    pub async fn back(&self) {
        self.call("POST", &self.path("/back"), None).await;
    }

    /// Resizes the window (outer size, in CSS pixels).
    pub async fn window_size(&self, width: u32, height: u32) {
        self.call(
            "POST",
            &self.path("/window/rect"),
            Some(json!({"width": width, "height": height})),
        )
        .await;
    }

    /// Opens a new tab and returns its window handle (the current tab stays current).
    pub async fn new_tab(&self) -> String {
        let answer = self
            .call(
                "POST",
                &self.path("/window/new"),
                Some(json!({"type": "tab"})),
            )
            .await;
        answer["handle"].as_str().unwrap().to_string()
    }

    /// The current tab's window handle.
    pub async fn window_handle(&self) -> String {
        let answer = self.call("GET", &self.path("/window"), None).await;
        answer.as_str().unwrap().to_string()
    }

    pub async fn switch_to(&self, handle: &str) {
        self.call(
            "POST",
            &self.path("/window"),
            Some(json!({"handle": handle})),
        )
        .await;
    }

    /// Makes the frame `css` (an iframe of the current page) the current browsing context.
    pub async fn switch_to_frame(&self, css: &str) {
        let id = self.find(css).await;
        self.call(
            "POST",
            &self.path("/frame"),
            Some(json!({"id": {ELEMENT: id}})),
        )
        .await;
    }

    /// Back from a frame to the page around it.
    pub async fn switch_to_parent_frame(&self) {
        self.call("POST", &self.path("/frame/parent"), None).await;
    }

    /// Moves the mouse to `(x, y)` from the centre of the element `css`, as a user would.
    pub async fn hover(&self, css: &str, x: i64, y: i64) {
        let id = self.find(css).await;
        let move_to = json!({"actions": [{"type": "pointer", "id": "mouse",
            "parameters": {"pointerType": "mouse"},
            "actions": [{"type": "pointerMove", "duration": 0, "origin": {ELEMENT: id}, "x": x, "y": y}]}]});
        self.call("POST", &self.path("/actions"), Some(move_to))
            .await;
    }

    /// Every cookie the browser holds for the current page's address.
    pub async fn cookies(&self) -> Value {
        self.call("GET", &self.path("/cookie"), None).await
    }

    pub async fn script(&self, script: &str) -> Value {
        self.call(
            "POST",
            &self.path("/execute/sync"),
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Waits (bounded) for an element, returns its WebDriver id.
    pub async fn find(&self, css: &str) -> String {
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            let url = format!("{}{}", self.base, self.path("/element"));
            let response = self
                .http
                .post(url)
                .json(&json!({"using": "css selector", "value": css}))
                .send()
                .await
                .unwrap();
            if response.status().is_success() {
                let value: Value = response.json().await.unwrap();
                return value["value"][ELEMENT].as_str().unwrap().to_string();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no element {css} within {LIMIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn click(&self, css: &str) {
        let id = self.find(css).await;
        self.call("POST", &self.path(&format!("/element/{id}/click")), None)
            .await;
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css).await;
        self.call(
            "POST",
            &self.path(&format!("/element/{id}/value")),
            Some(json!({"text": text})),
        )
        .await;
    }

    /// Polls a script until it returns true.
    pub async fn until(&self, what: &str, script: &str) {
        let deadline = tokio::time::Instant::now() + LIMIT;
        while self.script(script).await != json!(true) {
            if tokio::time::Instant::now() >= deadline {
                // What the page showed, to tell why.
                let page = self
                    .script("return location.hash + '\\n' + document.body.innerText.slice(0, 3000)")
                    .await;
                panic!(
                    "{what} did not happen within {LIMIT:?}; the page showed: {}",
                    page.as_str().unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn screenshot(&self, path: &Path) {
        use base64::Engine;
        let data = self.call("GET", &self.path("/screenshot"), None).await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.as_str().unwrap())
            .unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    pub async fn quit(mut self) {
        let _ = self
            .http
            .delete(format!("{}{}", self.base, self.path("")))
            .send()
            .await;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Driver {
    /// Kills chromedriver's whole group: the browser too, whose processes a killed
    /// chromedriver would leave running after a failed test.
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(-(self.child.id() as i32));
        let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
