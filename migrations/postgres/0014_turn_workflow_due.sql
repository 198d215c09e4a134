-- N3/I6: a completed turn's step action is due until it runs, defers or finds nothing to do;
-- set in the statement that completes the turn, so a crash in between leaves it due for
-- start-up or a takeover to run.
ALTER TABLE turns ADD COLUMN workflow_due BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX turns_workflow_due ON turns (session_id) WHERE workflow_due = TRUE;
