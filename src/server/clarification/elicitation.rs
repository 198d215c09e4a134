//! ACP elicitation as a question source (spec/elicitation.md): a form's fields become the
//! questions of one bundle (E3), an answer becomes the agent's typed content (E5), a URL
//! request becomes a link question (E7). Pure functions over the request's JSON: the bundle
//! then goes the way every question goes (`asking::ask_and_wait`).
//!
//! Field order: `agent-client-protocol` hands the schema's `properties` over as a map sorted by
//! key, so questions follow the keys' order, not the order the agent wrote them in.

use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::ask::Ask;
use super::asking::{AskOutcome, ask_and_wait};
use crate::model::form::{Form, InputKind, TextFormat};
use crate::model::limits::{self, at_most};
use crate::model::{Answer, Question, QuestionOption, Response};
use crate::server::runtime::Elicitation;
use crate::server::state::AppState;

/// E3: more fields than this cannot be shown as one bundle.
pub const MAX_FIELDS: usize = 16;
/// Choices of one field the overlay can show.
pub const MAX_CHOICES: usize = 24;
/// The suffix of a choice's "Other" text companion (`<k>_custom`, Claude Code's shape).
const CUSTOM_SUFFIX: &str = "_custom";

/// How a question's answer is typed in the agent's content (E5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    /// A string const.
    Choice,
    /// An array of string consts.
    Several,
    Text,
    Integer,
    Number,
    Boolean,
}

/// One question's field: its key in the content and, for a choice, its "Other" companion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub key: String,
    pub kind: FieldKind,
    pub custom: Option<String>,
}

/// A form elicitation as a bundle's questions, with what it takes to answer the agent.
#[derive(Clone, Debug, PartialEq)]
pub struct Elicited {
    pub ask: Ask,
    pub fields: Vec<Field>,
}

/// E3: the questions of a form elicitation (`message`, `requestedSchema`). A schema the table
/// cannot show is refused with a message naming the field (the agent gets `-32602`).
pub fn form_ask(message: &str, schema: &Value) -> Result<Elicited, String> {
    at_most("message", message, limits::ASK_CONTEXT_CHARS)?;
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .ok_or("requestedSchema.properties must be an object")?;
    let required: Vec<&str> = match schema.get("required") {
        None | Some(Value::Null) => vec![],
        Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
        Some(_) => return Err("requestedSchema.required must be an array of names".into()),
    };
    let keys: Vec<&String> = properties.keys().collect();
    // `<k>_custom` right after choice `<k>` is `<k>`'s "Other" box, not a question.
    let companion = |key: &str| -> bool {
        let Some(p) = properties.get(key) else {
            return false;
        };
        key.strip_suffix(CUSTOM_SUFFIX).is_some_and(|k| {
            properties.get(k).is_some_and(is_choice)
                && p.get("type") == Some(&json!("string"))
                && !is_choice(p)
        })
    };
    let fields: Vec<&String> = keys.iter().copied().filter(|k| !companion(k)).collect();
    if fields.is_empty() {
        return Err("requestedSchema has no fields".into());
    }
    if fields.len() > MAX_FIELDS {
        return Err(format!(
            "requestedSchema has {} fields; at most {MAX_FIELDS} can be shown",
            fields.len()
        ));
    }
    let single = fields.len() == 1;
    let mut questions = Vec::with_capacity(fields.len());
    let mut out = Vec::with_capacity(fields.len());
    for key in fields {
        let at = format!("requestedSchema.properties.{key}");
        let p = properties[key]
            .as_object()
            .ok_or(format!("{at} must be an object"))?;
        at_most(&at, key, limits::ASK_ID_CHARS)?;
        let custom_key = format!("{key}{CUSTOM_SUFFIX}");
        let custom = companion(&custom_key).then_some(custom_key);
        let title = text(p, "title", &at)?;
        let prompt = match (text(p, "description", &at)?, single) {
            (Some(d), _) => d,
            (None, true) if !message.trim().is_empty() => message.to_string(),
            (None, _) => title.clone().unwrap_or_else(|| key.clone()),
        };
        at_most(
            &format!("{at}.description"),
            &prompt,
            limits::ASK_PROMPT_CHARS,
        )?;
        if let Some(t) = &title {
            at_most(&format!("{at}.title"), t, limits::ASK_TITLE_CHARS)?;
        }
        let mut form = Form {
            required: required.contains(&key.as_str()),
            other: custom.is_some(),
            ..Form::default()
        };
        let (kind, options) = field(p, &at, &mut form)?;
        questions.push(Question {
            id: key.clone(),
            title,
            prompt,
            options,
            form,
        });
        out.push(Field {
            key: key.clone(),
            kind,
            custom,
        });
    }
    let context = (!single && !message.trim().is_empty()).then(|| message.to_string());
    Ok(Elicited {
        ask: Ask { questions, context },
        fields: out,
    })
}

