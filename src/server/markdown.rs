//! Agent text as Markdown (pulldown-cmark), rendered to HTML on the server and sanitized with
//! ammonia before it reaches a browser: no script, no event handler, no `javascript:` link
//! executes; links open in a new tab with `rel="noopener noreferrer"`. The browser inserts the
//! result as HTML only because it comes from here.

use std::collections::HashSet;
use std::sync::LazyLock;

use pulldown_cmark::{Options, Parser, html};

static SANITIZER: LazyLock<ammonia::Builder<'static>> = LazyLock::new(|| {
    let mut b = ammonia::Builder::default();
    b.link_rel(Some("noopener noreferrer"))
        .url_schemes(HashSet::from(["http", "https", "mailto"]))
        .set_tag_attribute_value("a", "target", "_blank")
        .rm_tags(["img"]);
    b
});

/// Sanitized HTML for `text` written in Markdown (tables, strikethrough, task lists).
pub fn render(text: &str) -> String {
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    html::push_html(&mut out, Parser::new_ext(text, options));
    SANITIZER.clean(&out).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_becomes_html() {
        let h = render("## Plan\n\n**one** and `two`\n\n- a\n- b\n\n```rust\nfn x() {}\n```");
        assert!(h.contains("<h2>Plan</h2>"), "{h}");
        assert!(h.contains("<strong>one</strong>"));
        assert!(h.contains("<code>two</code>"));
        assert!(h.contains("<li>a</li>"));
        assert!(h.contains("<pre><code"));
    }

    #[test]
    fn links_open_safely() {
        let h = render("[docs](https://example.com)");
        assert!(h.contains(r#"href="https://example.com""#), "{h}");
        assert!(h.contains(r#"rel="noopener noreferrer""#));
    }

    #[test]
    fn nothing_executes() {
        for evil in [
            "<script>alert(1)</script>",
            "<img src=x onerror=alert(1)>",
            "[x](javascript:alert(1))",
            "<a href=\"javascript:alert(1)\">x</a>",
            "<div onclick=\"alert(1)\">x</div>",
            "<iframe src=\"https://evil.example\"></iframe>",
            "<svg onload=alert(1)>",
            "<style>body{display:none}</style>",
            "<form action=\"https://evil.example\"><input></form>",
        ] {
            let h = render(evil).to_lowercase();
            for bad in [
                "<script",
                "onerror",
                "javascript:",
                "onclick",
                "<iframe",
                "onload",
                "<style",
                "<form",
                "<img",
            ] {
                assert!(!h.contains(bad), "{evil} → {h}");
            }
        }
    }
}
