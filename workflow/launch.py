"""The `headgate` command's entry point.

`headgate hook …` runs once per tool call of a coding agent, so it starts without the CLI
framework (typer, rich and every command module): see `workflow.adapters.hook.main`. Its
`--help` and `--print-config` go through the full CLI like every other command.
"""

from __future__ import annotations

import sys


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["hook"] and not {"--help", "-h", "--print-config"} & set(argv):
        from workflow.adapters.hook import main as hook

        sys.exit(hook(argv[1:]))
    from workflow.cli import main as cli

    cli()
