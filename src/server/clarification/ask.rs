//! The `ask_user_question` tool input (spec/api.md MCP): validation with errors that explain
//! the rule, id defaulting, the dedup key (L8), and the tool's answer payload.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::model::form::Form;
use crate::model::limits::{self, at_most};
use crate::model::{Answer, AppError, Question, QuestionOption, Response};

pub const MAX_QUESTIONS: usize = 4;
pub const MIN_OPTIONS: usize = 2;
pub const MAX_OPTIONS: usize = 6;

/// A validated ask: ids filled in, ready to store.
#[derive(Clone, Debug, PartialEq)]
pub struct Ask {
    pub questions: Vec<Question>,
    pub context: Option<String>,
    /// E2: `mcp` or `elicitation`.
    pub source: &'static str,
}

impl Ask {
    /// L8: identical calls (same questions, options and context) share this key.
    pub fn dedup_key(&self) -> String {
        let canonical = json!({ "questions": self.questions, "context": self.context }).to_string();
        format!("{:x}", Sha256::digest(canonical.as_bytes()))
    }

    /// The transcript line for the bundle's message.
    pub fn summary_line(&self) -> String {
        self.questions
            .iter()
            .map(|q| q.prompt.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn str_field<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    at: &str,
) -> Result<Option<&'a str>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(format!("{at}.{key} must be a string")),
    }
}

/// Validates the tool arguments: a 400-class error whose message names the offending field
/// and the rule (the MCP edge answers it as a tool error).
pub fn parse_ask(args: &Value) -> Result<Ask, AppError> {
    validate(args).map_err(AppError::BadRequest)
}

fn validate(args: &Value) -> Result<Ask, String> {
    let obj = args
        .as_object()
        .ok_or("arguments must be an object with `questions`")?;
    let context = str_field(obj, "context", "arguments")?.map(str::to_string);
    if let Some(c) = &context {
        at_most("context", c, limits::ASK_CONTEXT_CHARS)?;
    }
    let list = obj
        .get("questions")
        .and_then(Value::as_array)
        .ok_or("`questions` must be an array of 1–4 questions")?;
    if list.is_empty() || list.len() > MAX_QUESTIONS {
        return Err(format!(
            "`questions` must hold 1–{MAX_QUESTIONS} questions, got {}",
            list.len()
        ));
    }
    let mut questions = Vec::with_capacity(list.len());
    for (i, q) in list.iter().enumerate() {
        let at = format!("questions[{i}]");
        let q = q.as_object().ok_or(format!("{at} must be an object"))?;
        let id = str_field(q, "id", &at)?
            .map(str::to_string)
            .unwrap_or_else(|| format!("q{}", i + 1));
        if id.trim().is_empty() {
            return Err(format!("{at}.id must not be empty"));
        }
        at_most(&format!("{at}.id"), &id, limits::ASK_ID_CHARS)?;
        let prompt = str_field(q, "prompt", &at)?.unwrap_or_default();
        if prompt.trim().is_empty() {
            return Err(format!("{at}.prompt is required and must not be empty"));
        }
        at_most(&format!("{at}.prompt"), prompt, limits::ASK_PROMPT_CHARS)?;
        let title = str_field(q, "title", &at)?.map(str::to_string);
        if let Some(t) = &title {
            at_most(&format!("{at}.title"), t, limits::ASK_TITLE_CHARS)?;
        }
        let opts = q
            .get("options")
            .and_then(Value::as_array)
            .ok_or(format!("{at}.options must be an array"))?;
        if opts.len() < MIN_OPTIONS || opts.len() > MAX_OPTIONS {
            return Err(format!(
                "{at}.options must hold {MIN_OPTIONS}–{MAX_OPTIONS} options, got {}",
                opts.len()
            ));
        }
        let mut options = Vec::with_capacity(opts.len());
        for (j, o) in opts.iter().enumerate() {
            let oat = format!("{at}.options[{j}]");
            let o = o.as_object().ok_or(format!("{oat} must be an object"))?;
            let label = str_field(o, "label", &oat)?.unwrap_or_default();
            if label.trim().is_empty() {
                return Err(format!("{oat}.label is required and must not be empty"));
            }
            at_most(&format!("{oat}.label"), label, limits::ASK_LABEL_CHARS)?;
            let oid = str_field(o, "id", &oat)?
                .map(str::to_string)
                .unwrap_or_else(|| format!("{id}_opt{}", j + 1));
            if oid.trim().is_empty() {
                return Err(format!("{oat}.id must not be empty"));
            }
            at_most(&format!("{oat}.id"), &oid, limits::ASK_ID_CHARS)?;
            if options.iter().any(|x: &QuestionOption| x.id == oid) {
                return Err(format!("{oat}.id {oid:?} is not unique within {at}"));
            }
            let description = str_field(o, "description", &oat)?
                .unwrap_or_default()
                .to_string();
            at_most(
                &format!("{oat}.description"),
                &description,
                limits::ASK_DESCRIPTION_CHARS,
            )?;
            options.push(QuestionOption {
                id: oid,
                label: label.to_string(),
                description,
            });
        }
        if questions.iter().any(|x: &Question| x.id == id) {
            return Err(format!("{at}.id {id:?} is not unique"));
        }
        let multi_select = match q.get("multi_select") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(format!("{at}.multi_select must be true or false")),
        };
        questions.push(Question {
            id,
            title,
            prompt: prompt.to_string(),
            options,
            form: Form {
                multi_select,
                ..Form::default()
            },
        });
    }
    Ok(Ask {
        questions,
        context,
        source: "mcp",
    })
}