/// E7: a URL elicitation as one link question. Only `http` and `https` links are shown.
pub fn url_ask(message: &str, url: &str) -> Result<Elicited, String> {
    at_most("message", message, limits::ASK_PROMPT_CHARS)?;
    at_most("url", url, limits::ASK_PROMPT_CHARS)?;
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    let host = url
        .split_once("://")
        .map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or(""));
    if !matches!(scheme.as_deref(), Some("http" | "https")) || host.is_none_or(str::is_empty) {
        return Err(format!("url {url:?} is not an http or https link"));
    }
    let prompt = if message.trim().is_empty() {
        "Open this link".to_string()
    } else {
        message.to_string()
    };
    let question = Question {
        id: "url".into(),
        title: None,
        prompt,
        options: vec![],
        form: Form {
            input: Some(InputKind::Url),
            other: false,
            link: Some(url.to_string()),
            ..Form::default()
        },
    };
    Ok(Elicited {
        ask: Ask {
            questions: vec![question],
            context: None,
        },
        fields: vec![],
    })
}

fn is_choice(p: &Value) -> bool {
    match p.get("type").and_then(Value::as_str) {
        Some("string") => p.get("oneOf").is_some() || p.get("enum").is_some(),
        Some("boolean") => true,
        _ => false,
    }
}

fn text(p: &Map<String, Value>, key: &str, at: &str) -> Result<Option<String>, String> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("{at}.{key} must be a string")),
    }
}

fn number(p: &Map<String, Value>, key: &str, at: &str) -> Result<Option<f64>, String> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or(format!("{at}.{key} must be a number")),
    }
}

fn count<T: TryFrom<u64>>(
    p: &Map<String, Value>,
    key: &str,
    at: &str,
) -> Result<Option<T>, String> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| T::try_from(n).ok())
            .map(Some)
            .ok_or(format!("{at}.{key} must be a non-negative whole number")),
    }
}

/// One field's kind and choices, its bounds written into `form`.
fn field(
    p: &Map<String, Value>,
    at: &str,
    form: &mut Form,
) -> Result<(FieldKind, Vec<QuestionOption>), String> {
    let ty = p.get("type").and_then(Value::as_str).unwrap_or("");
    match ty {
        "string" if p.contains_key("oneOf") || p.contains_key("enum") => {
            form.max_items = Some(1);
            if let Some(d) = text(p, "default", at)? {
                form.default = vec![d];
            }
            Ok((FieldKind::Choice, choices(p, at)?))
        }
        "string" => {
            form.input = Some(InputKind::Text);
            form.min_length = count(p, "minLength", at)?;
            form.max_length = count(p, "maxLength", at)?;
            form.format = match text(p, "format", at)?.as_deref() {
                None => None,
                Some("email") => Some(TextFormat::Email),
                Some("uri") => Some(TextFormat::Uri),
                Some("date") => Some(TextFormat::Date),
                Some("date-time") => Some(TextFormat::DateTime),
                Some(other) => return Err(format!("{at}.format {other:?} is not supported")),
            };
            if let Some(d) = text(p, "default", at)? {
                form.default = vec![d];
            }
            Ok((FieldKind::Text, vec![]))
        }
        "integer" | "number" => {
            let integer = ty == "integer";
            form.input = Some(if integer {
                InputKind::Integer
            } else {
                InputKind::Number
            });
            form.minimum = number(p, "minimum", at)?;
            form.maximum = number(p, "maximum", at)?;
            if let Some(d) = number(p, "default", at)? {
                form.default = vec![if integer {
                    (d as i64).to_string()
                } else {
                    d.to_string()
                }];
            }
            Ok((
                if integer {
                    FieldKind::Integer
                } else {
                    FieldKind::Number
                },
                vec![],
            ))
        }
        "boolean" => {
            form.max_items = Some(1);
            form.other = false;
            if let Some(d) = p.get("default").and_then(Value::as_bool) {
                form.default = vec![d.to_string()];
            }
            let option = |id: &str, label: &str| QuestionOption {
                id: id.into(),
                label: label.into(),
                description: String::new(),
            };
            Ok((
                FieldKind::Boolean,
                vec![option("true", "Yes"), option("false", "No")],
            ))
        }
        "array" => {
            let items = p
                .get("items")
                .and_then(Value::as_object)
                .ok_or(format!("{at}.items must be an object"))?;
            form.multi_select = true;
            form.min_items = count(p, "minItems", at)?;
            form.max_items = count(p, "maxItems", at)?;
            if let Some(d) = p.get("default").and_then(Value::as_array) {
                form.default = d
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect();
            }
            Ok((FieldKind::Several, choices(items, &format!("{at}.items"))?))
        }
        "object" => Err(format!("{at} is a nested object, which cannot be shown")),
        other => Err(format!("{at} has type {other:?}, which cannot be shown")),
    }
}

