//! The headers every answer of `delta serve` carries (the page, its assets, the API, the
//! refusals and the WebSocket upgrades alike): no other site may frame the page, and the
//! page runs no script but its own files.
//!
//! Why framing matters: every server on 127.0.0.1 is the same *site* as this one whatever its
//! port, so a page framed by one of them shares this page's `localStorage` and is logged
//! in; keystrokes typed on the framing page then reached a worker's shell. `frame-ancestors
//! 'none'` (and `X-Frame-Options: DENY` for older browsers) refuses every frame.
//!
//! Why `script-src 'self'`: the page has no inline script, no `on...=` attribute and no
//! `eval`, so an injected `<script>` or handler (a future XSS) does not run; the test below
//! keeps `index.html` that way. Styles allow `'unsafe-inline'` because xterm.js writes its own
//! `<style>` elements and `style` attributes; a style cannot run code.
//!
//! Must not: relax `script-src` or `frame-ancestors` for a feature; load anything from
//! another origin (`'self'` covers this server's own WebSockets).

use actix_web::middleware::DefaultHeaders;

/// The page's Content-Security-Policy.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self'; \
     connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// The headers added to every answer (a handler's own header of the same name wins).
pub fn security_headers() -> DefaultHeaders {
    DefaultHeaders::new()
        .add(("Content-Security-Policy", CONTENT_SECURITY_POLICY))
        .add(("X-Frame-Options", "DENY"))
        .add(("X-Content-Type-Options", "nosniff"))
        .add(("Referrer-Policy", "no-referrer"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::super::assets::page_modules;
    use super::*;

    const INDEX: &str = include_str!("../../../../assets/serve/index.html");

    /// The directive `name` of the policy, without its name.
    fn directive(name: &str) -> &'static str {
        CONTENT_SECURITY_POLICY
            .split(';')
            .map(str::trim)
            .find_map(|d| d.strip_prefix(name).map(str::trim))
            .unwrap_or_else(|| panic!("no {name} in the policy"))
    }

    #[test]
    fn the_policy_refuses_frames_and_any_script_but_the_pages_own_files() {
        assert_eq!(directive("frame-ancestors"), "'none'");
        assert_eq!(directive("script-src"), "'self'");
        assert_eq!(directive("default-src"), "'none'");
        assert_eq!(directive("base-uri"), "'none'");
        assert_eq!(directive("connect-src"), "'self'");
    }

    /// `script-src 'self'` would refuse an inline script or handler of the page itself: the
    /// page has none, and must keep having none.
    #[test]
    fn the_page_has_no_inline_script_nor_handler_attribute() {
        let lower = INDEX.to_ascii_lowercase();
        let mut rest = lower.as_str();
        let mut scripts = 0;
        while let Some(at) = rest.find("<script") {
            let tag = &rest[at..at + rest[at..].find('>').expect("a closed <script> tag")];
            assert!(tag.contains(" src=\"/assets/"), "an inline script: {tag}");
            let after = &rest[at + tag.len() + 1..];
            assert!(
                after.starts_with("</script>"),
                "a script element with a body: {tag}"
            );
            scripts += 1;
            rest = after;
        }
        assert_eq!(
            scripts, 3,
            "the two vendored scripts and the page's module entry"
        );
        for (position, _) in lower.match_indices(" on") {
            let name: String = lower[position + 1..]
                .chars()
                .take_while(|c| c.is_ascii_alphabetic())
                .collect();
            let next = lower[position + 1 + name.len()..].chars().next();
            assert!(
                next != Some('='),
                "an inline handler attribute `{name}=` in index.html"
            );
        }
        assert!(!lower.contains("javascript:"), "a javascript: URL");
        // Nor do the scripts build code from text, or HTML from text (the way a future XSS
        // would come in): every node is made with createElement and textContent. Every module
        // the page serves is scanned (assets.rs's FILES, which a test keeps complete).
        let mut modules = 0;
        for (file, bytes) in page_modules() {
            let text = std::str::from_utf8(bytes).unwrap();
            modules += 1;
            for forbidden in [
                "eval(",
                "new Function",
                "javascript:",
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
            ] {
                assert!(!text.contains(forbidden), "{file} uses {forbidden}");
            }
        }
        assert!(modules > 1, "the page's modules were not found in FILES");
    }
}