/// The tool result for an answered or rejected bundle (spec/api.md): keyed by question id →
/// `{selected_option?, custom_text?}`, or `{rejected: true, reject_reason?}`. When several
/// options were picked, `selected_options` lists them all (`selected_option` is the first).
pub fn tool_output(response: &Response) -> Value {
    if response.rejected {
        let mut v = json!({ "rejected": true });
        if let Some(r) = &response.reject_reason {
            v["reject_reason"] = json!(r);
        }
        return v;
    }
    let mut out = Map::new();
    for Answer {
        question_id,
        selected_options,
        custom_text,
    } in &response.answers
    {
        let mut a = Map::new();
        if let Some(first) = selected_options.first() {
            a.insert("selected_option".into(), json!(first));
        }
        if selected_options.len() > 1 {
            a.insert("selected_options".into(), json!(selected_options));
        }
        if let Some(t) = custom_text {
            a.insert("custom_text".into(), json!(t));
        }
        out.insert(question_id.clone(), Value::Object(a));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(options: Value) -> Value {
        json!({ "questions": [{ "prompt": "Which?", "options": options }] })
    }

    #[test]
    fn missing_ids_become_positional() {
        let ask = parse_ask(&q(json!([{ "label": "A" }, { "label": "B" }]))).unwrap();
        assert_eq!(ask.questions[0].id, "q1");
        let ids: Vec<_> = ask.questions[0]
            .options
            .iter()
            .map(|o| o.id.as_str())
            .collect();
        assert_eq!(ids, ["q1_opt1", "q1_opt2"]);
    }

    #[test]
    fn every_rule_has_a_clear_error() {
        let cases = [
            (json!(5), "object"),
            (json!({ "questions": [] }), "1–4"),
            (
                json!({ "questions": vec![json!({ "prompt": "a", "options": [{"label":"x"},{"label":"y"}] }); 5] }),
                "1–4",
            ),
            (q(json!([{ "label": "only" }])), "2–6"),
            (q(json!([{ "label": "" }, { "label": "b" }])), "label"),
            (
                q(json!([{ "id": "a", "label": "x" }, { "id": "a", "label": "y" }])),
                "not unique",
            ),
            (
                json!({ "questions": [{ "options": [{"label":"x"},{"label":"y"}] }] }),
                "prompt",
            ),
            (
                json!({ "questions": [
                    { "id": "d", "prompt": "a", "options": [{"label":"x"},{"label":"y"}] },
                    { "id": "d", "prompt": "b", "options": [{"label":"x"},{"label":"y"}] }
                ] }),
                "not unique",
            ),
            (
                json!({ "questions": [{ "prompt": 3, "options": [] }] }),
                "string",
            ),
            (
                json!({ "questions": [{ "prompt": "x".repeat(4 * 1024 * 1024), "options": [{"label":"x"},{"label":"y"}] }] }),
                "limit",
            ),
            (
                json!({ "context": "c".repeat(9000), "questions": [{ "prompt": "a", "options": [{"label":"x"},{"label":"y"}] }] }),
                "limit",
            ),
            (
                q(json!([{ "label": "x".repeat(201) }, { "label": "b" }])),
                "limit",
            ),
            (
                q(json!([{ "label": "a", "description": "d".repeat(1001) }, { "label": "b" }])),
                "limit",
            ),
            (
                json!({ "questions": [{ "id": "i".repeat(65), "prompt": "a", "options": [{"label":"x"},{"label":"y"}] }] }),
                "limit",
            ),
        ];
        for (input, needle) in cases {
            let err = parse_ask(&input).unwrap_err();
            assert_eq!(err.status(), 400);
            assert!(err.message().contains(needle), "{input}: {err}");
        }
    }

    #[test]
    fn l8_identical_asks_share_a_dedup_key() {
        let a = parse_ask(&q(json!([{ "label": "A" }, { "label": "B" }]))).unwrap();
        let b = parse_ask(&q(json!([{ "label": "A" }, { "label": "B" }]))).unwrap();
        let c = parse_ask(&q(json!([{ "label": "A" }, { "label": "C" }]))).unwrap();
        assert_eq!(a.dedup_key(), b.dedup_key());
        assert_ne!(a.dedup_key(), c.dedup_key());
    }

    #[test]
    fn output_is_keyed_by_question_or_rejected() {
        let answered = Response {
            pending_id: "p".into(),
            answers: vec![Answer {
                question_id: "db".into(),
                selected_options: vec!["sqlite".into()],
                custom_text: None,
            }],
            rejected: false,
            reject_reason: None,
            responded_at: "t".into(),
        };
        assert_eq!(
            tool_output(&answered),
            json!({ "db": { "selected_option": "sqlite" } })
        );
        let several = Response {
            answers: vec![Answer {
                question_id: "db".into(),
                selected_options: vec!["sqlite".into(), "postgresql".into()],
                custom_text: Some("both".into()),
            }],
            ..answered.clone()
        };
        assert_eq!(
            tool_output(&several),
            json!({ "db": { "selected_option": "sqlite", "selected_options": ["sqlite", "postgresql"], "custom_text": "both" } }),
            "every selected option reaches the agent"
        );
        let rejected = Response {
            answers: vec![],
            rejected: true,
            reject_reason: Some("no".into()),
            ..answered
        };
        assert_eq!(
            tool_output(&rejected),
            json!({ "rejected": true, "reject_reason": "no" })
        );
    }
}
