-- E2: a question's transcript row says how the agent asked, as its bundle does (`mcp` or
-- `elicitation`); NULL on every other row.
ALTER TABLE messages ADD COLUMN source TEXT;
