"""The agents people run, gated by Headgate: one module per client hook and the MCP gateway.

Each client module (`claude_code`, `codex`, `gemini`, `cursor`) is pure: it turns the client's
hook JSON into a `HookCall` and a Headgate `Answer` into the output that client honours.
`hook` is the process a client starts per tool call, and fails closed whatever happens; it
does its I/O through `lite`, a small synchronous NATS client (`litenats`) that starts in a
fraction of the SDK's time. `gate` does the same through the agent SDK, like any agent (the MCP
gateway uses it); `flow` holds the steps both share. Nothing here imports the service or
the store (an import-linter contract in pyproject.toml holds that).
"""