/// The choices of `oneOf`/`anyOf` (`{const, title, description?}`) or `enum` (+ `enumNames`).
fn choices(p: &Map<String, Value>, at: &str) -> Result<Vec<QuestionOption>, String> {
    let titled = p.get("oneOf").or_else(|| p.get("anyOf"));
    let options: Vec<QuestionOption> = if let Some(list) = titled {
        let list = list
            .as_array()
            .ok_or(format!("{at}.oneOf must be an array"))?;
        list.iter()
            .enumerate()
            .map(|(i, o)| {
                let oat = format!("{at}.oneOf[{i}]");
                let o = o.as_object().ok_or(format!("{oat} must be an object"))?;
                let id = text(o, "const", &oat)?.ok_or(format!("{oat}.const is required"))?;
                let label = text(o, "title", &oat)?.unwrap_or_else(|| id.clone());
                let description = text(o, "description", &oat)?.unwrap_or_default();
                Ok(QuestionOption {
                    id,
                    label,
                    description,
                })
            })
            .collect::<Result<_, String>>()?
    } else {
        let values = p
            .get("enum")
            .and_then(Value::as_array)
            .ok_or(format!("{at}.enum must be an array of strings"))?;
        let names = p.get("enumNames").and_then(Value::as_array);
        values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let id = v
                    .as_str()
                    .ok_or(format!("{at}.enum[{i}] must be a string"))?
                    .to_string();
                let label = names
                    .and_then(|n| n.get(i))
                    .and_then(Value::as_str)
                    .map_or_else(|| id.clone(), str::to_string);
                Ok(QuestionOption {
                    id,
                    label,
                    description: String::new(),
                })
            })
            .collect::<Result<_, String>>()?
    };
    if options.is_empty() || options.len() > MAX_CHOICES {
        return Err(format!(
            "{at} must offer 1–{MAX_CHOICES} choices, got {}",
            options.len()
        ));
    }
    for (i, o) in options.iter().enumerate() {
        at_most(&format!("{at} choice {i}"), &o.id, limits::ASK_ID_CHARS)?;
        at_most(
            &format!("{at} choice {i} title"),
            &o.label,
            limits::ASK_LABEL_CHARS,
        )?;
        at_most(
            &format!("{at} choice {i} description"),
            &o.description,
            limits::ASK_DESCRIPTION_CHARS,
        )?;
        if options[..i].iter().any(|x| x.id == o.id) {
            return Err(format!("{at} offers {:?} twice", o.id));
        }
    }
    Ok(options)
}

