//! A1: the common ACP agents and how to start them, each looked up on the server's `PATH`.
//! A preset only fills a profile the user can edit; the server never installs or runs
//! anything for it (the install command is shown).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::model::AgentPreset;

/// One way to start a preset's agent: a program and its arguments.
struct Way {
    program: &'static str,
    args: &'static [&'static str],
}

struct Known {
    id: &'static str,
    name: &'static str,
    /// Tried in order; the first whose program is on `PATH` is the preset's command.
    ways: &'static [Way],
    install: &'static str,
}

const KNOWN: &[Known] = &[
    Known {
        id: "claude-code",
        name: "Claude Code",
        ways: &[
            Way {
                program: "claude-agent-acp",
                args: &[],
            },
            Way {
                program: "npx",
                args: &["-y", "@zed-industries/claude-agent-acp"],
            },
        ],
        install: "npm install -g @zed-industries/claude-agent-acp",
    },
    Known {
        id: "codex",
        name: "Codex",
        ways: &[
            Way {
                program: "codex-acp",
                args: &[],
            },
            Way {
                program: "npx",
                args: &["-y", "@zed-industries/codex-acp"],
            },
        ],
        install: "npm install -g @zed-industries/codex-acp",
    },
    Known {
        id: "gemini",
        name: "Gemini CLI",
        ways: &[Way {
            program: "gemini",
            args: &["--experimental-acp"],
        }],
        install: "npm install -g @google/gemini-cli",
    },
    Known {
        id: "goose",
        name: "goose",
        ways: &[Way {
            program: "goose",
            args: &["acp"],
        }],
        install: "pipx install goose-ai (or see block.github.io/goose)",
    },
    Known {
        id: "opencode",
        name: "OpenCode",
        ways: &[Way {
            program: "opencode",
            args: &["acp"],
        }],
        install: "npm install -g opencode-ai",
    },
];

/// The presets as found with `path` (the server's `PATH`); the bundled mock agent is `mock`.
pub fn presets(path: Option<&OsStr>, mock: &Path) -> Vec<AgentPreset> {
    let mut out: Vec<AgentPreset> = KNOWN
        .iter()
        .map(|k| {
            let found = k
                .ways
                .iter()
                .find_map(|w| which(w.program, path).map(|p| (p, w)));
            match found {
                Some((program, way)) => AgentPreset {
                    id: k.id.into(),
                    name: k.name.into(),
                    command: program.display().to_string(),
                    args: way.args.iter().map(|a| (*a).to_string()).collect(),
                    found: true,
                    install: None,
                },
                None => AgentPreset {
                    id: k.id.into(),
                    name: k.name.into(),
                    command: k.ways[0].program.into(),
                    args: k.ways[0].args.iter().map(|a| (*a).to_string()).collect(),
                    found: false,
                    install: Some(k.install.into()),
                },
            }
        })
        .collect();
    out.push(AgentPreset {
        id: "mock".into(),
        name: "Mock agent (bundled)".into(),
        command: mock.display().to_string(),
        args: vec![],
        found: mock.is_file(),
        install: None,
    });
    out
}

/// The first executable file named `program` in the directories of `path`.
pub fn which(program: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path?)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn executable(dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("turnstile-presets-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a1_a_preset_found_on_path_gets_its_absolute_command() {
        let (a, b) = (scratch("a"), scratch("b"));
        let gemini = executable(&b, "gemini");
        // Found through the fallback: npx runs the adapter package.
        let npx = executable(&a, "npx");
        let not_executable = a.join("codex-acp");
        std::fs::write(&not_executable, "").unwrap();
        let path = std::env::join_paths([&a, &b]).unwrap();
        let list = presets(Some(&path), &gemini);
        let by = |id: &str| list.iter().find(|p| p.id == id).unwrap().clone();
        let g = by("gemini");
        assert_eq!(
            (g.found, g.command, g.args),
            (
                true,
                gemini.display().to_string(),
                vec!["--experimental-acp".to_string()]
            )
        );
        let c = by("claude-code");
        assert_eq!((c.found, c.command.as_str()), (true, npx.to_str().unwrap()));
        assert_eq!(c.args, ["-y", "@zed-industries/claude-agent-acp"]);
        let codex = by("codex");
        assert!(codex.found, "npx runs it: {codex:?}");
        let o = by("opencode");
        assert_eq!((o.found, o.command.as_str()), (false, "opencode"));
        assert_eq!(o.install.as_deref(), Some("npm install -g opencode-ai"));
        assert!(by("mock").found);
    }

    #[test]
    fn a1_relative_path_entries_and_a_missing_path_find_nothing() {
        let dir = scratch("rel");
        executable(&dir, "goose");
        assert_eq!(which("goose", Some(OsStr::new("relative/dir"))), None);
        assert_eq!(which("goose", None), None);
        let path = std::env::join_paths([&dir]).unwrap();
        assert!(which("goose", Some(&path)).is_some());
    }
}
