//! The web console at `/console/`: a few static files, compiled into the service, that
//! call the public API from the browser with the key the user signs in with. Nothing is
//! fetched from elsewhere at run time, and the pages need no key to load: what they show
//! comes from the API, which asks for one.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

/// The console's files: name, content type, content.
const FILES: [(&str, &str, &[u8]); 16] = [
    ("index.html", "text/html; charset=utf-8", include_bytes!("../console/index.html")),
    ("style.css", "text/css; charset=utf-8", include_bytes!("../console/style.css")),
    ("app.js", "text/javascript; charset=utf-8", include_bytes!("../console/app.js")),
    ("api.js", "text/javascript; charset=utf-8", include_bytes!("../console/api.js")),
    ("dom.js", "text/javascript; charset=utf-8", include_bytes!("../console/dom.js")),
    ("session.js", "text/javascript; charset=utf-8", include_bytes!("../console/session.js")),
    ("schedule.js", "text/javascript; charset=utf-8", include_bytes!("../console/schedule.js")),
    ("timers.js", "text/javascript; charset=utf-8", include_bytes!("../console/timers.js")),
    ("timer.js", "text/javascript; charset=utf-8", include_bytes!("../console/timer.js")),
    ("form.js", "text/javascript; charset=utf-8", include_bytes!("../console/form.js")),
    ("confirm.js", "text/javascript; charset=utf-8", include_bytes!("../console/confirm.js")),
    ("dead.js", "text/javascript; charset=utf-8", include_bytes!("../console/dead.js")),
    ("namespaces.js", "text/javascript; charset=utf-8", include_bytes!("../console/namespaces.js")),
    ("runs.js", "text/javascript; charset=utf-8", include_bytes!("../console/runs.js")),
    ("audit.js", "text/javascript; charset=utf-8", include_bytes!("../console/audit.js")),
    ("live.js", "text/javascript; charset=utf-8", include_bytes!("../console/live.js")),
];

/// Scripts, styles and requests from this service only; no framing (clickjacking), no
/// plugins. The key is a bearer token in the page, so no script from elsewhere may run.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                      connect-src 'self'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'";

pub fn router() -> Router {
    Router::new()
        // Relative, so that it holds behind a path prefix.
        .route("/console", get(|| async { Redirect::permanent("console/") }))
        .route("/console/", get(|| async { file("index.html") }))
        .route("/console/{name}", get(|Path(name): Path<String>| async move { file(&name) }))
}

fn file(name: &str) -> Response {
    let Some((_, content_type, body)) = FILES.iter().find(|(n, _, _)| *n == name) else {
        return (StatusCode::NOT_FOUND, "not a file of the console").into_response();
    };
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    // Served with the binary: a new build is a new console, checked on every load.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file of services/admin/console/ is served, and nothing else.
    #[test]
    fn the_console_folder_is_what_is_served() {
        let folder = concat!(env!("CARGO_MANIFEST_DIR"), "/console");
        let mut on_disk: Vec<String> =
            std::fs::read_dir(folder).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        let mut served: Vec<String> = FILES.iter().map(|(n, _, _)| (*n).to_owned()).collect();
        on_disk.sort();
        served.sort();
        assert_eq!(on_disk, served);
    }

    /// Every file the page loads is served: the shell names them, and each module the
    /// scripts import is one of them.
    #[test]
    fn every_file_the_console_loads_is_served() {
        let served: Vec<&str> = FILES.iter().map(|(n, _, _)| *n).collect();
        let index = std::str::from_utf8(FILES[0].2).unwrap();
        for linked in ["style.css", "app.js"] {
            assert!(index.contains(&format!("\"{linked}\"")) && served.contains(&linked), "{linked}");
        }
        for (_, _, body) in FILES.iter().filter(|(n, _, _)| n.ends_with(".js")) {
            let text = std::str::from_utf8(body).unwrap();
            for import in text.lines().filter_map(|l| l.split("from \"./").nth(1)) {
                let module = import.split('"').next().unwrap();
                assert!(served.contains(&module), "{module} is imported but not served");
            }
        }
    }
}