/// E5: what the agent receives for a bundle's response: `accept` with exactly the answered
/// fields typed by the schema, or `decline` for a skip. (The answer was validated against the
/// questions' forms before it was accepted, so every value parses.)
pub fn result(fields: &[Field], response: &Response) -> Value {
    if response.rejected {
        return json!({ "action": "decline" });
    }
    let mut content = Map::new();
    for f in fields {
        let Some(a) = response.answers.iter().find(|a| a.question_id == f.key) else {
            continue;
        };
        if let Some(v) = value(f.kind, a) {
            content.insert(f.key.clone(), v);
        }
        if let (Some(key), Some(text)) = (&f.custom, &a.custom_text)
            && !text.is_empty()
        {
            content.insert(key.clone(), json!(text));
        }
    }
    if fields.is_empty() {
        // E7: a link answered "done" carries no content.
        return json!({ "action": "accept" });
    }
    json!({ "action": "accept", "content": content })
}

/// The wait ended without an answer (E5): the agent is told `cancel`.
pub fn cancelled() -> Value {
    json!({ "action": "cancel" })
}

fn value(kind: FieldKind, a: &Answer) -> Option<Value> {
    let text = a.custom_text.as_deref().unwrap_or("").trim();
    match kind {
        FieldKind::Choice => a.selected_options.first().map(|o| json!(o)),
        FieldKind::Several => Some(json!(a.selected_options)),
        FieldKind::Boolean => a.selected_options.first().map(|o| json!(o == "true")),
        FieldKind::Text => a.custom_text.as_ref().map(|t| json!(t)),
        FieldKind::Integer => text.parse::<i64>().ok().map(|n| json!(n)),
        FieldKind::Number => text.parse::<f64>().ok().map(|n| json!(n)),
    }
}

/// Asks the agents' elicitations (E2) until shutdown, each in a task of its own as the MCP
/// tool's calls are: one that waits for its answer blocks no other.
pub fn serve(state: AppState, mut queue: mpsc::Receiver<Elicitation>) {
    tokio::spawn(async move {
        loop {
            let next = tokio::select! {
                _ = state.shutdown.cancelled() => return,
                next = queue.recv() => match next { Some(e) => e, None => return },
            };
            let state = state.clone();
            tokio::spawn(async move { ask(&state, next).await });
        }
    });
}

/// E2: the elicitation becomes a bundle of the session's current turn, written before
/// anything waits, and waits like any question (L6–L19); its outcome goes back to the agent
/// (E5). A request that cannot be shown is refused (`-32602`) with nothing written.
async fn ask(state: &AppState, elicitation: Elicitation) {
    let Elicitation { session_id, ask } = elicitation;
    let session = match state.repo.get_session(&session_id).await {
        Ok(Some(session)) => session,
        Ok(None) => return, // the reply is dropped: the agent is told `cancel`
        Err(e) => {
            tracing::warn!(session_id, error = %e, "cannot read the session of an elicitation");
            return;
        }
    };
    let theirs = ask.request.get("sessionId").and_then(Value::as_str);
    if let (Some(theirs), Some(ours)) = (theirs, session.acp_session_id.as_deref())
        && theirs != ours
    {
        let _ = ask.reply.send(Err(format!(
            "session {theirs:?} is not one this client runs"
        )));
        return;
    }
    let elicited = match shape(&ask.request) {
        Ok(elicited) => elicited,
        Err(why) => {
            tracing::info!(
                session_id,
                why,
                "an elicitation the overlay cannot show was refused"
            );
            let _ = ask.reply.send(Err(why));
            return;
        }
    };
    let stop = state.shutdown.child_token();
    let outcome = ask_and_wait(state, &session, elicited.ask, stop, |_| async {}).await;
    let reply = match outcome {
        AskOutcome::Answered(response) => result(&elicited.fields, &response),
        // E5: detached, superseded, ended or failed: the agent goes on without an answer; a
        // detached bundle stays answerable and its answer comes as a resume (E6, L17).
        AskOutcome::Detached(_) | AskOutcome::Ended(_) | AskOutcome::Failed(_) => cancelled(),
    };
    let _ = ask.reply.send(Ok(reply));
}

