"""The agents people run, gated by Headgate: one module per client hook and the MCP gateway.

Each client module (`claude_code`, `codex`, `gemini`, `cursor`) is pure: it turns the client's
hook JSON into a `HookCall` and a Headgate `Answer` into the output that client honours.
`gate` does the I/O through the agent SDK, like any agent; `hook` is the process a client
starts per tool call, and fails closed whatever happens. Nothing here imports the service or
the store (an import-linter contract in pyproject.toml holds that).
"""
