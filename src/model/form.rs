//! What a question asks for beyond "pick one of these options" (E3, E4): several picks, a
//! typed value (text, integer, number), a link to open (E7), whether it may be left out, and
//! the bounds its answer must keep. Shared by the server (which refuses an answer that breaks
//! them, 422) and the overlay (which renders the input the question asks for).

use serde::{Deserialize, Serialize};

use super::{Answer, Question};

/// The value a question takes instead of one of its options.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    Text,
    Integer,
    Number,
    /// E7: a link the user opens themselves; answered "done" (no value) or skipped.
    Url,
}

/// A text value's expected shape (JSON Schema `format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TextFormat {
    Email,
    Uri,
    Date,
    DateTime,
}

/// The form part of a [`Question`]; every field at its default is a plain MCP question: one
/// or more options picked, or "Other" text, required.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Form {
    /// Several options are expected (checkboxes). How many may be picked is
    /// `min_items`/`max_items`: a single-choice form question has `max_items: 1`; a plain
    /// MCP question takes one or more.
    #[serde(default, skip_serializing_if = "is_false")]
    pub multi_select: bool,
    /// A typed value instead of options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<InputKind>,
    /// `false`: the question may be left unanswered.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub required: bool,
    /// Free "Other" text is accepted beside the options.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub other: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_items: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_items: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_length: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<TextFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum: Option<f64>,
    /// What the input is pre-filled with: an option id (or several, comma-free, for
    /// `multi_select`) or the value's text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default: Vec<String>,
    /// `input: url`: the link, shown as text with its host and opened only by a click.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

impl Default for Form {
    fn default() -> Self {
        Form {
            multi_select: false,
            input: None,
            required: true,
            other: true,
            min_items: None,
            max_items: None,
            min_length: None,
            max_length: None,
            format: None,
            minimum: None,
            maximum: None,
            default: Vec::new(),
            link: None,
        }
    }
}

