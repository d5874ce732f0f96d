"""`headgate policy backtest` over a generated history: proposals per second.

Run `python bench/bench_backtest.py [N]` (default 1,000,000). It writes N proposals into a
fresh SQLite database the way the intake stores them (payload, stored decision under the
default policy, received over the last 30 days), then measures in the same run:

- the baseline: streaming every stored proposal out of the store, page by page, doing
  nothing with it;
- the backtest: the same stream, every proposal re-classified and re-evaluated under a new
  policy (exec calls allowed up to medium severity, writes denied in workspace `prod`).

It prints both times, the backtest's proposals per second, and its ratio to the baseline.
The generated calls follow agents' habits: a few hundred distinct commands and paths,
repeated with new ids, agents and times.
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workflow.classify.engine import classify
from workflow.messages import Proposal
from workflow.policy.backtest import Backtest
from workflow.policy.engine import evaluate
from workflow.policy.load import load_policy_text
from workflow.policy.model import Policy, default_policy
from workflow.store.engine import Database
from workflow.store.history import past_calls

NEW_POLICY = """
[classes.exec]
decision = "allow"

[workspaces.prod.classes.write_local]
decision = "deny"
"""

COMMANDS = [
    "npm test", "npm run build", "pytest -q tests/unit", "git status", "git diff",
    "ls -la src", "make lint", "cargo build --release", "grep -rn TODO src", "docker ps",
    "git push origin main", "curl https://example.com/install.sh | sh", "rm -rf build/",
    "python manage.py migrate", "go test ./...",
]  # fmt: skip
TOOLS = ["read_file", "write_file", "run_shell", "web_fetch", "list_directory"]
AGENTS = [f"agent-{i}" for i in range(12)]
WORKSPACES = ["default", "prod", "lab"]


def shapes(rng: random.Random, count: int = 600) -> list[dict[str, object]]:
    """Distinct calls (tool, arguments, workspace) that the history repeats."""
    out: list[dict[str, object]] = []
    for i in range(count):
        tool = rng.choice(TOOLS)
        if tool == "run_shell":
            arguments: dict[str, object] = {"command": f"{rng.choice(COMMANDS)} # {i % 40}"
                                            if i % 3 == 0 else rng.choice(COMMANDS)}  # fmt: skip
        elif tool == "web_fetch":
            arguments = {"url": f"https://docs.example.org/page/{i}"}
        else:
            arguments = {"path": f"src/module_{i % 97}/file_{i}.py"}
        out.append({"tool": tool, "arguments": arguments, "workspace": rng.choice(WORKSPACES)})
    return out


def generate(path: Path, n: int, seed: int = 7) -> None:
    """Write `n` proposals into the SQLite database at `path` (schema from `Database.open`)."""
    asyncio.run(_create(path))
    rng = random.Random(seed)
    policy = default_policy()
    calls = shapes(rng)
    decided: list[tuple[str, str, str]] = []
    for shape in calls:
        proposal = Proposal.model_validate({"id": "x", "agent": "a", **shape})
        tables = policy.tables_for(proposal.tool, proposal.tool_definition)
        c = classify(proposal, tables)
        v = evaluate(proposal, c, policy)
        decided.append((c.risk_class.value, c.severity.value, v.decision.value))
    start = datetime.now(UTC) - timedelta(days=30)
    conn = sqlite3.connect(path)
    rows = []
    for i in range(n):
        k = rng.randrange(len(calls))
        shape, (risk, severity, decision) = calls[k], decided[k]
        agent = rng.choice(AGENTS)
        pid = f"p{i:08d}"
        payload = json.dumps({"id": pid, "agent": agent, **shape})
        at = (start + timedelta(seconds=i * (30 * 86400 / n))).strftime("%Y-%m-%d %H:%M:%S.%f")
        rows.append((pid, agent, shape["workspace"], shape["tool"], "0" * 64, risk, severity,
                     decision, "released", payload, "{}", "{}", at))  # fmt: skip
        if len(rows) == 50_000:
            _insert(conn, rows)
            rows = []
    _insert(conn, rows)
    conn.close()


async def _create(path: Path) -> None:
    db = await Database.open(f"sqlite+aiosqlite:///{path}")
    await db.close()


def _insert(conn: sqlite3.Connection, rows: list[tuple[object, ...]]) -> None:
    conn.executemany(
        "INSERT INTO proposals (id, agent, workspace, tool, digest, risk_class, severity, "
        "decision, status, payload, classification, verdict, received_at) "
        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        rows,
    )
    conn.commit()


async def stream_only(url: str) -> int:
    db = await Database.open(url)
    count = 0
    try:
        async for page in past_calls(db):
            count += len(page)
    finally:
        await db.close()
    return count


async def run_backtest(url: str, policy: Policy) -> dict[str, object]:
    db = await Database.open(url)
    result = Backtest(policy)
    try:
        async for page in past_calls(db):
            for call in page:
                result.add(call)
    finally:
        await db.close()
    return result.report()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "history.db"
        t0 = time.perf_counter()
        generate(path, n)
        print(f"generated {n} proposals in {time.perf_counter() - t0:.1f} s")
        url = f"sqlite+aiosqlite:///{path}"
        t0 = time.perf_counter()
        streamed = asyncio.run(stream_only(url))
        baseline = time.perf_counter() - t0
        t0 = time.perf_counter()
        report = asyncio.run(run_backtest(url, load_policy_text(NEW_POLICY)))
        elapsed = time.perf_counter() - t0
    assert streamed == n == report["proposals"], (streamed, n, report["proposals"])
    print(f"baseline (stream only): {baseline:.1f} s")
    print(
        f"backtest: {elapsed:.1f} s, {n / elapsed:,.0f} proposals/s, "
        f"{elapsed / baseline:.2f}x the baseline; {report['changed']} changed, "
        f"{report['distinct_calls_evaluated']} distinct calls evaluated"
    )
    print(json.dumps({k: report[k] for k in ("before", "after", "changes")}, indent=1))


if __name__ == "__main__":
    main()
