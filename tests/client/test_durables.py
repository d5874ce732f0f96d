"""Agents' and approvers' durable consumers are removed by the server once abandoned."""

from __future__ import annotations

from pathlib import Path

from tests.client.support import KEYS, guarded_service
from tests.client.test_approver_sdk import first_items, held
from workflow.client import Approver
from workflow.client.transport import DURABLE_INACTIVE_THRESHOLD
from workflow.client.worker import consumer_config, consumer_name


async def test_an_agents_and_an_approvers_durables_expire_when_abandoned(
    nats_url: str, tmp_path: Path
) -> None:
    async with guarded_service(nats_url, tmp_path) as h:
        js = h.nc.jetstream()
        results = h.subjects.stream("results")
        await js.add_consumer(results, config=consumer_config(h.subjects, "agent-x"))
        agent = await js.consumer_info(results, consumer_name("agent-x"))
        assert agent.config.inactive_threshold == DURABLE_INACTIVE_THRESHOLD

        await held(h, "a.txt")
        async with Approver.connect(
            nats_url, name="alice", key=KEYS["alice"], prefix=h.subjects.prefix
        ) as alice:
            await first_items(alice, 1, workspaces=["acme"])
            info = await js.consumer_info(h.subjects.stream("inbox"), alice.consumer)
        assert info.config.inactive_threshold == DURABLE_INACTIVE_THRESHOLD
        # The streams keep nothing longer than that: a durable idle longer is of no use.
        for stream in (results, h.subjects.stream("inbox")):
            assert (await js.stream_info(stream)).config.max_age == DURABLE_INACTIVE_THRESHOLD
