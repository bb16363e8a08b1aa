//! The page against hostile neighbours, in a real browser (Chromium over WebDriver, as
//! `browser.rs`): a page on another 127.0.0.1 port that frames it, a program that takes its
//! port once `delta serve` stopped while a tab is still open, and a `/#token=` link that
//! would replace the token the browser keeps (issue 31 items 1, 2 and 8).

use serde_json::json;

use super::browser::{browser_or_skip, OtherLocalServer, OPENED};
use super::webdriver::Driver;
use super::{runtime, Root, Server};

/// The token as the page offers it on a WebSocket (`delta.token.<hex>`).
fn hex(token: &str) -> String {
    token.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Regression (issue 31 item 1): a page served from another 127.0.0.1 port framed `delta
/// serve`; being the same site, the frame shared the tab's `localStorage`, was logged in, and
/// what the user typed on the framing page reached a worker's shell. The browser now refuses
/// to render serve in any frame, while the framing server's own frame renders.
#[test]
fn serve_browser_a_page_on_another_local_port_cannot_frame_the_page() {
    let Some((chromium, chromedriver)) =
        browser_or_skip("serve_browser_a_page_on_another_local_port_cannot_frame_the_page")
    else {
        return;
    };
    let root = Root::new();
    let server = Server::start(&root);
    let framing = format!(
        "<!doctype html><title>framing</title>\
         <iframe id=serve src=\"{}/\" width=900 height=500></iframe>\
         <iframe id=control src=\"/control\" width=300 height=100></iframe>",
        server.base
    );
    let framer = OtherLocalServer::start_on("127.0.0.1:0", framing);
    runtime().block_on(async {
        let driver = Driver::start(&chromium, &chromedriver).await;
        // Logged in first: a frame that rendered would find the token.
        driver.goto(&format!("{}/#token={}", server.base, server.token)).await;
        driver.until("the page without the token in its address", OPENED).await;
        driver.goto(&format!("{}/", framer.url)).await;
        driver.until("both frames loaded", "return document.querySelectorAll('iframe').length === 2 && document.readyState === 'complete'").await;
        // The way of looking works: the framing server's own frame is read.
        driver.switch_to_frame("#control").await;
        driver.until("the control frame rendered", "return document.getElementById('control-ok') !== null").await;
        driver.switch_to_parent_frame().await;
        driver.switch_to_frame("#serve").await;
        let inside = driver
            .script("return {serve: !!document.getElementById('new-session-path') || !!window.deltaServe, url: location.href, text: (document.body ? document.body.innerText : '').slice(0, 200)}")
            .await;
        assert_eq!(inside["serve"], json!(false), "serve rendered in a frame: {inside}");
        driver.switch_to_parent_frame().await;
        driver.quit().await;
    });
}

/// Regression (issue 31 item 2): after `delta serve` stopped, an open tab kept reconnecting
/// and sent its token to whatever took the port next (13 of 13 tries, REST and WebSocket).
/// The tab now checks, without the token, that the server is the one it logged in to: the
/// program on the port only ever sees that check (no token, raw or hex), and the page says
/// the server changed; an action taken afterwards sends nothing either.
#[test]
fn serve_browser_an_open_tab_never_sends_its_token_to_a_program_that_took_the_port() {
    let Some((chromium, chromedriver)) = browser_or_skip(
        "serve_browser_an_open_tab_never_sends_its_token_to_a_program_that_took_the_port",
    ) else {
        return;
    };
    let root = Root::new();
    let mut server = Server::start(&root);
    let address = server.base.trim_start_matches("http://").to_string();
    runtime().block_on(async {
        let session = server.session(&root).await;
        let worker = server.worker(&session, json!({"type": "terminal"})).await;
        let worker = worker["id"].as_str().unwrap().to_string();
        let driver = Driver::start(&chromium, &chromedriver).await;
        driver.goto(&format!("{}/#token={}", server.base, server.token)).await;
        driver.until("the page without the token in its address", OPENED).await;
        driver.goto(&format!("{}/#/session/{session}/worker/{worker}", server.base)).await;
        driver.until("the terminal attached", "return document.getElementById('terminal-status').textContent === 'attached' && document.getElementById('connection').textContent === 'live'").await;

        server.kill9();
        let squatter = OtherLocalServer::start_on(&address, super::browser::OTHER_PAGE.to_string());
        let leaked = |heads: &[String]| {
            heads.iter().find(|head| {
                let lower = head.to_ascii_lowercase();
                head.contains(&server.token)
                    || head.contains(&hex(&server.token))
                    || lower.contains("authorization")
                    || lower.contains("delta.token.")
            }).cloned()
        };
        // Until the page gives up on the address, or the token reaches the squatter.
        let changed = "return document.getElementById('connection').textContent === 'server changed' && !document.getElementById('token-problem').hidden";
        super::eventually("the page to say the server changed, or to send the token", || async {
            leaked(&squatter.heads()).is_some() || driver.script(changed).await == json!(true)
        })
        .await;
        assert_eq!(leaked(&squatter.heads()), None, "the token reached the program on the port");
        // A click that would call the API (REST) after that: nothing goes out.
        driver.click("#add-terminal").await;
        driver.until("the action refused on the page", "return document.getElementById('terminal-status').textContent.startsWith('not sent')").await;

        let heads = squatter.heads();
        assert_eq!(leaked(&heads), None, "the token reached the program on the port");
        assert!(
            heads.iter().any(|head| head.starts_with("GET /api/identity/check ")),
            "the page checked the server: {heads:?}"
        );
        driver.quit().await;
    });
}

/// Regression (issue 31 item 8): any site could link to `/#token=x` and the page stored `x`
/// over the working token, breaking every open tab. A token from a link is now kept only when
/// the server confirms it; an unconfirmed one is said and dropped, and the tabs go on.
#[test]
fn serve_browser_a_token_link_is_kept_only_when_the_server_confirms_it() {
    let Some((chromium, chromedriver)) =
        browser_or_skip("serve_browser_a_token_link_is_kept_only_when_the_server_confirms_it")
    else {
        return;
    };
    let root = Root::new();
    let server = Server::start(&root);
    let stored = "return localStorage.getItem('delta-serve-token')";
    // Calls the API the way the page does; the outcome lands in `window.outcome`.
    let call_api = "window.outcome = null; window.deltaServe.api('GET', '/api/agents').then(() => { window.outcome = 'ok'; }, (e) => { window.outcome = e.message; }); return true";
    runtime().block_on(async {
        let driver = Driver::start(&chromium, &chromedriver).await;
        driver.goto(&format!("{}/#token={}", server.base, server.token)).await;
        driver.until("the page without the token in its address", OPENED).await;
        assert_eq!(driver.script(stored).await, json!(server.token));

        // Another tab follows a planted link.
        let first = driver.window_handle().await;
        let tab = driver.new_tab().await;
        driver.switch_to(&tab).await;
        driver.goto(&format!("{}/#token=planted-by-another-site", server.base)).await;
        driver.until(
            "the link refused and the page still live",
            "const n = document.getElementById('token-notice'); return !n.hidden && n.textContent.includes('refused') && document.getElementById('connection').textContent === 'live' && !location.hash.includes('token')",
        )
        .await;
        assert_eq!(driver.script(stored).await, json!(server.token), "the planted token replaced the working one");
        driver.script(call_api).await;
        driver.until("the API answering this tab", "return window.outcome === 'ok'").await;
        // The first tab goes on too.
        driver.switch_to(&first).await;
        driver.script(call_api).await;
        driver.until("the API answering the first tab", "return window.outcome === 'ok' && document.getElementById('token-problem').hidden").await;

        // A browser without a token: the planted one is not kept either.
        driver.script("localStorage.clear(); return true").await;
        driver.goto(&format!("{}/#token=planted-again", server.base)).await;
        driver.refresh().await;
        driver.until(
            "the token problem said",
            "const box = document.getElementById('token-problem'); return !box.hidden && box.textContent.includes('Open the URL that `delta serve` printed')",
        )
        .await;
        assert_eq!(driver.script(stored).await, json!(null));
        // The printed URL, confirmed by the server, is kept.
        driver.goto(&format!("{}/#token={}", server.base, server.token)).await;
        driver.refresh().await;
        driver.until("the page live with the printed URL's token", OPENED).await;
        assert_eq!(driver.script(stored).await, json!(server.token));
        driver.quit().await;
    });
}
