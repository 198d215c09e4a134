//! What the question overlay holds while the user answers (E8): the picked options and the
//! typed text per question, seeded from each question's defaults, and turned into the answers
//! the server accepts. The same `check_answer` the server runs (E4) tells the overlay which
//! value it would refuse, so the user sees why before sending.

use crate::client::store::IdMap;
use crate::model::form::{InputKind, check_answer};
use crate::model::{Answer, Question};

/// The answers in progress, per question id.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Draft {
    chosen: IdMap<Vec<String>>,
    text: IdMap<String>,
}

impl Draft {
    /// A draft pre-filled from the questions' `default`s (E3): option ids for a choice, the
    /// value's text for a typed input. Defaults naming no option are left out.
    pub fn new(questions: &[Question]) -> Self {
        let mut d = Draft::default();
        for q in questions {
            if q.form.default.is_empty() {
                continue;
            }
            match q.form.input {
                Some(InputKind::Url) => {}
                Some(_) => {
                    d.text.insert(q.id.clone(), q.form.default[0].clone());
                }
                None => {
                    let known: Vec<String> = q
                        .form
                        .default
                        .iter()
                        .filter(|id| q.options.iter().any(|o| &o.id == *id))
                        .cloned()
                        .collect();
                    if !known.is_empty() {
                        d.chosen.insert(q.id.clone(), known);
                    }
                }
            }
        }
        d
    }

    /// Whether several options may be picked: a multi-select form, or a plain MCP question
    /// asked with `multi_select`.
    pub fn multiple(q: &Question) -> bool {
        q.form.multi_select && q.form.max_items != Some(1)
    }

    pub fn is_chosen(&self, qid: &str, oid: &str) -> bool {
        self.chosen
            .get(qid)
            .is_some_and(|c| c.iter().any(|x| x == oid))
    }

    pub fn text(&self, qid: &str) -> String {
        self.text.get(qid).cloned().unwrap_or_default()
    }

    /// A click on an option: a single choice replaces the pick, a multiple one toggles it.
    pub fn pick(&mut self, q: &Question, oid: &str) {
        let picks = self.chosen.get_or_insert_with(&q.id, Vec::new);
        if Self::multiple(q) {
            if let Some(i) = picks.iter().position(|x| x == oid) {
                picks.remove(i);
            } else {
                picks.push(oid.to_string());
            }
        } else {
            *picks = vec![oid.to_string()];
        }
    }

    pub fn set_text(&mut self, qid: &str, value: String) {
        self.text.insert(qid.to_string(), value);
    }

    /// Whether the user has given this question anything (a link is "done" by itself).
    fn given(&self, q: &Question) -> bool {
        q.form.input == Some(InputKind::Url)
            || self.chosen.get(&q.id).is_some_and(|c| !c.is_empty())
            || !self.text(&q.id).trim().is_empty()
    }

    /// This question's answer as sent, `None` when the user gave it nothing.
    fn answer(&self, q: &Question) -> Option<Answer> {
        if !self.given(q) {
            return None;
        }
        let text = self.text(&q.id);
        Some(Answer {
            question_id: q.id.clone(),
            selected_options: self.chosen.get(&q.id).cloned().unwrap_or_default(),
            custom_text: (q.form.input != Some(InputKind::Url) && !text.trim().is_empty())
                .then_some(text),
        })
    }

    /// Why the server would refuse this question's answer (E4), `None` when it would take it.
    /// A question not given yet is no problem here: [`Draft::complete`] waits for it.
    pub fn problem(&self, q: &Question) -> Option<String> {
        check_answer(q, &self.answer(q)?).err()
    }

    /// Whether the question can be sent as it stands: given and valid, or optional and empty.
    pub fn ready(&self, q: &Question) -> bool {
        match self.answer(q) {
            Some(a) => check_answer(q, &a).is_ok(),
            None => !q.form.required,
        }
    }

    /// Whether every question can be sent.
    pub fn complete(&self, questions: &[Question]) -> bool {
        questions.iter().all(|q| self.ready(q))
    }

    /// The answers to send: one per question the user gave something, optional questions left
    /// empty omitted (E4).
    pub fn answers(&self, questions: &[Question]) -> Vec<Answer> {
        questions.iter().filter_map(|q| self.answer(q)).collect()
    }
}

