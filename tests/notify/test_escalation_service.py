"""Escalation in a running service with an injected clock (no sleeps): each step is an event
on escalated.<workspace>, an audit record and a notification; raise tightens the request,
expire closes it as expired. Also: `[notify]` in the policy drives the notifier `serve` runs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.service.helpers import decision, propose, running_service, send_decision
from tests.support.sink import Sink
from workflow.service.escalator import escalate_once
from workflow.signing import ApproverKey


@pytest.fixture
def sinks() -> Iterator[tuple[Sink, Sink]]:
    team, pager = Sink().start(), Sink().start()
    yield team, pager
    team.stop()
    pager.stop()


def policy(tmp_path: Path, team: Sink, pager: Sink, alice: ApproverKey) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(
        f"""
[approvers.alice]
key = "{alice.public_key}"
roles = ["approver"]

[approval.escalation]
steps = [
  {{ after = "15m", action = "remind" }},
  {{ after = "30m", action = "notify", roles = ["lead"], channels = ["pager"] }},
  {{ after = "45m", action = "raise", roles = ["lead"] }},
  {{ after = "50m", action = "expire" }},
]

[notify]
inbox_url = "https://headgate.example.com"
[notify.channels.team]
url = "{team.url}/team"
[notify.channels.pager]
url = "{pager.url}/pager"
[[notify.routes]]
channels = ["team"]
"""
    )
    return path


async def bodies(sink: Sink, count: int) -> list[dict[str, object]]:
    got = await asyncio.to_thread(sink.wait_for, count)
    return [json.loads(r.body) for r in got]


async def test_a_waiting_request_climbs_the_ladder_step_by_step(
    nats_url: str, tmp_path: Path, sinks: tuple[Sink, Sink]
) -> None:
    team, pager = sinks
    alice = ApproverKey.generate()
    path = policy(tmp_path, team, pager, alice)
    # The periodic loop stays out of the way: the test moves the clock and takes the steps.
    async with running_service(nats_url, tmp_path / "d", policy_path=path,
                               sweep_interval=3600) as h:  # fmt: skip
        ctx = h.service.ctx
        assert ctx is not None
        pid = await propose(h.nc, h.subjects, agent="builder-7", tool="write_file",
                            arguments={"path": "notes.txt"})  # fmt: skip
        item = (await h.observer.wait_for("inbox", pid))[0]
        rid = item["request_id"]
        [held] = await bodies(team, 1)
        assert held["event"] == "held"
        assert held["url"] == f"https://headgate.example.com/requests/{rid}"
        start = datetime.fromisoformat(item["created_at"])

        def at(minutes: int) -> None:
            ctx.now = lambda: start + timedelta(minutes=minutes)  # type: ignore[method-assign]

        at(14)
        assert await escalate_once(ctx) == 0
        at(16)
        assert await escalate_once(ctx) == 1
        assert await escalate_once(ctx) == 0  # once
        [remind] = await h.observer.wait_for("escalated", pid)
        assert remind["action"] == "remind"
        assert remind["_subject"] == f"{h.subjects.prefix}.escalated.default"
        reminded = (await bodies(team, 2))[1]
        assert reminded["event"] == "escalated"
        assert "Reminder: still waiting, 0 of 1 approvals after 15m." in str(reminded["text"])

        at(31)
        assert await escalate_once(ctx) == 1
        [paged] = await bodies(pager, 1)
        assert paged["event"] == "escalated"
        assert paged["action"] == "notify"
        assert "Escalated to role lead, channel pager" in str(paged["detail"])
        assert len(await bodies(team, 3)) == 3  # the team hears it too

        at(46)
        assert await escalate_once(ctx) == 1
        history = await h.service_history(rid)
        assert history["requirement"]["roles"] == ["lead"]
        # alice is no lead: her approval no longer counts.
        await send_decision(h.nc, h.subjects, decision(alice, rid, item["proposal_digest"],
                                                        issued_at=at_time(start, 46)))  # fmt: skip
        refused = await wait_refused(h, rid)
        assert refused == "no_role"

        at(51)
        assert await escalate_once(ctx) == 1
        [blocked] = await h.observer.wait_for("blocked", pid)
        assert blocked["outcome"] == "expired"
        assert blocked["reason"].startswith("Expired by the escalation ladder")
        kinds = await h.audit_kinds()
        assert kinds.count("escalated") == 4
        steps = await h.observer.wait_for("escalated", pid, count=4)
        assert [s["action"] for s in steps] == ["remind", "notify", "raise", "expire"]
        # The expiry is notified as an outcome, with what the ladder said.
        expired = [b for b in await bodies(team, 6) if b["event"] == "expired"]
        assert expired
        assert str(expired[0]["detail"]).startswith("Expired by the escalation ladder")
        assert at_time(start, 0) < datetime.fromisoformat(blocked["blocked_at"])


def at_time(start: datetime, minutes: int) -> datetime:
    return start + timedelta(minutes=minutes)


async def wait_refused(h: object, rid: str) -> str:
    from tests.service.helpers import Harness, wait_until

    assert isinstance(h, Harness)

    async def refusals() -> list[str]:
        history = await h.service_history(rid)
        return [
            str(e["data"].get("refusal"))
            for e in history["events"]
            if e["kind"] == "decision.refused"
        ]

    found = await wait_until(refusals, bool)
    return found[0]


async def test_the_time_to_first_notification_is_measured_per_channel(
    nats_url: str, tmp_path: Path, sinks: tuple[Sink, Sink]
) -> None:
    team, pager = sinks
    path = policy(tmp_path, team, pager, ApproverKey.generate())
    async with running_service(nats_url, tmp_path / "d", policy_path=path) as h:
        ctx = h.service.ctx
        assert ctx is not None
        await propose(h.nc, h.subjects, agent="builder-7", tool="write_file",
                      arguments={"path": "notes.txt"})  # fmt: skip
        await bodies(team, 1)
        registry = ctx.metrics.registry

        def observed() -> float | None:
            return registry.get_sample_value(
                "headgate_time_to_first_notification_seconds_count", {"channel": "team"}
            )

        from tests.service.helpers import wait_until

        async def probe() -> float | None:
            return observed()

        assert await wait_until(probe, lambda v: v == 1.0) == 1.0
