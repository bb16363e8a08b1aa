//! The few WebDriver calls `delta bench serve-batch` makes to headless Chromium through
//! `chromedriver` (WebDriver is HTTP + JSON): open a session, go to a URL, run a script, wait
//! for one to return a value, quit. Every call is bounded in time.
//!
//! Must not: be used for anything but measuring (the browser tests have their own client).

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const CALL_LIMIT: Duration = Duration::from_secs(60);

/// A chromedriver child and one browser session; both ended by [`Driver::quit`] or drop.
pub struct Driver {
    child: Child,
    base: String,
    session: String,
    http: reqwest::Client,
    _profile: tempfile::TempDir,
}

impl Driver {
    pub async fn start(chromium: &Path, chromedriver: &Path) -> Result<Driver, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port for chromedriver: {e}"))?
            .port();
        let child = std::process::Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", chromedriver.display()))?;
        let profile = tempfile::tempdir().map_err(|e| e.to_string())?;
        let http = reqwest::Client::builder()
            .timeout(CALL_LIMIT)
            .build()
            .map_err(|e| e.to_string())?;
        let mut driver = Driver {
            child,
            base: format!("http://127.0.0.1:{port}"),
            session: String::new(),
            http,
            _profile: profile,
        };
        let deadline = Instant::now() + CALL_LIMIT;
        while !driver
            .http
            .get(format!("{}/status", driver.base))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            if Instant::now() > deadline {
                return Err("chromedriver did not answer".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let args: Vec<String> = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1400,1000",
        ]
        .iter()
        .map(|a| a.to_string())
        .chain([format!(
            "--user-data-dir={}",
            driver._profile.path().display()
        )])
        .collect();
        let answer = driver
            .call(
                "POST",
                "/session",
                Some(json!({"capabilities": {"alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {"binary": chromium, "args": args}
                }}})),
            )
            .await?;
        driver.session = answer["sessionId"]
            .as_str()
            .ok_or("chromedriver opened no session")?
            .to_string();
        Ok(driver)
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let url = format!("{}{path}", self.base);
        let request = match method {
            "DELETE" => self.http.delete(url),
            _ => self.http.post(url).json(&body.unwrap_or(json!({}))),
        };
        let response = request
            .send()
            .await
            .map_err(|e| format!("WebDriver {path}: {e}"))?;
        let status = response.status();
        let value: Value = response
            .json()
            .await
            .map_err(|e| format!("WebDriver {path}: {e}"))?;
        if !status.is_success() {
            return Err(format!("WebDriver {method} {path}: {value}"));
        }
        Ok(value["value"].clone())
    }

    pub async fn goto(&self, url: &str) -> Result<(), String> {
        let path = format!("/session/{}/url", self.session);
        self.call("POST", &path, Some(json!({"url": url})))
            .await
            .map(|_| ())
    }

    pub async fn script(&self, script: &str) -> Result<Value, String> {
        let path = format!("/session/{}/execute/sync", self.session);
        self.call("POST", &path, Some(json!({"script": script, "args": []})))
            .await
    }

    /// Polls `script` until it returns something other than null.
    pub async fn wait_for(&self, script: &str) -> Result<Value, String> {
        let deadline = Instant::now() + CALL_LIMIT;
        loop {
            let value = self.script(script).await?;
            if !value.is_null() {
                return Ok(value);
            }
            if Instant::now() > deadline {
                return Err(format!("the page did not get there within {CALL_LIMIT:?}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn quit(mut self) {
        let path = format!("/session/{}", self.session);
        let _ = self.call("DELETE", &path, None).await;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
