//! Text helpers for the browser.

/// Lower-cases for a case-insensitive title filter. In the browser this is the engine's own
/// `String.prototype.toLowerCase` (the same Unicode mapping), so the wasm carries no case tables.
pub fn fold_case(s: &str) -> String {
    #[cfg(feature = "hydrate")]
    return String::from(js_sys::JsString::from(s).to_lower_case());
    #[cfg(not(feature = "hydrate"))]
    s.to_lowercase()
}
