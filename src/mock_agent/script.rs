//! What a prompt asks the mock agent to do (spec/api.md "The bundled mock agent"): the first
//! line selects a scenario; script lines run in order within one turn. Deterministic.

use serde_json::{Value, json};

#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Reply text (one agent message).
    Say(String),
    Delay(u64),
    /// Call `ask_user_question`; with a client-side timeout in ms, a timeout is survived:
    /// the agent says "Question timed out, continuing without answer." and goes on with the
    /// next line — or ends the turn (the named scenario `/e2e:clarification-timeout`).
    Ask {
        input: Value,
        timeout_ms: Option<u64>,
        reply_with_answer: bool,
        end_turn_on_timeout: bool,
    },
    /// Request permission for a tool call and report the outcome.
    Permission,
    /// Exit the process with this code (a crashing agent, for tests).
    Exit(i32),
    /// Write `content` to `path` (relative, inside the session's working directory) and say
    /// "Wrote <path>" (W10).
    Write {
        path: String,
        content: String,
    },
    /// Say "Read <path>: <content>" of a file in the session's working directory, or
    /// "Read <path>: missing".
    Read(String),
    /// Say the client capabilities `initialize` carried: "Client capabilities: <JSON>" (E1).
    ClientCapabilities,
    /// One reply streamed as `count` chunks of `text` (a long, chatty reply).
    Stream {
        count: u32,
        text: String,
    },
    /// E9: `elicitation/create` in form mode (`{message, requestedSchema}`) or, with `url`,
    /// URL mode; the agent says "Elicitation result: <action> <content JSON>". With
    /// `cancel`, the agent cancels its request (`$/cancel_request`) as soon as it is sent (E5).
    Elicit {
        message: String,
        schema: Option<Value>,
        url: Option<String>,
        cancel: bool,
        /// E7: the agent also says the link was completed (`elicitation/complete`).
        complete: bool,
    },
}

/// The most chunks one `e2e:stream` line may send.
pub const MAX_STREAM_CHUNKS: u32 = 100_000;

pub fn db_question() -> Value {
    json!({
        "id": "db",
        "prompt": "Which database should we use for this project?",
        "options": [
            { "id": "postgresql", "label": "PostgreSQL", "description": "Relational, strong consistency, rich SQL" },
            { "id": "mongodb", "label": "MongoDB", "description": "Document store with flexible schemas" },
            { "id": "sqlite", "label": "SQLite", "description": "Embedded, zero configuration" }
        ]
    })
}

fn multi_questions() -> Value {
    json!({
        "context": "We are setting up a new service.\n\nA few decisions shape the first commit.",
        "questions": [
            db_question(),
            {
                "id": "language",
                "prompt": "Which language should the service be written in?",
                "options": [
                    { "id": "rust", "label": "Rust", "description": "Fast and safe" },
                    { "id": "go", "label": "Go", "description": "Simple and quick to build" }
                ]
            },
            {
                "id": "deploy",
                "prompt": "Where should it be deployed?",
                "options": [
                    { "id": "kubernetes", "label": "Kubernetes", "description": "Cluster" },
                    { "id": "vm", "label": "A single VM", "description": "Simple" }
                ]
            }
        ]
    })
}

/// A resume prompt built by the server for a detached answer (L17) starts with this marker.
use crate::model::RESUME_MARKER;

