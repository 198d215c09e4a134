//! An elicitation's JSON as a bundle's questions and back (spec/elicitation.md): a form's
//! fields become questions (E3), an answer becomes the agent's typed content (E5), a URL
//! request becomes a link question (E7). Pure functions over the request's JSON.
//!
//! Field order: `agent-client-protocol` hands the schema's `properties` over as a map sorted by
//! key, so questions follow the keys' order, not the order the agent wrote them in.

use serde_json::{Map, Value, json};

use crate::model::form::{Form, InputKind, TextFormat};
use crate::model::limits::{self, at_most};
use crate::model::{Answer, Question, QuestionOption, Response};
use crate::server::clarification::ask::Ask;

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
        ask: Ask {
            questions,
            context,
            source: "elicitation",
        },
        fields: out,
    })
}

/// The id of a URL elicitation's one question.
pub const LINK_QUESTION: &str = "url";

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
        id: LINK_QUESTION.into(),
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
            source: "elicitation",
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

#[cfg(test)]
mod tests;