/// The questions of an `elicitation/create` request, by its mode.
fn shape(request: &Value) -> Result<Elicited, String> {
    let message = request.get("message").and_then(Value::as_str).unwrap_or("");
    match request.get("mode").and_then(Value::as_str) {
        Some("form") => form_ask(
            message,
            request.get("requestedSchema").unwrap_or(&Value::Null),
        ),
        Some("url") => url_ask(
            message,
            request.get("url").and_then(Value::as_str).unwrap_or(""),
        ),
        other => Err(format!("elicitation mode {other:?} is not supported")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::form::check_answer;

    /// The shape Claude Code's ACP adapter sends for AskUserQuestion: a choice per question
    /// with its `<k>_custom` "Other" box, a multi-select, and a required list.
    fn claude_shaped() -> Value {
        json!({
            "type": "object",
            "properties": {
                "q0": {
                    "type": "string",
                    "title": "Database",
                    "description": "Which database should we use?",
                    "oneOf": [
                        {"const": "postgresql", "title": "PostgreSQL", "description": "Server"},
                        {"const": "sqlite", "title": "SQLite"}
                    ]
                },
                "q0_custom": {"type": "string", "description": "Other"},
                "q1": {
                    "type": "array",
                    "title": "Features",
                    "description": "Which features?",
                    "minItems": 1,
                    "items": {"anyOf": [
                        {"const": "auth", "title": "Auth"},
                        {"const": "search", "title": "Search"},
                        {"const": "export", "title": "Export"}
                    ]}
                }
            },
            "required": ["q0"]
        })
    }

    fn answer(id: &str, picked: &[&str], text: Option<&str>) -> Answer {
        Answer {
            question_id: id.into(),
            selected_options: picked.iter().map(|s| (*s).into()).collect(),
            custom_text: text.map(str::to_string),
        }
    }

    fn response(answers: Vec<Answer>) -> Response {
        Response {
            pending_id: "p".into(),
            answers,
            rejected: false,
            reject_reason: None,
            responded_at: String::new(),
        }
    }

    #[test]
    fn e3_choices_become_questions_and_custom_is_their_other_box() {
        let e = form_ask("Two questions", &claude_shaped()).unwrap();
        let ids: Vec<&str> = e.ask.questions.iter().map(|q| q.id.as_str()).collect();
        assert_eq!(ids, ["q0", "q1"]);
        let db = &e.ask.questions[0];
        assert_eq!(db.prompt, "Which database should we use?");
        assert_eq!(db.title.as_deref(), Some("Database"));
        assert_eq!(db.options[0].id, "postgresql");
        assert_eq!(db.options[0].label, "PostgreSQL");
        assert_eq!(db.options[0].description, "Server");
        assert!(db.form.required && db.form.other);
        assert_eq!(db.form.max_items, Some(1));
        let features = &e.ask.questions[1];
        assert!(features.form.multi_select && !features.form.required && !features.form.other);
        assert_eq!(features.form.min_items, Some(1));
        assert_eq!(e.fields[0].custom.as_deref(), Some("q0_custom"));
        assert_eq!(e.ask.context.as_deref(), Some("Two questions"));
    }

    #[test]
    fn e3_enum_with_names_text_numbers_and_booleans() {
        let schema = json!({
            "type": "object",
            "properties": {
                "a_level": {"type": "string", "enum": ["lo", "hi"], "enumNames": ["Low", "High"]},
                "b_name": {"type": "string", "minLength": 2, "maxLength": 40, "format": "email"},
                "c_count": {"type": "integer", "minimum": 1, "maximum": 9, "default": 3},
                "d_ratio": {"type": "number", "maximum": 1.5},
                "e_ok": {"type": "boolean", "default": true}
            }
        });
        let e = form_ask("", &schema).unwrap();
        let q = &e.ask.questions;
        assert_eq!(q[0].options[1].label, "High");
        assert_eq!(q[1].form.input, Some(InputKind::Text));
        assert_eq!(
            (q[1].form.min_length, q[1].form.max_length),
            (Some(2), Some(40))
        );
        assert_eq!(q[1].form.format, Some(TextFormat::Email));
        assert_eq!(q[2].form.input, Some(InputKind::Integer));
        assert_eq!(q[2].form.default, ["3"]);
        assert_eq!(q[3].form.maximum, Some(1.5));
        let ids: Vec<&str> = q[4].options.iter().map(|o| o.id.as_str()).collect();
        assert_eq!(ids, ["true", "false"]);
        assert_eq!(q[4].form.default, ["true"]);
        assert!(q.iter().all(|q| !q.form.required));
        let kinds: Vec<FieldKind> = e.fields.iter().map(|f| f.kind).collect();
        use FieldKind::*;
        assert_eq!(kinds, [Choice, Text, Integer, Number, Boolean]);
    }

    #[test]
    fn e3_one_field_takes_the_message_as_its_prompt() {
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
        let e = form_ask("What is your name?", &schema).unwrap();
        assert_eq!(e.ask.questions[0].prompt, "What is your name?");
        assert_eq!(e.ask.context, None);
    }

    #[test]
    fn e3_schemas_that_cannot_be_shown_are_refused_naming_the_field() {
        let nested = json!({"properties": {"addr": {"type": "object", "properties": {}}}});
        assert!(form_ask("", &nested).unwrap_err().contains("addr"));
        let many: Map<String, Value> = (0..17)
            .map(|i| (format!("f{i:02}"), json!({"type": "string"})))
            .collect();
        let e = form_ask("", &json!({ "properties": many })).unwrap_err();
        assert!(e.contains("17 fields"), "{e}");
        let long =
            json!({"properties": {"x": {"type": "string", "description": "y".repeat(10_000)}}});
        assert!(form_ask("", &long).unwrap_err().contains("properties.x"));
        let no_choices = json!({"properties": {"x": {"type": "string", "enum": []}}});
        assert!(
            form_ask("", &no_choices)
                .unwrap_err()
                .contains("properties.x")
        );
        assert!(form_ask("", &json!({"properties": {}})).is_err());
    }

    #[test]
    fn e5_accept_carries_exactly_the_answered_fields_typed() {
        let schema = json!({
            "properties": {
                "a": {"type": "string", "oneOf": [{"const": "x", "title": "X"}, {"const": "y", "title": "Y"}]},
                "a_custom": {"type": "string"},
                "b": {"type": "array", "items": {"enum": ["p", "q"]}},
                "c": {"type": "integer"},
                "d": {"type": "number"},
                "e": {"type": "boolean"},
                "f": {"type": "string"},
                "g": {"type": "string"}
            }
        });
        let e = form_ask("", &schema).unwrap();
        let r = response(vec![
            answer("a", &[], Some("z, my own")),
            answer("b", &["p", "q"], None),
            answer("c", &[], Some("42")),
            answer("d", &[], Some("2.5")),
            answer("e", &["false"], None),
            answer("f", &[], Some("free text")),
        ]);
        for a in &r.answers {
            let q = e
                .ask
                .questions
                .iter()
                .find(|q| q.id == a.question_id)
                .unwrap();
            check_answer(q, a).unwrap();
        }
        assert_eq!(
            result(&e.fields, &r),
            json!({"action": "accept", "content": {
                "a_custom": "z, my own", "b": ["p", "q"], "c": 42, "d": 2.5, "e": false,
                "f": "free text"
            }})
        );
    }

    #[test]
    fn e5_a_skip_declines_and_an_ended_wait_cancels() {
        let e = form_ask("", &claude_shaped()).unwrap();
        let mut r = response(vec![]);
        r.rejected = true;
        assert_eq!(result(&e.fields, &r), json!({"action": "decline"}));
        assert_eq!(cancelled(), json!({"action": "cancel"}));
    }

    #[test]
    fn e7_only_http_links_and_done_is_accept_without_content() {
        let e = url_ask("Log in to continue", "https://example.org/login?x=1").unwrap();
        let q = &e.ask.questions[0];
        assert_eq!(q.form.input, Some(InputKind::Url));
        assert_eq!(
            q.form.link.as_deref(),
            Some("https://example.org/login?x=1")
        );
        assert_eq!(
            result(&e.fields, &response(vec![answer("url", &[], None)])),
            json!({"action": "accept"})
        );
        for bad in [
            "javascript:alert(1)",
            "file:///etc/passwd",
            "https://",
            "ftp://x.org",
        ] {
            assert!(url_ask("", bad).is_err(), "{bad}");
        }
    }
}
