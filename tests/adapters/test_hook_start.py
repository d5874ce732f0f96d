"""`headgate hook` starts light: its own parser, no CLI framework; the same options as the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import typer.main

from workflow.adapters.hook import parser
from workflow.cli import app

HEAVY = ("typer", "rich", "click", "sqlalchemy", "workflow.service", "workflow.store",
         "workflow.classify.engine", "workflow.policy", "tree_sitter")  # fmt: skip
#: What the per-call path does without: the SDK, its NATS client library and the wire models.
SDK = ("nats", "asyncio", "pydantic", "pydantic_core", "workflow.client", "workflow.messages",
       "workflow.signing", "workflow.routing", "workflow.adapters.gate")  # fmt: skip


def heavy(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if m in names or m.startswith(tuple(f"{n}." for n in names)))


def loaded_by(argv: list[str], stdin: str) -> set[str]:
    code = (
        "import atexit, json, sys\n"
        "report = lambda: sys.__stderr__.write('MODULES' + json.dumps(sorted(sys.modules)))\n"
        "atexit.register(report)\n"
        f"sys.argv = ['headgate', *{argv!r}]\n"
        "from workflow.launch import main\n"
        "main()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=stdin, capture_output=True, text=True, check=False
    )
    return set(json.loads(out.stderr.rsplit("MODULES", 1)[1]))


def test_a_hook_for_a_tool_call_loads_the_light_path_but_no_sdk_cli_framework_or_service() -> None:
    event = {"hook_event_name": "PreToolUse", "tool_name": "Read", "session_id": "s",
             "tool_input": {"file_path": "/w/a"}, "cwd": "/w"}  # fmt: skip
    modules = loaded_by(["hook", "claude-code", "--nats-url", "nats://127.0.0.1:1",
                         "--connect-timeout", "0.2"], json.dumps(event))  # fmt: skip
    assert {"workflow.adapters.lite", "workflow.adapters.litenats"} <= modules
    assert heavy(modules, HEAVY) == []
    assert heavy(modules, SDK) == []


def test_importing_the_light_path_loads_no_sdk_in_a_fresh_interpreter() -> None:
    code = (
        "import json, sys\n"
        "import workflow.launch, workflow.adapters.hook, workflow.adapters.lite\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules = set(json.loads(out.stdout))
    assert heavy(modules, SDK + HEAVY) == []
    assert "ssl" not in modules  # loaded only to speak TLS


def test_a_session_event_does_not_even_load_nats() -> None:
    modules = loaded_by(["hook", "codex"], json.dumps({"hook_event_name": "Stop"}))
    assert not any(m == "nats" or m.startswith(("nats.", "pydantic")) for m in modules)


def test_the_light_parser_takes_every_option_of_the_hook_command() -> None:
    command = typer.main.get_command(app).commands["hook"]  # type: ignore[attr-defined]
    cli = {o for p in command.params for o in p.opts if o.startswith("--")}
    light = {o for a in parser()._actions for o in a.option_strings}
    # --print-config and what only it reads (--http, --hook-url) go through the full CLI.
    assert cli - {"--help", "--print-config", "--http", "--hook-url"} == light
