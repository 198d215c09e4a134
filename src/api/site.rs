//! The site's static files (`/pkg/…`: the browser bundle and its CSS; `/favicon.svg`): read
//! from `--site-root` when one is given, else those built into the binary (decision 0050). A
//! release binary carries the files `scripts/build.sh --release` made before compiling it, so
//! it runs from any directory; a development build reads the same files from the source tree's
//! `target/site` at each request.
//!
//! A release bundle holds each file also as `.br` and `.gz` (best ratio, made by
//! `scripts/build.sh --release`): a browser accepting one gets it as it is, with
//! `content-encoding`, and nothing is compressed per request.
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
                    ServeDir::new(root.join("pkg"))
                        .append_index_html_on_directories(false)
                        .precompressed_br()
                        .precompressed_gzip(),
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

/// The stored encodings a file may have, preferred first: (file name suffix, coding).
const STORED_ENCODINGS: [(&str, &str); 2] = [(".br", "br"), (".gz", "gzip")];

/// Whether `accept` (an `Accept-Encoding` value) allows `coding`: named, or `*`, with a
/// quality above zero (RFC 9110 12.5.3).
fn accepts(accept: &str, coding: &str) -> bool {
    let mut named = None;
    let mut any = None;
    for item in accept.split(',') {
        let mut parts = item.split(';');
        let name = parts.next().unwrap_or("").trim();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        if name.eq_ignore_ascii_case(coding) {
            named = Some(q > 0.0);
        } else if name == "*" {
            any = Some(q > 0.0);
        }
    }
    named.or(any).unwrap_or(false)
}

/// The stored variant of `path` to send to a client that sent `headers`: its key and coding,
/// or `None` for the file itself.
fn variant(
    path: &str,
    headers: &HeaderMap,
    stored: impl Fn(&str) -> bool,
) -> Option<(String, &'static str)> {
    let accept = headers.get(header::ACCEPT_ENCODING)?.to_str().ok()?;
    STORED_ENCODINGS.iter().find_map(|(suffix, coding)| {
        let key = format!("{path}{suffix}");
        (accepts(accept, coding) && stored(&key)).then_some((key, *coding))
    })
}

/// One embedded file, with its content type and an ETag from its hash: a browser revalidates
/// (`no-cache`, set for every answer) and gets 304 while the binary is the same. A stored
/// compressed variant the client accepts is sent instead, with its own ETag.
fn embedded(path: &str, headers: &HeaderMap) -> Response {
    // Keys are plain relative paths: `..`, `.` and empty segments name nothing.
    if path
        .split('/')
        .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return StatusCode::NOT_FOUND.into_response();
    }
    let Some(plain) = Embedded::get(path) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    // The type is the plain file's (a `.br` file's own would be a download).
    let content_type = HeaderValue::from_str(plain.metadata.mimetype())
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    let (file, coding) = variant(path, headers, |key| Embedded::get(key).is_some())
        .and_then(|(key, coding)| Some((Embedded::get(&key)?, Some(coding))))
        .unwrap_or((plain, None));
    let hash = file.metadata.sha256_hash();
    let etag = format!(
        "\"{}\"",
        hash.iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    let etag = HeaderValue::from_str(&etag).expect("hex is a header value");
    let has_variants = STORED_ENCODINGS
        .iter()
        .any(|(suffix, _)| Embedded::get(&format!("{path}{suffix}")).is_some());
    let mut out = HeaderMap::new();
    out.insert(header::ETAG, etag.clone());
    if has_variants {
        out.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    }
    if headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes())
    {
        return (StatusCode::NOT_MODIFIED, out).into_response();
    }
    out.insert(header::CONTENT_TYPE, content_type);
    if let Some(coding) = coding {
        out.insert(header::CONTENT_ENCODING, HeaderValue::from_static(coding));
    }
    // A release binary's files are static bytes: answered without a copy.
    let body = match file.data {
        std::borrow::Cow::Borrowed(bytes) => Body::from(bytes),
        std::borrow::Cow::Owned(bytes) => Body::from(bytes),
    };
    (out, body).into_response()
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
    fn an_accept_encoding_allows_a_coding_by_name_or_star_with_a_quality_above_zero() {
        assert!(accepts("gzip, deflate, br, zstd", "br"));
        assert!(accepts("gzip;q=0.5, br;q=1.0", "br"));
        assert!(accepts("BR", "br"));
        assert!(accepts("*", "gzip"));
        assert!(!accepts("br;q=0", "br"));
        assert!(!accepts("*;q=0.5, br;q=0", "br"));
        assert!(!accepts("gzip", "br"));
        assert!(!accepts("identity", "gzip"));
        assert!(!accepts("", "gzip"));
    }

    #[test]
    fn a_stored_variant_is_chosen_brotli_first_and_only_when_accepted_and_present() {
        let with = |accept: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                header::ACCEPT_ENCODING,
                HeaderValue::from_str(accept).unwrap(),
            );
            h
        };
        let both = |key: &str| key.ends_with(".br") || key.ends_with(".gz");
        let gz_only = |key: &str| key.ends_with(".gz");
        assert_eq!(
            variant("pkg/a.wasm", &with("gzip, br"), both),
            Some(("pkg/a.wasm.br".into(), "br"))
        );
        assert_eq!(
            variant("pkg/a.wasm", &with("gzip"), both),
            Some(("pkg/a.wasm.gz".into(), "gzip"))
        );
        assert_eq!(
            variant("pkg/a.wasm", &with("br, gzip"), gz_only),
            Some(("pkg/a.wasm.gz".into(), "gzip"))
        );
        assert_eq!(variant("pkg/a.wasm", &with("identity"), both), None);
        assert_eq!(variant("pkg/a.wasm", &HeaderMap::new(), both), None);
        assert_eq!(variant("pkg/a.wasm", &with("br"), |_| false), None);
    }

    #[test]
    fn a_site_root_names_a_directory_and_none_the_built_in_files() {
        assert!(matches!(SiteFiles::of(""), SiteFiles::Embedded));
        assert!(
            matches!(SiteFiles::of("/srv/site"), SiteFiles::Disk(p) if p == std::path::Path::new("/srv/site"))
        );
    }
}
