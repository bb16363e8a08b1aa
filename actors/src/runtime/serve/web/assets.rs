//! The page, embedded in the binary (`include_bytes!`), so `delta serve` needs nothing else
//! at run time: `/` is `index.html`, `/assets/...` its ES modules (`main.js`, the one script
//! `index.html` loads as a module, imports the others), its style and the vendored xterm.js
//! files (see `scripts/update-xterm.sh`; classic scripts loaded before the modules).
//!
//! Must not: serve a file that is not in `FILES` (no path from a request reaches the disk);
//! leave a page module out of `FILES` (the test below reads the folder and every import).

use actix_web::http::header;
use actix_web::{web, HttpResponse};

use super::rest::not_found;

const JAVASCRIPT: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

/// One entry of `FILES`: the file `$name` of `actors/assets/serve/`, served as `$type`.
macro_rules! page_file {
    ($name:literal, $type:expr) => {
        (
            $name,
            $type,
            include_bytes!(concat!("../../../../assets/serve/", $name)),
        )
    };
}

/// Every file under `/assets/`: name, content type, bytes.
const FILES: &[(&str, &str, &[u8])] = &[
    page_file!("main.js", JAVASCRIPT),
    page_file!("app.js", JAVASCRIPT),
    page_file!("address.js", JAVASCRIPT),
    page_file!("api.js", JAVASCRIPT),
    page_file!("batch.js", JAVASCRIPT),
    page_file!("dashboard.js", JAVASCRIPT),
    page_file!("dom.js", JAVASCRIPT),
    page_file!("format.js", JAVASCRIPT),
    page_file!("geometry.js", JAVASCRIPT),
    page_file!("inspector.js", JAVASCRIPT),
    page_file!("poll.js", JAVASCRIPT),
    page_file!("router.js", JAVASCRIPT),
    page_file!("runs.js", JAVASCRIPT),
    page_file!("sessions.js", JAVASCRIPT),
    page_file!("state.js", JAVASCRIPT),
    page_file!("terminal.js", JAVASCRIPT),
    page_file!("timeline.js", JAVASCRIPT),
    page_file!("token.js", JAVASCRIPT),
    page_file!("app.css", CSS),
    page_file!("vendor/xterm.js", JAVASCRIPT),
    page_file!("vendor/xterm.css", CSS),
    page_file!("vendor/addon-fit.js", JAVASCRIPT),
    page_file!("vendor/LICENSE.xterm", TEXT),
    page_file!("vendor/LICENSE.addon-fit", TEXT),
];

const INDEX: &[u8] = include_bytes!("../../../../assets/serve/index.html");

pub async fn index() -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/html; charset=utf-8"))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .body(INDEX)
}

pub async fn asset(request: actix_web::HttpRequest, path: web::Path<String>) -> HttpResponse {
    let name = path.into_inner();
    match FILES.iter().find(|(file, _, _)| *file == name) {
        Some((_, content_type, bytes)) => HttpResponse::Ok()
            .insert_header((header::CONTENT_TYPE, *content_type))
            .insert_header((header::CACHE_CONTROL, "no-cache"))
            .body(*bytes),
        None => not_found(request).await,
    }
}

/// The page's own scripts (its modules, not the vendored files), for the policy's scan.
#[cfg(test)]
pub(super) fn page_modules() -> impl Iterator<Item = (&'static str, &'static [u8])> {
    FILES
        .iter()
        .filter(|(name, _, _)| name.ends_with(".js") && !name.starts_with("vendor/"))
        .map(|(name, _, bytes)| (*name, *bytes))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn embedded(name: &str) -> Option<&'static [u8]> {
        FILES
            .iter()
            .find(|(file, _, _)| *file == name)
            .map(|(_, _, bytes)| *bytes)
    }

    /// A module added to the folder but not to `FILES` would answer 404 to the page's import,
    /// and the page would not start: every script and style of the folder is embedded.
    #[test]
    fn every_script_and_style_of_the_page_folder_is_embedded() {
        let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/serve");
        let mut seen = 0;
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_owned();
            if !(name.ends_with(".js") || name.ends_with(".css")) {
                continue;
            }
            let bytes = embedded(&name).unwrap_or_else(|| {
                panic!("actors/assets/serve/{name} is not in assets.rs's FILES: add it")
            });
            assert_eq!(bytes, std::fs::read(&path).unwrap(), "{name}");
            seen += 1;
        }
        assert!(
            seen >= 3,
            "only {seen} scripts and styles in {}",
            folder.display()
        );
    }

    /// Every `import … from "./x.js"` of a module, and every script and style `index.html`
    /// names, is a file the server answers.
    #[test]
    fn every_file_the_page_loads_is_embedded() {
        for (module, bytes) in page_modules() {
            let text = std::str::from_utf8(bytes).unwrap();
            for line in text.lines().filter(|l| l.starts_with("import ")) {
                let target = line
                    .split("from \"./")
                    .nth(1)
                    .and_then(|rest| rest.split('"').next())
                    .unwrap_or_else(|| panic!("{module}: an import not from \"./…\": {line}"));
                assert!(
                    embedded(target).is_some(),
                    "{module} imports {target}, not embedded"
                );
            }
        }
        let index = std::str::from_utf8(INDEX).unwrap();
        let loaded: Vec<&str> = index
            .split("=\"/assets/")
            .skip(1)
            .map(|rest| rest.split('"').next().unwrap())
            .collect();
        for file in &loaded {
            assert!(
                embedded(file).is_some(),
                "index.html loads {file}, not embedded"
            );
        }
        assert!(
            loaded.contains(&"main.js"),
            "index.html does not load main.js"
        );
        assert_eq!(
            index.matches("<script type=\"module\"").count(),
            1,
            "index.html loads one module, the entry main.js"
        );
        assert!(index.contains("<script type=\"module\" src=\"/assets/main.js\"></script>"));
    }
}
