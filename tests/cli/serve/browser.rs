//! The page in a real browser (Debian's `chromium` + `chromedriver` over WebDriver): open it
//! with the token, create a session and a terminal worker, type a command and see its output,
//! reload and still see it, open the runs view of a workspace with a finished example
//! orchestration and see its stages and a run's timeline, and save screenshots. Without chromium the test fails
//! loudly, unless DELTA_SKIP_BROWSER=1 says to skip it (it then prints SKIPPED).

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

#[test]
fn serve_browser_terminal_reload_and_runs_view() {
    let Some((chromium, chromedriver)) = browser() else {
        eprintln!("\n!!!!!!!!!! SKIPPED serve_browser_terminal_reload_and_runs_view: chromium or chromedriver is not installed (apt-get install chromium chromium-driver) !!!!!!!!!!\n");
        assert_eq!(
            std::env::var("DELTA_SKIP_BROWSER").as_deref(),
            Ok("1"),
            "the browser test needs chromium and chromedriver; set DELTA_SKIP_BROWSER=1 to skip it knowingly"
        );
        return;
    };
    let root = Root::new();
    finished_example_orchestration(&root.workspace());
    let server = Server::start(&root);
    runtime().block_on(async {
        let driver = Driver::start(&chromium, &chromedriver).await;
        driver.goto(&format!("{}/?token={}", server.base, server.token)).await;
        driver.until("the redirect without the token", "return location.search === '' && document.getElementById('connection').textContent === 'live'").await;

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
        driver.until(
            "the example orchestration's stages",
            "const stages = [...document.querySelectorAll('[data-stage]')].map(s => s.dataset.stage + ':' + s.textContent);\
             return stages.some(s => s.startsWith('map:') && s.includes('COMPLETED')) && stages.some(s => s.startsWith('reduce:') && s.includes('COMPLETED'));",
        )
        .await;
        driver.screenshot(&shot.join("runs.png")).await;
        driver.click("tr.clickable").await;
        driver.until(
            "a run's timeline",
            "const entries = [...document.querySelectorAll('#timeline .entry')].map(e => e.className + ':' + e.textContent);\
             return entries.some(e => e.includes('start') && e.includes('Run started')) && entries.some(e => e.includes('end') && e.includes('COMPLETED'));",
        )
        .await;
        driver.screenshot(&shot.join("timeline.png")).await;
        eprintln!("screenshots in {}", shot.display());
        driver.quit().await;
    });
}
