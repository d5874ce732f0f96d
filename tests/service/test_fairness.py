"""A flooding agent cannot push other agents' calls back by more than its backlog cap."""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.js.errors import APIError

from tests.service.helpers import propose, running_service, unique_prefix, wait_until


async def test_a_flooding_agent_is_refused_past_its_backlog_while_others_get_through(
    nats_url: str, tmp_path: Path
) -> None:
    prefix = unique_prefix()
    async with running_service(nats_url, tmp_path, prefix=prefix, per_agent_backlog=20):
        pass  # creates the streams with a cap of 20 queued proposals per agent
    # Nothing consumes now: the flood queues up to the cap, then JetStream refuses it.
    async with running_service(
        nats_url, tmp_path / "observer-only", prefix=prefix, per_agent_backlog=20
    ) as h:
        await h.service.stop()  # keep its connections for publishing, stop consuming
        flood = [
            await propose(
                h.nc, h.subjects, agent="flood", tool="read_file", arguments={"path": f"f{i}"}
            )
            for i in range(20)
        ]
        with pytest.raises(APIError, match="maximum messages per subject exceeded"):
            await propose(h.nc, h.subjects, agent="flood", tool="read_file")
        quiet = await propose(h.nc, h.subjects, agent="quiet", tool="read_file")
    async with running_service(nats_url, tmp_path, prefix=prefix, per_agent_backlog=20) as h:
        # The queued proposals may be released before the harness's observer subscribes: ask
        # the service for the outcome instead of waiting for the event.
        await wait_until(lambda: h.service_history(quiet), lambda r: r["status"] == "released")
        for pid in flood:
            assert (await h.service_history(pid))["status"] == "released"
