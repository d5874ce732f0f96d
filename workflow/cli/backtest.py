"""`headgate policy backtest NEW.toml`: what a new policy would have decided over history."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from workflow.cli.common import DEFAULT_DATA_DIR, DataDir, JsonOut, console, fail, print_json
from workflow.cli.offline import DbOpt, _db_url, opened


def backtest(
    policy_file: Annotated[
        Path, typer.Argument(metavar="NEW.toml", help="The policy to try on past proposals.")
    ],
    since: Annotated[
        str | None,
        typer.Option("--since", help="Only proposals of this last period (7d, 24h). Default: all."),
    ] = None,
    examples: Annotated[int, typer.Option("--examples", min=0, max=50)] = 3,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    database_url: DbOpt = None,
    json_out: JsonOut = False,
) -> None:
    """Re-evaluate every stored proposal under NEW.toml and report what would have changed:
    allowed / held / denied counts, the tools and agents behind the differences, prompts per
    day, and examples. Reads the database only (no NATS, no service needed)."""
    import asyncio
    from datetime import UTC, datetime

    from workflow.policy.backtest import Backtest
    from workflow.policy.durations import parse_duration
    from workflow.policy.load import load_policy
    from workflow.store.engine import Database
    from workflow.store.history import past_calls

    policy = load_policy(policy_file)
    start = None
    if since is not None:
        try:
            seconds = parse_duration(since)
        except ValueError as exc:
            fail(f"--since {exc}")
        if not isinstance(seconds, int) or seconds <= 0:
            fail("--since takes a period such as 7d, 24h or 3600")
        start = datetime.now(UTC) - timedelta(seconds=seconds)
    url = _db_url(database_url, data_dir)

    async def run() -> dict[str, Any]:
        db = await opened(url, lambda: Database.open(url, create=False))
        result = Backtest(policy, examples=examples)
        try:
            async for page in past_calls(db, since=start):
                for call in page:
                    result.add(call)
        finally:
            await db.close()
        return result.report()

    report = asyncio.run(run())
    if json_out:
        print_json(report)
        return
    print_report(report, since)


def print_report(report: dict[str, Any], since: str | None) -> None:
    from rich.table import Table

    period = f" of the last {since}" if since else ""
    console.print(
        f"Policy {report['policy_revision']} over {report['proposals']} stored proposals"
        f"{period}: [bold]{report['changed']}[/] would be decided differently."
    )
    if report["unreadable"]:
        console.print(f"{report['unreadable']} stored proposals could not be read again.")
    table = Table("decision", "stored", "new policy")
    for decision, before in report["before"].items():
        table.add_row(decision, str(before), str(report["after"][decision]))
    console.print(table)
    for change in report["changes"]:
        console.print(f"  {change['from']} → {change['to']}: {change['count']}")
    if report["tools"]:
        tools = ", ".join(f"{t} ({n})" for t, n in report["tools"].items())
        console.print(f"tools behind the changes: {escape(tools)}")
        agents = ", ".join(f"{a} ({n})" for a, n in report["agents"].items())
        console.print(f"agents behind the changes: {escape(agents)}")
    load = report["prompts_per_day"]
    console.print(f"approval prompts per day: {load['before']} stored, {load['after']} new")
    for group in report["examples"]:
        console.print(f"examples of {group['from']} → {group['to']}:")
        for call in group["calls"]:
            console.print(
                f"  {escape(call['proposal_id'])} {escape(call['agent'])} "
                f"{escape(call['tool'])}: {escape(call['reason'])}"
            )
    sys.stdout.flush()