/// The host a link leads to, shown beside it so the user sees where it goes (E7). `None` for
/// anything but an `http(s)` link with a host.
pub fn link_host(link: &str) -> Option<String> {
    let rest = link
        .strip_prefix("https://")
        .or_else(|| link.strip_prefix("http://"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or("");
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::QuestionOption;
    use crate::model::form::Form;

    fn q(id: &str, form: Form) -> Question {
        Question {
            id: id.into(),
            title: None,
            prompt: "?".into(),
            options: ["a", "b", "c"]
                .iter()
                .map(|o| QuestionOption {
                    id: (*o).into(),
                    label: o.to_uppercase(),
                    description: String::new(),
                })
                .collect(),
            form,
        }
    }

    fn typed(id: &str, kind: InputKind) -> Question {
        Question {
            options: vec![],
            ..q(
                id,
                Form {
                    input: Some(kind),
                    other: false,
                    ..Form::default()
                },
            )
        }
    }

    #[test]
    fn a_plain_question_is_answered_by_a_choice_or_by_text() {
        let (x, y) = (q("x", Form::default()), q("y", Form::default()));
        let mut d = Draft::new(&[x.clone(), y.clone()]);
        assert!(!d.complete(std::slice::from_ref(&x)));
        d.set_text("x", "  ".into());
        assert!(!d.ready(&x), "blank text is no answer");
        d.set_text("x", "mine".into());
        assert!(d.ready(&x));
        d.pick(&y, "a");
        d.pick(&y, "b");
        let answers = d.answers(&[x, y]);
        assert_eq!(answers[0].custom_text.as_deref(), Some("mine"));
        assert_eq!(
            answers[1].selected_options,
            ["b"],
            "a single choice replaces"
        );
    }

    #[test]
    fn e8_multi_select_toggles_and_keeps_its_bounds() {
        let m = q(
            "m",
            Form {
                multi_select: true,
                min_items: Some(2),
                ..Form::default()
            },
        );
        let mut d = Draft::default();
        d.pick(&m, "a");
        assert!(d.problem(&m).is_some_and(|p| p.contains("at least 2")));
        assert!(!d.ready(&m));
        d.pick(&m, "c");
        d.pick(&m, "a");
        d.pick(&m, "b");
        assert!(d.is_chosen("m", "b") && !d.is_chosen("m", "a"));
        assert_eq!(
            d.answers(std::slice::from_ref(&m))[0].selected_options,
            ["c", "b"]
        );
        assert!(d.ready(&m));
    }

    #[test]
    fn e8_a_number_out_of_range_is_refused_before_sending() {
        let mut n = typed("n", InputKind::Integer);
        n.form.maximum = Some(10.0);
        let mut d = Draft::default();
        assert_eq!(d.problem(&n), None, "nothing typed yet is no error");
        assert!(!d.ready(&n));
        d.set_text("n", "11".into());
        assert!(d.problem(&n).is_some_and(|p| p.contains("at most 10")));
        d.set_text("n", "ten".into());
        assert!(d.problem(&n).is_some_and(|p| p.contains("whole number")));
        d.set_text("n", "7".into());
        assert!(d.ready(&n));
        let a = &d.answers(&[n])[0];
        assert_eq!(
            (a.custom_text.as_deref(), a.selected_options.len()),
            (Some("7"), 0)
        );
    }

    #[test]
    fn e4_an_optional_question_left_empty_is_omitted() {
        let mut opt = typed("o", InputKind::Text);
        opt.form.required = false;
        let req = q("r", Form::default());
        let mut d = Draft::default();
        d.pick(&req, "a");
        let qs = [opt, req];
        assert!(d.complete(&qs));
        let answers = d.answers(&qs);
        assert_eq!(answers.len(), 1);
        assert_eq!(answers[0].question_id, "r");
    }

    #[test]
    fn e3_defaults_prefill_known_options_and_values() {
        let mut choice = q("c", Form::default());
        choice.form.default = vec!["b".into(), "zz".into()];
        let mut num = typed("n", InputKind::Number);
        num.form.default = vec!["1.5".into()];
        let d = Draft::new(&[choice.clone(), num.clone()]);
        assert!(d.is_chosen("c", "b") && !d.is_chosen("c", "zz"));
        assert_eq!(d.text("n"), "1.5");
        assert!(d.complete(&[choice, num]));
    }

    #[test]
    fn e7_a_link_is_done_without_a_value() {
        let mut link = typed("l", InputKind::Url);
        link.form.link = Some("https://example.org/x".into());
        let d = Draft::default();
        assert!(d.ready(&link));
        let a = &d.answers(&[link])[0];
        assert!(a.selected_options.is_empty() && a.custom_text.is_none());
    }

    #[test]
    fn e7_the_link_host_is_what_the_user_sees() {
        assert_eq!(
            link_host("https://Login.Example.org/a?b#c").as_deref(),
            Some("login.example.org")
        );
        assert_eq!(
            link_host("https://user@evil.test:8443/x").as_deref(),
            Some("evil.test:8443"),
            "a user part does not hide the host"
        );
        assert_eq!(link_host("javascript:alert(1)"), None);
        assert_eq!(link_host("https:///path"), None);
    }
}