impl Form {
    /// A plain MCP question's form (nothing beyond options and "Other" text).
    pub fn is_plain(&self) -> bool {
        *self == Form::default()
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_true(b: &bool) -> bool {
    *b
}

fn yes() -> bool {
    true
}

/// E4: whether `answer` keeps what its question's form asks (the checks beyond "the option
/// exists", which every question has). The message names the question and the rule.
pub fn check_answer(q: &Question, answer: &Answer) -> Result<(), String> {
    let form = &q.form;
    let picked = answer.selected_options.len() as u64;
    let text = answer.custom_text.as_deref().unwrap_or("");
    let id = &q.id;
    match form.input {
        None => {
            if !form.other && !text.is_empty() {
                return Err(format!("question {id:?} takes no text of its own"));
            }
            if form.max_items == Some(1) && picked > 1 {
                return Err(format!("question {id:?} takes one option, got {picked}"));
            }
            if picked > 0 {
                if let Some(min) = form.min_items.filter(|&m| picked < m) {
                    return Err(format!(
                        "question {id:?} needs at least {min} options, got {picked}"
                    ));
                }
                if let Some(max) = form.max_items.filter(|&m| picked > m) {
                    return Err(format!(
                        "question {id:?} takes at most {max} options, got {picked}"
                    ));
                }
            }
            Ok(())
        }
        Some(kind) => {
            if picked > 0 {
                return Err(format!("question {id:?} takes a value, not options"));
            }
            match kind {
                InputKind::Url => {
                    if !text.is_empty() {
                        return Err(format!("question {id:?} (a link) takes no text"));
                    }
                    Ok(())
                }
                InputKind::Text => check_text(id, form, text),
                InputKind::Integer => {
                    let v: i64 = text.trim().parse().map_err(|_| {
                        format!("question {id:?} needs a whole number, got {text:?}")
                    })?;
                    check_range(id, form, v as f64)
                }
                InputKind::Number => {
                    let v: f64 = text
                        .trim()
                        .parse()
                        .ok()
                        .filter(|v: &f64| v.is_finite())
                        .ok_or_else(|| format!("question {id:?} needs a number, got {text:?}"))?;
                    check_range(id, form, v)
                }
            }
        }
    }
}

fn check_text(id: &str, form: &Form, text: &str) -> Result<(), String> {
    let n = text.chars().count() as u32;
    if let Some(min) = form.min_length.filter(|&m| n < m) {
        return Err(format!(
            "question {id:?} needs at least {min} characters, got {n}"
        ));
    }
    if let Some(max) = form.max_length.filter(|&m| n > m) {
        return Err(format!(
            "question {id:?} takes at most {max} characters, got {n}"
        ));
    }
    let shaped = match form.format {
        None => true,
        Some(TextFormat::Email) => {
            let mut parts = text.splitn(2, '@');
            let (user, host) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            !user.is_empty() && host.contains('.') && !text.contains(char::is_whitespace)
        }
        Some(TextFormat::Uri) => text.split_once("://").is_some_and(|(scheme, rest)| {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
                && !rest.is_empty()
        }),
        Some(TextFormat::Date) => is_date(text),
        Some(TextFormat::DateTime) => text
            .split_once(['T', 't', ' '])
            .is_some_and(|(d, t)| is_date(d) && t.len() >= 5 && t.as_bytes()[2] == b':'),
    };
    if !shaped {
        let format = serde_json::to_value(form.format).unwrap_or_default();
        return Err(format!(
            "question {id:?} needs a {format} value, got {text:?}"
        ));
    }
    Ok(())
}

/// `YYYY-MM-DD` with a month 1–12 and a day 1–31.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && digits(0..4)
        && digits(5..7)
        && digits(8..10)
        && (1..=12).contains(&s[5..7].parse::<u8>().unwrap_or(0))
        && (1..=31).contains(&s[8..10].parse::<u8>().unwrap_or(0))
}

fn check_range(id: &str, form: &Form, v: f64) -> Result<(), String> {
    if let Some(min) = form.minimum.filter(|&m| v < m) {
        return Err(format!("question {id:?} needs at least {min}, got {v}"));
    }
    if let Some(max) = form.maximum.filter(|&m| v > m) {
        return Err(format!("question {id:?} takes at most {max}, got {v}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::QuestionOption;

    fn q(form: Form) -> Question {
        Question {
            id: "k".into(),
            title: None,
            prompt: "?".into(),
            options: ["a", "b", "c"]
                .iter()
                .map(|id| QuestionOption {
                    id: (*id).into(),
                    label: id.to_uppercase(),
                    description: String::new(),
                })
                .collect(),
            form,
        }
    }

    fn a(picked: &[&str], text: Option<&str>) -> Answer {
        Answer {
            question_id: "k".into(),
            selected_options: picked.iter().map(|s| (*s).into()).collect(),
            custom_text: text.map(str::to_string),
        }
    }

    #[test]
    fn a_plain_question_round_trips_without_form_fields() {
        let plain = q(Form::default());
        let v = serde_json::to_value(&plain).unwrap();
        let mut keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["id", "options", "prompt"]);
        assert_eq!(serde_json::from_value::<Question>(v).unwrap(), plain);
    }

    #[test]
    fn e4_single_choice_takes_one_option() {
        let single = Form {
            max_items: Some(1),
            ..Form::default()
        };
        assert!(check_answer(&q(single.clone()), &a(&["a"], None)).is_ok());
        let e = check_answer(&q(single), &a(&["a", "b"], None)).unwrap_err();
        assert!(e.contains("\"k\"") && e.contains("one option"), "{e}");
        // A plain MCP question takes one or more (spec/api.md `selected_options`).
        assert!(check_answer(&q(Form::default()), &a(&["a", "b"], None)).is_ok());
    }

    #[test]
    fn e4_multi_select_keeps_min_and_max_items() {
        let form = Form {
            multi_select: true,
            min_items: Some(2),
            max_items: Some(2),
            ..Form::default()
        };
        assert!(check_answer(&q(form.clone()), &a(&["a", "b"], None)).is_ok());
        assert!(check_answer(&q(form.clone()), &a(&["a"], None)).is_err());
        assert!(check_answer(&q(form), &a(&["a", "b", "c"], None)).is_err());
    }

    #[test]
    fn e4_text_keeps_length_and_format() {
        let form = Form {
            input: Some(InputKind::Text),
            min_length: Some(3),
            max_length: Some(20),
            format: Some(TextFormat::Email),
            ..Form::default()
        };
        assert!(check_answer(&q(form.clone()), &a(&[], Some("me@example.org"))).is_ok());
        assert!(check_answer(&q(form.clone()), &a(&[], Some("me"))).is_err());
        assert!(check_answer(&q(form.clone()), &a(&[], Some("not an email"))).is_err());
        assert!(check_answer(&q(form.clone()), &a(&["a"], Some("me@example.org"))).is_err());
        let long = format!("{}@example.org", "x".repeat(20));
        assert!(check_answer(&q(form), &a(&[], Some(&long))).is_err());
    }

    #[test]
    fn e4_numbers_parse_and_keep_their_range() {
        let int = Form {
            input: Some(InputKind::Integer),
            minimum: Some(1.0),
            maximum: Some(10.0),
            ..Form::default()
        };
        assert!(check_answer(&q(int.clone()), &a(&[], Some("10"))).is_ok());
        for bad in ["11", "0", "2.5", "two", ""] {
            assert!(
                check_answer(&q(int.clone()), &a(&[], Some(bad))).is_err(),
                "{bad}"
            );
        }
        let num = Form {
            input: Some(InputKind::Number),
            maximum: Some(1.5),
            ..Form::default()
        };
        assert!(check_answer(&q(num.clone()), &a(&[], Some("1.25"))).is_ok());
        for bad in ["1.75", "NaN", "inf", "x"] {
            assert!(
                check_answer(&q(num.clone()), &a(&[], Some(bad))).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn e4_dates() {
        assert!(is_date("2026-12-07"));
        for bad in [
            "2026-13-01",
            "2026-12-00",
            "26-12-07",
            "2026/12/07",
            "2026-12-0x",
        ] {
            assert!(!is_date(bad), "{bad}");
        }
    }

    #[test]
    fn e7_a_link_is_answered_without_a_value() {
        let form = Form {
            input: Some(InputKind::Url),
            link: Some("https://example.org/login".into()),
            ..Form::default()
        };
        assert!(check_answer(&q(form.clone()), &a(&[], None)).is_ok());
        assert!(check_answer(&q(form), &a(&[], Some("done"))).is_err());
    }

    #[test]
    fn e3_a_choice_without_other_refuses_text() {
        let form = Form {
            other: false,
            ..Form::default()
        };
        assert!(check_answer(&q(form), &a(&["a"], Some("mine"))).is_err());
    }
}
