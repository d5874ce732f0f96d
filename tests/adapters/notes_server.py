"""A real stdio MCP server for the proxy tests: reads, writes, a destructive tool, and tools
that make the server misbehave (exit mid-call, never answer).

usage: python notes_server.py NOTES_FILE
"""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

NOTES = sys.argv[1]
server = MCPServer("notes")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def read_note(name: str) -> str:
    """Read one note."""
    return f"note {name}: nothing yet"


@server.tool()
def write_note(name: str, text: str) -> str:
    """Append a note to the notes file."""
    with open(NOTES, "a") as f:
        f.write(f"{name}={text}\n")
    return f"wrote {name}"


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_all() -> str:
    """Delete every note."""
    os.remove(NOTES)
    return "deleted"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def crash() -> str:
    """Exit the server in the middle of the call."""
    os._exit(3)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def hang() -> str:
    """Never answer."""
    time.sleep(3600)
    return "unreachable"


if __name__ == "__main__":
    server.run()