/// Parses a prompt into the steps of one turn.
pub fn parse(prompt: &str) -> Result<Vec<Step>, String> {
    let first = prompt.lines().next().unwrap_or("").trim();
    let steps = match first {
        "/e2e:simple-message" => vec![Step::Say(
            "Hello! This is a simple reply from the mock agent.".into(),
        )],
        "/e2e:clarification" => vec![
            Step::Say("I need one decision before I start.".into()),
            Step::Ask {
                input: json!({ "questions": [db_question()] }),
                timeout_ms: None,
                reply_with_answer: true,
                end_turn_on_timeout: false,
            },
        ],
        "/e2e:clarification-multi" => vec![
            Step::Say("I need a few decisions before I start.".into()),
            Step::Ask {
                input: multi_questions(),
                timeout_ms: None,
                reply_with_answer: true,
                end_turn_on_timeout: false,
            },
        ],
        "/e2e:clarification-timeout" => vec![
            Step::Say("I need one decision, but I will not wait long.".into()),
            Step::Ask {
                input: json!({ "questions": [db_question()] }),
                timeout_ms: Some(5_000),
                reply_with_answer: true,
                end_turn_on_timeout: true,
            },
        ],
        "/e2e:permission" => vec![Step::Permission],
        _ if prompt.starts_with(RESUME_MARKER) => {
            let answer = prompt[RESUME_MARKER.len()..].trim();
            vec![Step::Say(format!(
                "Thanks, continuing with your answer: {answer}"
            ))]
        }
        _ if first.starts_with("e2e:") => return parse_script(prompt),
        _ => vec![Step::Say(format!("Echo: {prompt}"))],
    };
    Ok(steps)
}

