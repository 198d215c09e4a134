-- Turnstile schema, version 3. Kept in lockstep with migrations/sqlite/0003_task_listing.sql
-- (the backfill below is the one statement written per database).
--
-- The task list is paged by recent update (GET /tasks?cursor=…): open and archived tasks each
-- get an index in that order.
CREATE INDEX tasks_open_by_update ON tasks (updated_at, id) WHERE archived_at IS NULL;
CREATE INDEX tasks_archived_by_update ON tasks (updated_at, id) WHERE archived_at IS NOT NULL;

-- P3: the summary's pending action as a real column, so "tasks with a pending action"
-- (GET /tasks?pending=true) is a query, not a scan of JSON. Written with every summary.
ALTER TABLE task_status_summaries ADD COLUMN pending_action TEXT;
UPDATE task_status_summaries SET pending_action = summary::jsonb->>'pending_action';
CREATE INDEX summaries_pending ON task_status_summaries (task_id) WHERE pending_action IS NOT NULL;
