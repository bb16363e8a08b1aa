//! The runs & batches pages in a real browser (Chromium over WebDriver, as `browser.rs`), on
//! the batch fixture of `batch.rs`: the orchestration page (its stage graph, failed runs one
//! click away, paging), a run opened from the table shown in view, its address reloading to
//! the same view and the back button, a model call's request and reply, a tool call's
//! output, a sensitive answer that stays redacted, a stage not started yet, the batch
//! timeline, and the layout at 800 px. Screenshots of the orchestration page, the batch
//! timeline and the run inspector are saved, and copied into docs/ with
//! `DELTA_DOCS_SCREENSHOTS=1` (see docs/serve.md).

use super::batch::{url_encode, Batch, SECRET};
use super::browser::{browser_or_skip, OPENED};
use super::webdriver::Driver;
use super::{runtime, Root};

/// Where a test's screenshots go; docs/ too when asked.
fn screenshot_path(name: &str) -> Vec<std::path::PathBuf> {
    let mut paths = vec![std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("serve-browser")
        .join(name)];
    if std::env::var("DELTA_DOCS_SCREENSHOTS").as_deref() == Ok("1") {
        paths.push(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("docs")
                .join(name),
        );
    }
    paths
}

async fn screenshot(driver: &Driver, name: &str) {
    for path in screenshot_path(name) {
        driver.screenshot(&path).await;
    }
}

/// The element is inside the window (its top is on screen).
fn in_view(css: &str) -> String {
    format!(
        "const e = document.querySelector({css:?}); if (!e) return false; const r = e.getBoundingClientRect(); return r.height > 0 && r.top >= 0 && r.top < window.innerHeight;"
    )
}

