"""Backtesting a policy over stored proposals: pure core, store streaming, and the CLI."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from workflow.classify.engine import classify
from workflow.cli import app
from workflow.messages import Proposal
from workflow.policy.backtest import Backtest, PastCall
from workflow.policy.engine import evaluate
from workflow.policy.load import load_policy_text
from workflow.policy.model import default_policy
from workflow.routing import route
from workflow.store.history import past_calls
from workflow.store.repo import Store
from workflow.subjects import Subjects

NEW = """
[workspaces.prod.classes.write_local]
decision = "deny"
"""
CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("write_file", {"path": "src/a.py"}, "prod"),
    ("write_file", {"path": "src/a.py"}, "default"),
    ("read_file", {"path": "README.md"}, "prod"),
    ("run_shell", {"command": "npm test"}, "prod"),
    ("run_shell", {"command": "rm -rf build/"}, "default"),
]
DAY = datetime(2026, 11, 2, 9, tzinfo=UTC)


def stored(i: int, agent: str, tool: str, arguments: dict[str, Any], workspace: str) -> PastCall:
    """A proposal as the intake stored it under the default policy."""
    body = {"id": f"p{i}", "agent": agent, "tool": tool, "arguments": arguments,
            "workspace": workspace}  # fmt: skip
    proposal = Proposal.model_validate(body)
    policy = default_policy()
    verdict = evaluate(proposal, classify(proposal, policy.tables_for(tool, None)), policy)
    at = (DAY + timedelta(hours=i * 7)).isoformat()
    return PastCall(f"p{i}", agent, tool, verdict.decision.value, json.dumps(body), at)


def test_a_backtest_reports_what_the_new_policy_changes() -> None:
    result = Backtest(load_policy_text(NEW))
    for i, (tool, arguments, workspace) in enumerate(CALLS * 4):
        result.add(stored(i, f"agent-{i % 2}", tool, arguments, workspace))
    report = result.report()
    assert report["proposals"] == 20
    assert report["changed"] == 4  # the write in prod, four times
    assert report["changes"] == [{"from": "require_approval", "to": "deny", "count": 4}]
    assert report["tools"] == {"write_file": 4}
    assert report["after"]["deny"] == report["before"]["deny"] + 4
    assert report["distinct_calls_evaluated"] == len(CALLS)
    (example,) = report["examples"]
    assert len(example["calls"]) == 3
    assert "prod" in example["calls"][0]["reason"]
    load = report["prompts_per_day"]
    assert load["after"] < load["before"]
    assert sum(d["before"] for d in load["days"]) == report["before"]["require_approval"]


def test_an_unreadable_stored_payload_is_counted_not_fatal() -> None:
    result = Backtest(default_policy())
    result.add(PastCall("p1", "a", "t", "allow", "{not json", DAY.isoformat()))
    result.add(PastCall("p2", "a", "t", "allow", '{"id": "p2", "agent": "a"}', DAY.isoformat()))
    assert result.report()["unreadable"] == 2


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(CALLS) - 1), st.sampled_from(["a", "b"])),
                max_size=30))  # fmt: skip
def test_deciding_each_distinct_call_once_changes_no_result(picks: list[tuple[int, str]]) -> None:
    """The cache is keyed on what classification and policy read: the same counts as
    evaluating every stored proposal on its own."""
    policy = load_policy_text(NEW)
    result = Backtest(policy)
    expected: dict[str, int] = {"allow": 0, "require_approval": 0, "deny": 0}
    for i, (k, agent) in enumerate(picks):
        tool, arguments, workspace = CALLS[k]
        call = stored(i, agent, tool, arguments, workspace)
        result.add(call)
        proposal = Proposal.model_validate_json(call.payload)
        fresh = evaluate(proposal, classify(proposal, policy.tables_for(tool, None)), policy)
        expected[fresh.decision.value] += 1
    assert result.report()["after"] == expected


async def _history(url: str, count: int) -> Store:
    store = await Store.open(url)
    policy = default_policy()
    records = []
    for i in range(count):
        tool, arguments, workspace = CALLS[i % len(CALLS)]
        body = {"id": f"p{i:03d}", "agent": "a", "tool": tool, "arguments": arguments,
                "workspace": workspace}  # fmt: skip
        proposal = Proposal.model_validate(body)
        cls = classify(proposal, policy.tables_for(tool, None))
        verdict = evaluate(proposal, cls, policy)
        at = DAY + timedelta(days=i)
        records.append(route(Subjects(), proposal, json.dumps(body), cls, verdict, at))
        await store.proposals.record(records[-1:], at)
    return store


async def test_stored_proposals_stream_in_pages_and_since_selects_the_period(
    database_url: str,
) -> None:
    store = await _history(database_url, 7)
    try:
        pages = [page async for page in past_calls(store.db, page=3)]
        assert [len(p) for p in pages] == [3, 3, 1]
        ids = [c.proposal_id for p in pages for c in p]
        assert ids == [f"p{i:03d}" for i in range(7)]
        assert pages[0][0].received_at[:10] == "2026-11-02"
        recent = [c async for p in past_calls(store.db, since=DAY + timedelta(days=5)) for c in p]
        assert [c.proposal_id for c in recent] == ["p005", "p006"]
    finally:
        await store.close()


def test_the_cli_prints_the_backtest_as_json(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    url = f"sqlite+aiosqlite:///{data_dir / 'headgate.db'}"

    async def make() -> None:
        await (await _history(url, 10)).close()

    asyncio.run(make())
    policy = tmp_path / "new.toml"
    policy.write_text(NEW)
    out = CliRunner().invoke(
        app, ["policy", "backtest", str(policy), "--data-dir", str(data_dir), "--json"]
    )
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert report["proposals"] == 10
    assert report["changes"] == [{"from": "require_approval", "to": "deny", "count": 2}]
    missing = CliRunner().invoke(app, ["policy", "backtest", str(tmp_path / "nope.toml"),
                                       "--data-dir", str(data_dir)])  # fmt: skip
    assert missing.exit_code != 0
