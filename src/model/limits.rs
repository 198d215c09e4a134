//! Size limits on everything a client or an agent can send, shared by the server (which
//! refuses with a clear error) and the browser (counters, maxlength).

/// One page of the task list.
pub const TASK_PAGE_DEFAULT: u32 = 100;
pub const TASK_PAGE_MAX: u32 = 500;
/// A title search.
pub const QUERY_CHARS: usize = 200;
/// Task titles and descriptions.
pub const TITLE_CHARS: usize = 300;
pub const DESCRIPTION_CHARS: usize = 20_000;
/// A prompt to an agent (a pasted log fits; a novel does not).
pub const PROMPT_CHARS: usize = 100_000;
/// A custom answer or a skip reason (L12).
pub const ANSWER_CHARS: usize = 2_000;
/// Names of workflows, steps, sessions and agent profiles.
pub const NAME_CHARS: usize = 200;
pub const WORKFLOW_STEPS: usize = 20;
/// Agent profiles: the command, its arguments and its environment.
pub const COMMAND_CHARS: usize = 4_096;
pub const ARGS: usize = 64;
pub const ENV_VARS: usize = 64;
pub const ENV_VALUE_CHARS: usize = 8_192;
/// `ask_user_question` fields (spec MCP): ids, titles, prompts, labels, descriptions, context.
pub const ASK_ID_CHARS: usize = 64;
pub const ASK_TITLE_CHARS: usize = 200;
pub const ASK_PROMPT_CHARS: usize = 2_000;
pub const ASK_LABEL_CHARS: usize = 200;
pub const ASK_DESCRIPTION_CHARS: usize = 1_000;
pub const ASK_CONTEXT_CHARS: usize = 8_000;

/// `Err` with a message naming the field when `value` has more than `max` characters.
pub fn at_most(field: &str, value: &str, max: usize) -> Result<(), String> {
    let n = value.chars().count();
    if n > max {
        Err(format!("{field} has {n} characters; the limit is {max}"))
    } else {
        Ok(())
    }
}

/// An environment variable name: a letter or `_`, then letters, digits and `_`, ≤ 128.
pub fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 128
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_count_characters_not_bytes() {
        assert!(at_most("title", &"é".repeat(3), 3).is_ok());
        let e = at_most("title", "abcd", 3).unwrap_err();
        assert!(e.contains("title") && e.contains('3'), "{e}");
    }

    #[test]
    fn env_names_are_shell_names() {
        assert!(is_env_name("OPENAI_API_KEY") && is_env_name("_x1"));
        for bad in ["", "1A", "A-B", "A B", "A=B", &"A".repeat(129)] {
            assert!(!is_env_name(bad), "{bad}");
        }
    }
}
