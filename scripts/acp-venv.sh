#!/usr/bin/env bash
# The test-only Python environment of the agent written on the official ACP SDK
# (tests/agents/claude_shaped_agent.py): target/acp-venv, made once (a stamp names the pinned
# version), from PyPI.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/target/acp-venv"
PIN="agent-client-protocol==0.12.1"
if [ "$(cat "$VENV/.pinned" 2>/dev/null)" = "$PIN" ]; then
  exit 0
fi
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "$PIN"
echo "$PIN" > "$VENV/.pinned"
