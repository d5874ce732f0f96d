"""Execution reports: only the agent a call was released to may say what happened when it ran.
Another agent's report of that release is refused and audited; the owner's honest report is
the one recorded; a repeat is audited too — no report is dropped without a record."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import nats
import pytest
from sqlalchemy import select

from tests.service.helpers import Harness, propose, running_service, unique_prefix, wait_until
from workflow.messages import Executed
from workflow.store.executions import Executions, Report
from workflow.store.tables import EXECUTIONS


async def _report(h: Harness, agent: str, released: dict[str, str], summary: str) -> None:
    await h.nc.jetstream().publish(h.subjects.executed(agent), _executed(agent, released, summary))


def _executed(agent: str, released: dict[str, str], summary: str) -> bytes:
    return (
        Executed(
            release_id=released["release_id"],
            proposal_id=released["proposal_id"],
            agent=agent,
            success=True,
            summary=summary,
            finished_at=datetime.now(UTC),
        )
        .model_dump_json()
        .encode()
    )


async def test_another_agent_cannot_report_a_release_and_the_owners_report_is_recorded(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    async with running_service(nats_url, tmp_path, database_url=database_url) as h:
        assert h.service.ctx is not None
        store = h.service.ctx.store
        pid = await propose(h.nc, h.subjects, agent="victim", tool="read_file")
        (released,) = await h.observer.wait_for("released", pid)
        # The attacker reports first, on its own subject, naming itself: all it may do.
        await _report(h, "attacker", released, "nothing happened")
        await wait_until(h.audit_kinds, lambda kinds: "executed.refused" in kinds)
        await _report(h, "victim", released, "read 12 lines")
        await _report(h, "victim", released, "read 12 lines again")
        kinds = await wait_until(
            h.audit_kinds, lambda k: "executed" in k and "executed.repeated" in k
        )
        assert kinds.count("executed") == 1
        assert kinds.count("executed.refused") == 1
        assert kinds.count("executed.repeated") == 1
        async with store.db.engine.connect() as conn:
            rows = (await conn.execute(select(EXECUTIONS))).all()
        assert [(r.agent, r.summary) for r in rows] == [("victim", "read 12 lines")]
        refused = [
            json.loads(r.data) for r in await store.audit.rows() if r.kind == "executed.refused"
        ]
        assert "released to agent victim" in refused[0]["message"]
        assert refused[0]["report"]["agent"] == "attacker"


async def test_an_agents_reports_are_recorded_in_the_order_it_sent_them(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    """The first report of a release is the one recorded, even when several arrive in one
    fetch: the service handles a fetched batch of reports in stream order, one at a time."""
    prefix = unique_prefix()
    async with running_service(nats_url, tmp_path, prefix=prefix, database_url=database_url) as h:
        pid = await propose(h.nc, h.subjects, agent="victim", tool="read_file")
        (released,) = await h.observer.wait_for("released", pid)
        subject = h.subjects.executed("victim")
    # While the service is stopped, the agent reports twelve times; the restarted service
    # finds all twelve waiting and fetches them together.
    nc = await nats.connect(nats_url)
    try:
        for i in range(12):
            await nc.jetstream().publish(subject, _executed("victim", released, f"report {i}"))
    finally:
        await nc.close()
    async with running_service(nats_url, tmp_path, prefix=prefix, database_url=database_url) as h:
        assert h.service.ctx is not None
        kinds = await wait_until(h.audit_kinds, lambda k: k.count("executed.repeated") == 11)
        assert kinds.count("executed") == 1
        async with h.service.ctx.store.db.engine.connect() as conn:
            rows = (await conn.execute(select(EXECUTIONS))).all()
        assert [(r.agent, r.summary) for r in rows] == [("victim", "report 0")]
        repeated = [
            json.loads(r.data)["summary"]
            for r in await h.service.ctx.store.audit.rows()
            if r.kind == "executed.repeated"
        ]
        assert repeated == [f"report {i}" for i in range(1, 12)]


async def test_a_report_that_cannot_be_recorded_does_not_hold_up_the_others(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of reports is one transaction; when it fails, the reports are recorded one by
    one, so the one that cannot be recorded is retried alone and the rest are kept."""
    prefix = unique_prefix()
    async with running_service(nats_url, tmp_path, prefix=prefix) as h:
        pids = [await propose(h.nc, h.subjects, agent="victim", tool="read_file") for _ in "abc"]
        released = [(await h.observer.wait_for("released", pid))[0] for pid in pids]
        subject = h.subjects.executed("victim")
    nc = await nats.connect(nats_url)
    try:  # fetched together by the restarted service
        for rel, summary in zip(released, ["good 1", "poison", "good 2"], strict=True):
            await nc.jetstream().publish(subject, _executed("victim", rel, summary))
    finally:
        await nc.close()
    original = Executions.record_many

    async def failing(self: Executions, reports: Sequence[Report], now: datetime) -> list[bool]:
        if any(r.row is not None and r.row.summary == "poison" for r in reports):
            raise RuntimeError("the database refused the report")
        return await original(self, reports, now)

    monkeypatch.setattr(Executions, "record_many", failing)
    async with running_service(nats_url, tmp_path, prefix=prefix) as h:
        assert h.service.ctx is not None
        await wait_until(h.audit_kinds, lambda k: k.count("executed") == 2)
        async with h.service.ctx.store.db.engine.connect() as conn:
            rows = (await conn.execute(select(EXECUTIONS).order_by(EXECUTIONS.c.summary))).all()
        assert [r.summary for r in rows] == ["good 1", "good 2"]
