//! The page, embedded in the binary (`include_bytes!`), so `delta serve` needs nothing else
//! at run time: `/` is `index.html`, `/assets/...` the scripts, style and the vendored
//! xterm.js files (see `scripts/update-xterm.sh`).

use actix_web::http::header;
use actix_web::{web, HttpResponse};

use super::rest::not_found;

const FILES: &[(&str, &str, &[u8])] = &[
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../../assets/serve/app.js"),
    ),
    (
        "batch.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../../assets/serve/batch.js"),
    ),
    (
        "inspector.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../../assets/serve/inspector.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_bytes!("../../../../assets/serve/app.css"),
    ),
    (
        "vendor/xterm.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../../assets/serve/vendor/xterm.js"),
    ),
    (
        "vendor/xterm.css",
        "text/css; charset=utf-8",
        include_bytes!("../../../../assets/serve/vendor/xterm.css"),
    ),
    (
        "vendor/addon-fit.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../../assets/serve/vendor/addon-fit.js"),
    ),
    (
        "vendor/LICENSE.xterm",
        "text/plain; charset=utf-8",
        include_bytes!("../../../../assets/serve/vendor/LICENSE.xterm"),
    ),
    (
        "vendor/LICENSE.addon-fit",
        "text/plain; charset=utf-8",
        include_bytes!("../../../../assets/serve/vendor/LICENSE.addon-fit"),
    ),
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
