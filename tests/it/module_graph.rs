//! The module graph points one way (docs/architecture.md): `api/` → services → `repo`,
//! `events`, `agents` → `model`. Read from the source text, so a new `use` that turns an arrow
//! around fails here, not in review.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The modules directly under `src/server`, as named by `crate::server::<name>` paths.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// Services: they may use the layers below them, never the other way round.
const SERVICES: &[&str] = &["orchestrator", "clarification", "summary", "startup"];
/// Below the services: storage, the event hub, the agent connections, shared state.
const BELOW_SERVICES: &[&str] = &[
    "repo",
    "events",
    "agents",
    "state",
    "runtime",
    "hooks",
    "time",
    "config",
    "metrics",
    "telemetry",
    "markdown",
    "auth",
    "mailbox",
];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Source without unit-test modules (they may reach anywhere) and without comments.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `<prefix><name>` the code names, including inside `use crate::server::{a, b::c}`.
fn referenced(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        rest = &rest[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    names.insert(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            names.insert(name);
        }
    }
    names.remove("super");
    names.remove("");
    names
}

fn server_graph() -> (Graph, Vec<String>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/server");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut graph = Graph::new();
    let mut outward = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&root).unwrap();
        let module = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if module == "mod" {
            continue;
        }
        let code = code(&std::fs::read_to_string(&file).unwrap());
        for upper in ["api", "app", "ui", "client"] {
            if code.contains(&format!("crate::{upper}")) {
                outward.push(format!("{} imports crate::{upper}", rel.display()));
            }
        }
        // `super::` repeated once per level below `src/server` names a sibling of `module`.
        let depth = rel.components().count() - usize::from(rel.ends_with("mod.rs"));
        let mut names = referenced(&code, "crate::server::");
        names.extend(referenced(&code, &"super::".repeat(depth)));
        let edges = graph.entry(module.clone()).or_default();
        edges.extend(names.into_iter().filter(|m| *m != module));
    }
    (graph, outward)
}

/// A cycle through `start`, if any (depth-first).
fn cycle_from(graph: &Graph, start: &str) -> Option<Vec<String>> {
    fn walk(
        graph: &Graph,
        at: &str,
        start: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in graph.get(at).into_iter().flatten() {
            if next == start {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(graph, next, start, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_string()];
    walk(graph, start, start, &mut path, &mut BTreeSet::new()).then_some(path)
}

#[test]
fn nothing_under_server_imports_api_app_ui_or_client() {
    let (_, outward) = server_graph();
    assert!(outward.is_empty(), "{outward:#?}");
}

#[test]
fn the_server_modules_form_no_cycle() {
    let (graph, _) = server_graph();
    let cycles: Vec<String> = graph
        .keys()
        .filter_map(|m| cycle_from(&graph, m))
        .map(|c| c.join(" → "))
        .collect();
    assert!(cycles.is_empty(), "module cycles: {cycles:#?}");
}

#[test]
fn storage_events_agents_and_state_never_use_a_service() {
    let (graph, _) = server_graph();
    let mut wrong = Vec::new();
    for low in BELOW_SERVICES {
        for service in SERVICES {
            if graph.get(*low).is_some_and(|e| e.contains(*service)) {
                wrong.push(format!("{low} → {service}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_model_uses_nothing_of_the_server() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/model");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let wrong: Vec<String> = files
        .iter()
        .filter(|f| {
            let code = code(&std::fs::read_to_string(f).unwrap());
            [
                "crate::server",
                "crate::api",
                "crate::app",
                "crate::ui",
                "crate::client",
            ]
            .iter()
            .any(|p| code.contains(p))
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_reader_finds_grouped_and_single_paths() {
    let names = referenced(
        "use crate::server::{repo::X, state};\nlet a = crate::server::time::now();",
        "crate::server::",
    );
    assert_eq!(
        names,
        ["repo", "state", "time"]
            .map(String::from)
            .into_iter()
            .collect()
    );
    let g: Graph = [("a", "b"), ("b", "c"), ("c", "a")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), BTreeSet::from([v.to_string()])))
        .collect();
    assert_eq!(cycle_from(&g, "a").unwrap(), ["a", "b", "c", "a"]);
}

/// Handlers stay thin: what they read or write goes through a service, so REST, server
/// functions and MCP share one validation and one set of notifications.
#[test]
fn handlers_reach_the_repository_only_through_services() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let wrong: Vec<String> = files
        .iter()
        .filter(|f| {
            let code = code(&std::fs::read_to_string(f).unwrap());
            code.contains(".repo.") || code.contains(".repo\n")
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
}