#[test]
fn serve_browser_batch_orchestration_run_inspector_and_addresses() {
    let Some((chromium, chromedriver)) =
        browser_or_skip("serve_browser_batch_orchestration_run_inspector_and_addresses")
    else {
        return;
    };
    let batch = Batch::new();
    let root = Root::new();
    let server = batch.server(&root);
    let ws = url_encode(&batch.ws());
    let orchestration = format!("{}/#/runs/{ws}/o/{}", server.base, batch.watch);
    runtime().block_on(async {
        let driver = Driver::start(&chromium, &chromedriver).await;
        driver.window_size(1400, 1000).await;
        driver.goto(&format!("{}/#token={}", server.base, server.token)).await;
        driver.until("the page without the token in its address", OPENED).await;

        // From the list of batches to the orchestration page.
        driver.goto(&format!("{}/#/runs", server.base)).await;
        driver.click(&format!("[data-orchestration='{}'] a", batch.watch)).await;
        driver.until("the stage graph", "return !!document.querySelector('#stage-graph [data-stage=map]') && !!document.querySelector('#stage-graph [data-stage=combine]')").await;
        driver.until(
            "the map stage's counts",
            "const box = document.querySelector('#stage-graph [data-stage=map]'); return box.dataset.status === 'COMPLETED_WITH_FAILURES' && box.textContent.includes('148/150 done, 2 failed');",
        )
        .await;
        driver.until("a first page of 100 runs", "return document.querySelectorAll('#batch-runs-table tr[data-run]').length === 100 && document.getElementById('page-info').textContent.includes('1–100 of 151')").await;
        screenshot(&driver, "serve-orchestration.png").await;

        // Failed runs, one click away, with their error kind.
        driver.click("button[data-status=FAILED]").await;
        driver.until(
            "only the failed runs",
            "const rows = [...document.querySelectorAll('#batch-runs-table tr[data-run]')]; return rows.length === 2 && rows.every(r => r.dataset.status === 'FAILED' && r.textContent.includes('llm_error')) && location.hash.includes('status=FAILED');",
        )
        .await;
        driver.click("button[data-status=all]").await;
        driver.until("all runs again", "return document.querySelectorAll('#batch-runs-table tr[data-run]').length === 100").await;
        driver.click("#page-next").await;
        driver.until("the second page", "return document.getElementById('page-info').textContent.includes('101–151 of 151')").await;
        driver.click("#page-prev").await;

        // A run far down the table opens its inspector, in view.
        let run = batch.map_run(11);
        driver.script("document.getElementById('workspace-view').scrollTop = 1e6; return true").await;
        driver.click(&format!("tr[data-run='{run}'] a")).await;
        driver.until("the run's inspector", &format!("return location.hash.includes('/r/{run}') && document.getElementById('run-title') !== null")).await;
        driver.until("the inspector in view", &in_view("#run-title")).await;
        driver.until("the waterfall", "return document.querySelectorAll('#waterfall [data-span]').length === 3").await;

        // A model call: its request's messages and its reply.
        driver.click("#waterfall [data-span='call/1']").await;
        driver.until(
            "model call 1's request and reply",
            "const d = document.getElementById('call-detail'); return !d.hidden && d.querySelector('#request-messages [data-role=user]')?.textContent.includes('item 11.') && d.querySelector('#reply')?.textContent.includes('shout(')",
        )
        .await;
        driver.click("#waterfall [data-span='call/2']").await;
        driver.until("model call 2's reply", "return document.querySelector('#call-detail #reply')?.textContent.includes('done: item 11.')").await;
        driver.until("the call's details in view", &in_view("#detail-title")).await;
        screenshot(&driver, "serve-run-inspector.png").await;
        driver.click("#waterfall [data-span^='tool/']").await;
        driver.until(
            "the tool call's argv and output",
            "const d = document.getElementById('call-detail'); return d.querySelector('#tool-argv')?.textContent.includes('echo shouting from the tool') && d.querySelector('#tool-stdout')?.textContent.includes('shouting from the tool') && d.querySelector('#tool-stderr')?.textContent.includes('a warning')",
        )
        .await;

        // The address reloads to the same view, and the back button goes back.
        let address = driver.script("return location.hash").await;
        driver.refresh().await;
        driver.until("the same view after a reload", &format!("return location.hash === {address} && document.querySelector('#call-detail #tool-argv') !== null")).await;
        driver.back().await;
        driver.until("back to model call 2", "return location.hash.endsWith('/call/2') && document.querySelector('#call-detail #reply')?.textContent.includes('done: item 11.')").await;
        let tab = driver.new_tab().await;
        driver.switch_to(&tab).await;
        driver.goto(&format!("{}/#/runs/{ws}/r/{run}/call/1", server.base)).await;
        driver.until("the run's address in a new tab", "return document.querySelector('#call-detail #reply')?.textContent.includes('shout(')").await;

        // The batch timeline.
        driver.goto(&format!("{orchestration}/timeline")).await;
        driver.until("the batch timeline", "return window.deltaServe.timeline && window.deltaServe.timeline.drawn && window.deltaServe.timeline.bars === 151").await;
        screenshot(&driver, "serve-batch-timeline.png").await;
        // A bar's tooltip, then a zoom (issue 31 item 17: the tooltip stayed on screen, over
        // bars that had moved away, until the mouse moved again).
        // Near the top: the canvas is still under the mouse once zoomed (a canvas that shrinks
        // away from under it gets a mouseleave, which hid the tooltip even before).
        let half = driver.script("return Math.round(document.getElementById('batch-timeline').getBoundingClientRect().height / 2)").await;
        driver.hover("#batch-timeline", 0, 40 - half.as_i64().unwrap()).await;
        driver.until("the tooltip of the bar under the mouse", "const tip = document.querySelector('.tooltip'); return !tip.hidden && tip.textContent.includes('map')").await;
        driver.script("const s = document.getElementById('timeline-stage'); s.value = 'combine'; s.onchange(); return true").await;
        driver.until("zoomed to a stage", "return window.deltaServe.timeline.bars === 1 && window.deltaServe.timeline.phases && location.hash.includes('stage=combine')").await;
        assert_eq!(driver.script("return document.querySelector('.tooltip').hidden").await, true, "the tooltip stayed after the zoom");

        // A sensitive answer stays redacted.
        driver.goto(&format!("{}/#/runs/{ws}/r/asker", server.base)).await;
        driver.until("the redacted answer", "const a = document.querySelector('#run-entries [data-redacted=true]'); return !!a && a.textContent.startsWith('[REDACTED')").await;
        driver.click("#run-entries .entry.reply a.open").await;
        driver.until("a model call of that run", "return document.querySelector('#call-detail #request-messages') !== null").await;
        driver.goto(&format!("{}/#/runs/{ws}/r/asker/call/2", server.base)).await;
        driver.until("the call after the answer", "return document.querySelector('#call-detail #request-messages [data-role=tool]')?.textContent.includes('[REDACTED')").await;
        let text = driver.script("return document.documentElement.outerHTML").await;
        assert!(!text.as_str().unwrap().contains(SECRET), "the secret reached the page");

        // A batch that runs now: the stage that has not started is drawn, pending.
        let mut slow = batch.start_slow();
        driver.goto(&format!("{}/#/runs/{ws}/o/{}", server.base, slow.id)).await;
        driver.until("the pending stage", "const box = document.querySelector('#stage-graph [data-stage=combine]'); return !!box && box.dataset.status === 'PENDING'").await;
        driver.goto(&format!("{}/#/runs/{ws}/r/{}", server.base, slow.run(0))).await;
        driver.until("the reply streaming in", "const p = document.getElementById('partial-text'); return !!p && p.textContent.startsWith('word0 ')").await;
        let before = driver.script("return document.getElementById('partial-text').textContent.length").await;
        driver.until("the reply growing", &format!("return document.getElementById('partial-text').textContent.length > {before}")).await;
        slow.interrupt();
        driver.quit().await;
    });
}

