"""Decisions the wire does not accept are refused at once with the reason — audited, dead-
lettered without retries — and never leave a record the audit verifier cannot read."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.service.helpers import Harness, decision, propose, running_service, wait_until
from workflow.messages import signed_text
from workflow.store.repo import Store


async def _held(h: Harness) -> dict[str, Any]:
    pid = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": "a.txt"})
    (item,) = await h.observer.wait_for("inbox", pid)
    return item


def _raw_decision(h: Harness, item: dict[str, Any]) -> dict[str, Any]:
    signed = decision(h.key, item["request_id"], item["proposal_digest"])
    return json.loads(signed.model_dump_json())  # type: ignore[no-any-return]


async def _refusals(h: Harness) -> list[dict[str, Any]]:
    assert h.service.ctx is not None
    rows = await h.service.ctx.store.audit.rows()
    return [json.loads(r.data) for r in rows if r.kind == "decision.refused"]


async def test_a_decision_with_a_naive_timestamp_is_refused_at_once_with_the_reason(
    nats_url: str, tmp_path: Path
) -> None:
    async with running_service(nats_url, tmp_path, retry_base_delay=0.05) as h:
        item = await _held(h)
        raw = _raw_decision(h, item)
        raw["issued_at"] = datetime.now().isoformat()  # no timezone
        raw["signature"] = h.key.sign(signed_text(raw).encode())
        await h.nc.jetstream().publish(
            h.subjects.decisions(item["request_id"]), json.dumps(raw).encode()
        )
        (dead,) = await h.observer.wait_for("dead")
        assert dead["deliveries"] == 1  # refused, not retried
        assert "issued_at" in dead["error"]
        assert "timezone" in dead["error"]
        [refused] = await wait_until(lambda: _refusals(h), bool)
        assert refused["refusal"] == "invalid"
        assert "timezone" in refused["message"]
        assert (await h.service_history(item["proposal_id"]))["status"] == "pending"


async def test_an_unsigned_decision_with_a_long_approver_leaves_the_audit_verifiable(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    async with running_service(
        nats_url, tmp_path, database_url=database_url, retry_base_delay=0.05
    ) as h:
        assert h.service.ctx is not None
        item = await _held(h)
        for approver in ("x" * 200, "y" * 128):  # too long for the wire / the longest accepted
            raw = _raw_decision(h, item)
            raw.update(approver=approver, key=None, signature=None)
            await h.nc.jetstream().publish(
                h.subjects.decisions(item["request_id"]), json.dumps(raw).encode()
            )
        refusals = await wait_until(lambda: _refusals(h), lambda r: len(r) == 2)
        assert {r["refusal"] for r in refusals} == {"invalid", "unsigned"}
        check = await h.service.ctx.store.audit.verify()
        assert check.ok, check.problem
        assert h.observer.of("released", item["proposal_id"]) == []


async def test_an_audit_record_longer_than_its_column_still_verifies(tmp_path: Path) -> None:
    """SQLite keeps a string longer than its column's declared length: the verifier reads
    back whatever the writer wrote (records written before the wire was bounded)."""
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'h.db'}")
    try:
        from sqlalchemy import insert

        from workflow.store.chain import GENESIS, chain_hash
        from workflow.store.tables import AUDIT, AUDIT_HEAD

        at, actor, data = "2026-01-01T00:00:00+00:00", "unverified:" + "a" * 200, "{}"
        digest = chain_hash(GENESIS, 1, at, "decision.refused", None, "rq_x", actor, data)

        async with store.db.engine.begin() as conn:
            await conn.execute(
                insert(AUDIT).values(
                    seq=1, at=at, kind="decision.refused", proposal_id=None,
                    request_id="rq_x", actor=actor, data=data, prev_hash=GENESIS, hash=digest,
                )
            )  # fmt: skip
            await conn.execute(AUDIT_HEAD.update().values(seq=1, hash=digest))
        check = await store.audit.verify()
        assert check.ok, check.problem
        assert check.checked == 1
    finally:
        await store.close()