fn parse_script(prompt: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    for (n, line) in prompt.lines().enumerate().map(|(i, l)| (i + 1, l.trim())) {
        if line.is_empty() {
            continue;
        }
        let (name, rest) = line
            .split_once('(')
            .ok_or(format!("line {n}: expected e2e:name(…)"))?;
        let args = rest
            .strip_suffix(')')
            .ok_or(format!("line {n}: missing closing parenthesis"))?;
        let step = match name {
            "e2e:message" => Step::Say(
                serde_json::from_str::<String>(args)
                    .map_err(|e| format!("line {n}: message needs a JSON string: {e}"))?,
            ),
            "e2e:delay" => Step::Delay(
                args.trim()
                    .parse()
                    .map_err(|e| format!("line {n}: delay needs milliseconds: {e}"))?,
            ),
            "e2e:permission" => Step::Permission,
            "e2e:write" => {
                let (path, content) =
                    serde_json::from_str::<(String, String)>(&format!("[{args}]"))
                        .map_err(|e| format!("line {n}: write(\"path\", \"content\"): {e}"))?;
                Step::Write { path, content }
            }
            "e2e:read" => Step::Read(
                serde_json::from_str::<String>(args.trim())
                    .map_err(|e| format!("line {n}: read needs a JSON string: {e}"))?,
            ),
            "e2e:client-capabilities" => Step::ClientCapabilities,
            "e2e:exit" => Step::Exit(
                args.trim()
                    .parse()
                    .map_err(|e| format!("line {n}: exit needs a code: {e}"))?,
            ),
            "e2e:stream" => {
                let (count, text) = args
                    .split_once(',')
                    .ok_or(format!("line {n}: stream(count, \"text\")"))?;
                let count: u32 = count
                    .trim()
                    .parse()
                    .map_err(|e| format!("line {n}: stream needs a chunk count: {e}"))?;
                if count == 0 || count > MAX_STREAM_CHUNKS {
                    return Err(format!(
                        "line {n}: stream sends 1 to {MAX_STREAM_CHUNKS} chunks"
                    ));
                }
                Step::Stream {
                    count,
                    text: serde_json::from_str::<String>(text.trim())
                        .map_err(|e| format!("line {n}: stream needs a JSON string: {e}"))?,
                }
            }
            "e2e:ask" => Step::Ask {
                input: serde_json::from_str(args)
                    .map_err(|e| format!("line {n}: ask needs JSON: {e}"))?,
                timeout_ms: None,
                reply_with_answer: true,
                end_turn_on_timeout: false,
            },
            "e2e:ask-timeout" => {
                let (ms, json) = args
                    .split_once(',')
                    .ok_or(format!("line {n}: ask-timeout(ms, {{json}})"))?;
                Step::Ask {
                    input: serde_json::from_str(json.trim())
                        .map_err(|e| format!("line {n}: ask-timeout needs JSON: {e}"))?,
                    timeout_ms: Some(
                        ms.trim()
                            .parse()
                            .map_err(|e| format!("line {n}: timeout needs milliseconds: {e}"))?,
                    ),
                    reply_with_answer: true,
                    end_turn_on_timeout: false,
                }
            }
            "e2e:elicit" | "e2e:elicit-cancelled" => {
                let v: Value = serde_json::from_str(args)
                    .map_err(|e| format!("line {n}: elicit needs JSON: {e}"))?;
                Step::Elicit {
                    message: v["message"].as_str().unwrap_or("").to_string(),
                    schema: Some(v["requestedSchema"].clone()),
                    url: None,
                    cancel: name == "e2e:elicit-cancelled",
                    complete: false,
                }
            }
            "e2e:elicit-url" | "e2e:elicit-url-completed" => Step::Elicit {
                message: "Open the link to continue".into(),
                schema: None,
                url: Some(
                    serde_json::from_str::<String>(args.trim())
                        .map_err(|e| format!("line {n}: elicit-url needs a JSON string: {e}"))?,
                ),
                cancel: false,
                complete: name == "e2e:elicit-url-completed",
            },
            other => return Err(format!("line {n}: unknown script command {other:?}")),
        };
        steps.push(step);
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_and_read_take_json_strings() {
        assert_eq!(
            parse("e2e:write(\"a/b.txt\", \"two\\nlines\")").unwrap(),
            vec![Step::Write {
                path: "a/b.txt".into(),
                content: "two\nlines".into()
            }]
        );
        assert_eq!(
            parse("e2e:read(\"a.txt\")").unwrap(),
            vec![Step::Read("a.txt".into())]
        );
        for bad in [
            "e2e:write(\"a.txt\")",
            "e2e:write(a.txt, x)",
            "e2e:read(a.txt)",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn scenarios_are_recognised_by_their_first_line() {
        assert!(matches!(
            parse("/e2e:simple-message").unwrap()[..],
            [Step::Say(_)]
        ));
        assert!(matches!(
            parse("/e2e:clarification\nmore").unwrap()[..],
            [
                Step::Say(_),
                Step::Ask {
                    timeout_ms: None,
                    ..
                }
            ]
        ));
        assert!(matches!(
            parse("/e2e:clarification-timeout").unwrap()[1],
            Step::Ask {
                timeout_ms: Some(5000),
                end_turn_on_timeout: true,
                ..
            }
        ));
        assert_eq!(parse("/e2e:permission").unwrap(), vec![Step::Permission]);
        assert_eq!(
            parse("hello there").unwrap(),
            vec![Step::Say("Echo: hello there".into())]
        );
    }

    #[test]
    fn script_lines_run_in_order() {
        let steps = parse("e2e:message(\"one\")\ne2e:delay(10)\ne2e:ask-timeout(200, {\"questions\": []})\ne2e:message(\"two\")").unwrap();
        assert_eq!(steps[0], Step::Say("one".into()));
        assert_eq!(steps[1], Step::Delay(10));
        assert!(matches!(
            steps[2],
            Step::Ask {
                timeout_ms: Some(200),
                end_turn_on_timeout: false,
                ..
            }
        ));
        assert_eq!(steps[3], Step::Say("two".into()));
        assert_eq!(
            parse("e2e:stream(3, \"ab\")").unwrap(),
            vec![Step::Stream {
                count: 3,
                text: "ab".into()
            }]
        );
        assert!(parse("e2e:stream(0, \"ab\")").is_err());
        assert!(parse("e2e:stream(100001, \"ab\")").is_err());
        assert!(parse("e2e:stream(3, ab)").is_err());
        assert!(parse("e2e:fly(1)").unwrap_err().contains("unknown"));
        assert!(
            parse("e2e:delay(soon)")
                .unwrap_err()
                .contains("milliseconds")
        );
    }
}
