-- E2: how the agent asked: through our MCP tool (`mcp`) or ACP elicitation (`elicitation`).
ALTER TABLE clarification_bundles ADD COLUMN source TEXT NOT NULL DEFAULT 'mcp';
