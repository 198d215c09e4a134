//! The site's static files (`/pkg/…`: the browser bundle and its CSS; `/favicon.svg`): read
//! from `--site-root` when one is given, else those built into the binary (decision 0050). A
//! release binary carries the files `scripts/build.sh --release` made before compiling it, so
//! it runs from any directory; a development build reads the same files from the source tree's
//! `target/site` at each request.
//!
//! Anything not held (a missing file, a directory, an encoded `..`) is a plain 404, never a
//! rendered page.

use std::path::PathBuf;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use tower_http::services::{ServeDir, ServeFile};

/// Where the static files come from.
#[derive(Clone, Debug)]
pub enum SiteFiles {
    /// A directory holding `pkg/` and `favicon.svg` (`--site-root`).
    Disk(PathBuf),
    /// The files built into the binary.
    Embedded,
}

/// The files `scripts/build.sh` put into `target/site` when this binary was compiled. A build
/// without them compiles too; it then serves no bundle and says so at start-up.
#[derive(rust_embed::Embed)]
#[folder = "target/site/"]
#[include = "pkg/*"]
#[include = "favicon.svg"]
#[allow_missing = true]
struct Embedded;

impl SiteFiles {
    /// The files of a server whose Leptos options name `site_root`: that directory, or the
    /// embedded files when it is empty (no `--site-root` given).
    pub fn of(site_root: &str) -> SiteFiles {
        if site_root.is_empty() {
            SiteFiles::Embedded
        } else {
            SiteFiles::Disk(PathBuf::from(site_root))
        }
    }

    /// Whether the browser bundle's entry module is there (a page without it has no script).
    pub fn has_bundle(&self, output_name: &str) -> bool {
        let entry = format!("pkg/{output_name}.js");
        match self {
            SiteFiles::Disk(root) => root.join(&entry).is_file(),
            SiteFiles::Embedded => Embedded::get(&entry).is_some(),
        }
    }

    /// The routes serving `/pkg/…` and `/favicon.svg`.
    pub fn routes<S: Clone + Send + Sync + 'static>(&self) -> Router<S> {
        match self {
            SiteFiles::Disk(root) => Router::new()
                .nest_service(
                    "/pkg",
                    ServeDir::new(root.join("pkg")).append_index_html_on_directories(false),
                )
                .route_service("/favicon.svg", ServeFile::new(root.join("favicon.svg"))),
            SiteFiles::Embedded => Router::new()
                .nest_service(
                    "/pkg",
                    Router::new().fallback(|uri: Uri, headers: HeaderMap| async move {
                        embedded(&format!("pkg{}", uri.path()), &headers)
                    }),
                )
                .route(
                    "/favicon.svg",
                    axum::routing::get(|headers: HeaderMap| async move {
                        embedded("favicon.svg", &headers)
                    }),
                ),
        }
    }
}

/// One embedded file, with its content type and an ETag from its hash: a browser revalidates
/// (`no-cache`, set for every answer) and gets 304 while the binary is the same.
fn embedded(path: &str, headers: &HeaderMap) -> Response {
    // Keys are plain relative paths: `..`, `.` and empty segments name nothing.
    if path
        .split('/')
        .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return StatusCode::NOT_FOUND.into_response();
    }
    let Some(file) = Embedded::get(path) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let hash = file.metadata.sha256_hash();
    let etag = format!(
        "\"{}\"",
        hash.iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    let etag = HeaderValue::from_str(&etag).expect("hex is a header value");
    if headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes())
    {
        return (StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response();
    }
    let content_type = HeaderValue::from_str(file.metadata.mimetype())
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    // A release binary's files are static bytes: answered without a copy.
    let body = match file.data {
        std::borrow::Cow::Borrowed(bytes) => Body::from(bytes),
        std::borrow::Cow::Owned(bytes) => Body::from(bytes),
    };
    (
        [(header::CONTENT_TYPE, content_type), (header::ETAG, etag)],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_with_a_dot_segment_or_an_empty_one_is_a_plain_404() {
        for path in [
            "pkg/../Cargo.toml",
            "pkg/./x.js",
            "pkg//x.js",
            "pkg/",
            "../x",
        ] {
            let r = embedded(path, &HeaderMap::new());
            assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
            assert!(
                r.headers().get(header::CONTENT_TYPE).is_none(),
                "{path}: no page"
            );
        }
    }

    #[test]
    fn a_site_root_names_a_directory_and_none_the_built_in_files() {
        assert!(matches!(SiteFiles::of(""), SiteFiles::Embedded));
        assert!(
            matches!(SiteFiles::of("/srv/site"), SiteFiles::Disk(p) if p == std::path::Path::new("/srv/site"))
        );
    }
}
