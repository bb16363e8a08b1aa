//! A new session's folder as a person types it: a relative path (taken from the folder
//! `delta serve` was started in), `~/...`, a folder that has a session already (asked
//! about, not opened twice silently), a folder that does not exist; and, in the browser, the
//! errors said beside the form (no blocking `alert()`), the path box emptied once it worked.

use serde_json::json;

use super::browser::{browser_or_skip, OPENED};
use super::webdriver::Driver;
use super::{runtime, Root, Server};

/// Regression (issue 27): a relative path was "does not exist"; `~` was not expanded; the same
/// folder could be added twice without a word.
#[test]
fn serve_new_session_takes_relative_and_home_paths_and_asks_about_a_duplicate() {
    let root = Root::new();
    let home_project = root.path().join("home/project");
    std::fs::create_dir_all(&home_project).unwrap();
    let server = Server::start_in(&root, &[], &[], root.path());
    let canonical = |p: std::path::PathBuf| p.canonicalize().unwrap().display().to_string();
    runtime().block_on(async {
        let server = &server;
        let create =
            |body: serde_json::Value| async move { server.post("/api/sessions", body).await };
        let (status, made) = create(json!({"type": "quick", "locationPath": "ws"})).await;
        assert_eq!(status, 201, "{made}");
        assert_eq!(made["session"]["locationPath"], canonical(root.workspace()));
        let (status, made) = create(json!({"type": "quick", "locationPath": "~/project"})).await;
        assert_eq!(status, 201, "{made}");
        assert_eq!(
            made["session"]["locationPath"],
            canonical(home_project.clone())
        );

        let (status, twice) = create(json!({"type": "quick", "locationPath": "./ws/"})).await;
        assert_eq!(
            (status, twice["code"].clone()),
            (409, json!("duplicate_folder")),
            "{twice}"
        );
        assert!(
            twice["error"].as_str().unwrap().contains("exists already"),
            "{twice}"
        );
        let (status, _) =
            create(json!({"type": "quick", "locationPath": "ws", "allowDuplicate": true})).await;
        assert_eq!(status, 201, "a second session when it is meant");

        let (status, missing) = create(json!({"type": "quick", "locationPath": "nope"})).await;
        assert_eq!(
            (status, missing["code"].clone()),
            (400, json!("no_such_folder"))
        );
        assert!(
            missing["error"]
                .as_str()
                .unwrap()
                .contains(&root.path().join("nope").display().to_string()),
            "names where it looked: {missing}"
        );
        let (status, other_user) = create(json!({"type": "quick", "locationPath": "~bob/x"})).await;
        assert_eq!(
            (status, other_user["code"].clone()),
            (400, json!("bad_location"))
        );
        assert!(
            other_user["error"]
                .as_str()
                .unwrap()
                .contains("absolute path"),
            "{other_user}"
        );
    });
}

#[test]
fn serve_browser_new_session_errors_are_inline_and_a_duplicate_is_asked_about() {
    let Some((chromium, chromedriver)) = browser_or_skip(
        "serve_browser_new_session_errors_are_inline_and_a_duplicate_is_asked_about",
    ) else {
        return;
    };
    let root = Root::new();
    let server = Server::start_in(&root, &[], &[], root.path());
    runtime().block_on(async {
        let driver = Driver::start(&chromium, &chromedriver).await;
        driver.goto(&format!("{}/#token={}", server.base, server.token)).await;
        driver.until("the page without the token in its address", OPENED).await;
        // An `alert()` would make every later WebDriver command fail ("unexpected alert open").
        driver.type_into("#new-session-path", "does-not-exist").await;
        driver.click("#new-session").await;
        driver.until("the error beside the form", "const e = document.getElementById('new-session-error'); return !e.hidden && e.textContent.includes('does not exist')").await;
        driver.script("document.getElementById('new-session-path').value = ''; return true").await;
        driver.type_into("#new-session-path", "ws").await;
        driver.click("#new-session").await;
        driver.until("the session, the box emptied and the error gone", "return document.querySelectorAll('[data-session]').length === 1 && document.getElementById('new-session-path').value === '' && document.getElementById('new-session-error').hidden").await;
        driver.type_into("#new-session-path", "ws").await;
        driver.click("#new-session").await;
        driver.until("the question about the duplicate", "const e = document.getElementById('new-session-error'); return !e.hidden && e.textContent.includes('exists already') && !!document.getElementById('new-session-again')").await;
        driver.click("#new-session-again").await;
        driver.until("a second session on it", "return document.querySelectorAll('[data-session]').length === 2").await;
        driver.quit().await;
    });
}