/// Every status cell of the page's tables shows its whole status (at least one is there).
const STATUSES_WHOLE: &str = "const cells = [...document.querySelectorAll('table.data td')].filter(td => td.querySelector('span[class^=\"status-\"]')); return cells.length > 0 && cells.every(td => td.scrollWidth <= td.clientWidth + 1);";

/// The waterfall's texts: how many say `resumed`, and each text that leaves the picture or
/// overlaps another one.
const WATERFALL_TEXT_PROBLEMS: &str = "const svg = document.querySelector('#waterfall svg'); const box = svg.getBoundingClientRect(); \
    const texts = [...svg.querySelectorAll('text')].map(t => ({ text: t.textContent, r: t.getBoundingClientRect() })).filter(t => t.r.width > 0); \
    const problems = []; \
    for (const t of texts) if (t.r.left < box.left - 0.5 || t.r.right > box.right + 0.5) problems.push(t.text + ' leaves the picture'); \
    for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++) { const a = texts[i].r, b = texts[j].r; \
      if (a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5) problems.push(texts[i].text + ' overlaps ' + texts[j].text); } \
    return { resumed: texts.filter(t => t.text === 'resumed').length, problems };";

/// Regression (issue 27): at 800 px the sidebar stayed 280 px, buttons wrapped and the runs
/// table scrolled sideways; the sidebar could not be folded.
#[test]
fn serve_browser_the_800px_layout_has_no_horizontal_scroll() {
    let Some((chromium, chromedriver)) =
        browser_or_skip("serve_browser_the_800px_layout_has_no_horizontal_scroll")
    else {
        return;
    };
    let batch = Batch::new();
    let root = Root::new();
    let server = batch.server(&root);
    let ws = url_encode(&batch.ws());
    runtime().block_on(async {
        let driver = Driver::start(&chromium, &chromedriver).await;
        driver.window_size(800, 700).await;
        driver.goto(&format!("{}/#token={}", server.base, server.token)).await;
        driver.until("the page without the token in its address", OPENED).await;
        assert_eq!(driver.script("return window.innerWidth <= 800").await, true);
        let no_sideways = "const view = document.getElementById('workspace-view'); const table = document.querySelector(TABLE); return !!table && table.scrollWidth <= table.clientWidth + 1 && view.scrollWidth <= view.clientWidth + 1 && document.documentElement.scrollWidth <= window.innerWidth;";
        for (page, table) in [
            (format!("#/runs/{ws}/o/{}", batch.watch), "#batch-runs-table"),
            (format!("#/runs/{ws}"), "table.runs"),
        ] {
            driver.goto(&format!("{}/{page}", server.base)).await;
            driver.until(&format!("{table} without sideways scrolling"), &no_sideways.replace("TABLE", &format!("{table:?}"))).await;
            // Issue 31 item 17: statuses were cut ("COMPLETED WITH FA…"); they wrap instead.
            driver.until(&format!("{table}'s statuses whole"), STATUSES_WHOLE).await;
            driver
                .screenshot(&std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-browser").join(format!("800px-{}.png", table.trim_start_matches(['#', '.']))))
                .await;
        }
        // Folded by default at this width; it opens and folds again from the keyboard-reachable button.
        assert_eq!(driver.script("return getComputedStyle(document.getElementById('sidebar')).display").await, "none");
        driver.click("#toggle-sidebar").await;
        driver.until("the sidebar open", "return getComputedStyle(document.getElementById('sidebar')).display !== 'none'").await;
        driver.until("still no sideways scroll", &no_sideways.replace("TABLE", "\"table.runs\"")).await;
        driver.click("#toggle-sidebar").await;
        driver.until("the sidebar folded", "return getComputedStyle(document.getElementById('sidebar')).display === 'none'").await;
        driver.goto(&format!("{}/#/runs/{ws}/r/{}", server.base, batch.map_run(11))).await;
        driver.until("the inspector without sideways scrolling", "const v = document.getElementById('workspace-view'); return document.querySelectorAll('#waterfall [data-span]').length === 3 && v.scrollWidth <= v.clientWidth + 1").await;
        // Issue 31 item 17: the "resumed" label ran into the axis's total and out of the picture.
        driver.goto(&format!("{}/#/runs/{ws}/r/asker", server.base)).await;
        driver.until("the resumed run's waterfall", "return document.querySelectorAll('#waterfall [data-span]').length === 3").await;
        let labels = driver.script(WATERFALL_TEXT_PROBLEMS).await;
        assert_eq!(labels["resumed"], 1, "one resumed label: {labels}");
        assert_eq!(labels["problems"], serde_json::json!([]), "{labels}");
        driver.quit().await;
    });
}
