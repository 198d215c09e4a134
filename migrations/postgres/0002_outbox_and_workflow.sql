-- Turnstile schema, version 2. Kept in lockstep with migrations/sqlite/0002_outbox_and_workflow.sql.
--
-- L18 "acceptance, defined": a detached answer is accepted once its resume is durably owed:
-- a turn with reservation = 'attempted' that carries the prompt to deliver. Dispatch sets
-- reservation = 'none' (one compare-and-set, so it is delivered exactly once).
ALTER TABLE turns ADD COLUMN resume_prompt TEXT;
CREATE INDEX turns_owed ON turns (session_id, created_at, id) WHERE reservation = 'attempted';

-- N3: each completed turn runs its step action at most once. A completion that found an
-- active question records the action as deferred; the detached rejection that frees the
-- barrier takes it (compare-and-set) and runs it.
ALTER TABLE turns ADD COLUMN workflow_deferred BOOLEAN NOT NULL DEFAULT FALSE;
