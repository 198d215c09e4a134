"""A test agent written only on the official ACP Python SDK (`agent-client-protocol`), not on
Turnstile's code: it asks the way Claude Code's ACP adapter does, to prove the product speaks
to agents it did not write (spec/elicitation.md, spec/agents.md A3).

Prompts:
- `elicit`: a form elicitation shaped like Claude Code's AskUserQuestion (`question_0` with
  `oneOf` options plus `question_0_custom`); says `Elicitation result: <JSON>`.
- `mcp`: calls `ask_user_question` on the MCP server the client offered, over stdio (this
  agent advertises no HTTP MCP); says `Tool result: <text>`.
"""

import asyncio
import json
import os

from acp import PROTOCOL_VERSION, Agent, run_agent, update_agent_message_text
from acp.schema import (
    AgentCapabilities,
    ElicitationFormSessionMode,
    ElicitationSchema,
    Implementation,
    InitializeResponse,
    McpCapabilities,
    NewSessionResponse,
    PromptResponse,
)

CLAUDE_FORM = {
    "type": "object",
    "properties": {
        "question_0": {
            "type": "string",
            "title": "Database",
            "description": "Which database should we use?",
            "oneOf": [
                {"const": "PostgreSQL", "title": "PostgreSQL"},
                {"const": "SQLite", "title": "SQLite"},
            ],
        },
        "question_0_custom": {"type": "string", "description": "Other"},
    },
    "required": ["question_0"],
}


async def call_tool_over_stdio(server) -> str:
    """One `tools/call` of `ask_user_question` on a stdio MCP server (JSON-RPC lines)."""
    env = dict(os.environ)
    env.update({v.name: v.value for v in (server.env or [])})
    proc = await asyncio.create_subprocess_exec(
        server.command,
        *(server.args or []),
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        limit=1 << 20,
    )

    async def send(message):
        proc.stdin.write((json.dumps(message) + "\n").encode())
        await proc.stdin.drain()

    async def reply(request_id):
        while True:
            line = await proc.stdout.readline()
            if not line:
                raise RuntimeError("the MCP server closed its output")
            message = json.loads(line)
            if message.get("id") == request_id:
                return message

    await send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "sdk-test-agent", "version": "1"}}})
    await reply(1)
    await send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    await send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "ask_user_question",
        "arguments": {"questions": [{"id": "db", "prompt": "Which database over stdio?",
                                     "options": [{"id": "pg", "label": "PostgreSQL"},
                                                 {"id": "lite", "label": "SQLite"}]}]}}})
    answer = await reply(2)
    proc.stdin.close()
    await proc.wait()
    if "error" in answer:
        return "error " + json.dumps(answer["error"])
    return "".join(c.get("text", "") for c in answer["result"].get("content", []))


class ClaudeShaped(Agent):
    def on_connect(self, conn):
        self.conn = conn
        self.servers = {}

    async def initialize(self, protocol_version, client_capabilities=None, client_info=None, **kwargs):
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(mcp_capabilities=McpCapabilities(http=False, sse=False)),
            agent_info=Implementation(name="sdk-claude-shaped", version="1"),
        )

    async def new_session(self, cwd, mcp_servers=None, **kwargs):
        session_id = f"sdk-{len(self.servers) + 1}"
        self.servers[session_id] = mcp_servers or []
        return NewSessionResponse(session_id=session_id)

    async def prompt(self, session_id, prompt, **kwargs):
        text = "".join(getattr(block, "text", "") for block in prompt).strip()
        if text == "elicit":
            result = await self.conn.create_elicitation(
                message="Before I start",
                mode=ElicitationFormSessionMode(
                    session_id=session_id,
                    requested_schema=ElicitationSchema.model_validate(CLAUDE_FORM),
                ),
            )
            said = "Elicitation result: " + json.dumps(
                result.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=True
            )
        elif text == "mcp":
            stdio = [s for s in self.servers.get(session_id, []) if getattr(s, "command", None)]
            said = "Tool result: " + (await call_tool_over_stdio(stdio[0]) if stdio else "no stdio MCP server")
        else:
            said = f"Echo: {text}"
        await self.conn.session_update(session_id, update_agent_message_text(said))
        return PromptResponse(stop_reason="end_turn")


if __name__ == "__main__":
    asyncio.run(run_agent(ClaudeShaped()))
