-- Turnstile schema, version 9. Kept in lockstep with migrations/postgres/0009_queued_prompts.sql.
--
-- P3: how many prompts wait behind each session's open turn, written by the server that runs the
-- session whenever its queue changes. The task summary's queued_prompt_count is their sum, read
-- with the task's sessions like every other projected field, so a refresh on any server writes
-- the same number. A session whose agent is gone (recovery, takeover) has none.
ALTER TABLE sessions ADD COLUMN queued_prompts BIGINT NOT NULL DEFAULT 0;
