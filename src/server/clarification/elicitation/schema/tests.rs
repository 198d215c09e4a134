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
    let long = json!({"properties": {"x": {"type": "string", "description": "y".repeat(10_000)}}});
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
