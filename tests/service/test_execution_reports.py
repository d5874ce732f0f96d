"""Execution reports: only the agent a call was released to may say what happened when it ran.
Another agent's report of that release is refused and audited; the owner's honest report is
the one recorded; a repeat is audited too — no report is dropped without a record."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select

from tests.service.helpers import Harness, propose, running_service, wait_until
from workflow.messages import Executed
from workflow.store.tables import EXECUTIONS


async def _report(h: Harness, agent: str, released: dict[str, str], summary: str) -> None:
    report = Executed(
        release_id=released["release_id"],
        proposal_id=released["proposal_id"],
        agent=agent,
        success=True,
        summary=summary,
        finished_at=datetime.now(UTC),
    )
    await h.nc.jetstream().publish(h.subjects.executed(agent), report.model_dump_json().encode())


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
