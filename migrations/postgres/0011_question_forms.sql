-- E3: what a question asks beyond one option or "Other" text (model::form::Form as
-- JSON); NULL for a plain question.
ALTER TABLE clarification_questions ADD COLUMN form TEXT;
