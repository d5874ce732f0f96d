"""The notifier's own FastStream broker: the one `serve` runs connects to the embedded
nats-server (which admits only the users written into the data dir) with the service's
credentials, so a held call and its outcome reach the webhook; one that cannot connect says so
and keeps trying."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import nats
import pytest

from tests.service.helpers import unique_prefix, wait_until
from tests.support.natsproc import free_ports
from tests.support.sink import Sink
from workflow import datadir
from workflow.client import Approver, Headgate
from workflow.messages import Released
from workflow.notify.config import NotifyConfig
from workflow.notify.notifier import Notifier
from workflow.service.lifecycle import Service
from workflow.service.settings import Settings
from workflow.service.streams import ensure_streams
from workflow.subjects import Subjects


async def test_serve_notifies_on_the_embedded_server_with_the_service_credentials(
    tmp_path: Path,
) -> None:
    sink = Sink().start()
    data = tmp_path / ".headgate"
    service = Service(Settings(data_dir=data, prefix=unique_prefix(), notify_url=sink.url))
    await service.start()
    try:
        prefix = service.subjects.prefix
        async with (
            Headgate.connect(agent="builder", workspace="acme", prefix=prefix,
                             data_dir=data) as hg,
            Approver.connect(name="me", key=data / datadir.LOCAL_KEY_FILE, prefix=prefix,
                             data_dir=data) as approver,
        ):  # fmt: skip
            ticket = await hg.propose("write_file", {"path": "x.txt"})
            assert ticket.held
            [held] = await asyncio.to_thread(sink.wait_for, 1)
            body = json.loads(held.body)
            assert (body["event"], body["agent"], body["workspace"]) == ("held", "builder", "acme")
            inbox = approver.inbox(workspaces=["acme"])
            item = await asyncio.wait_for(inbox.__anext__(), 10)
            await inbox.aclose()
            assert (await item.approve()).accepted
            assert isinstance(await ticket.result(timeout=10), Released)
            outcome = json.loads((await asyncio.to_thread(sink.wait_for, 2))[1].body)
            assert (outcome["event"], outcome["request_id"]) == ("released", body["request_id"])
    finally:
        await service.stop()
        sink.stop()


async def test_a_notifier_that_cannot_reach_its_server_says_so_and_keeps_trying(
    nats_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The client it asks and records with is connected; its broker is given a port where no
    # server listens (and no credentials may show in what it logs).
    [port] = free_ports(1)
    nc = await nats.connect(nats_url)
    subjects = Subjects(unique_prefix())
    await ensure_streams(nc.jetstream(), subjects)  # what the service would have created
    notifier = Notifier.open(
        nc, NotifyConfig.model_validate({"channels": {"ops": {"url": "http://127.0.0.1:9"}}}),
        fallback_secret=b"k" * 32, subjects=subjects,
        servers=[f"nats://user:hunter2@127.0.0.1:{port}"],
        connect={"max_reconnect_attempts": 1, "reconnect_time_wait": 0.1},
        sleep=lambda _: asyncio.sleep(0),
    )  # fmt: skip
    stop = asyncio.Event()
    try:
        with caplog.at_level(logging.ERROR, logger="headgate.notify"):
            task = asyncio.create_task(notifier.run(stop))

            async def told() -> list[str]:
                return [r.getMessage() for r in caplog.records if "cannot read" in r.message]

            [said, *_] = await wait_until(told, bool)
            assert f"127.0.0.1:{port}" in said
            assert "NoServersError" in said
            assert "hunter2" not in said
            assert not task.done()  # still trying
            stop.set()
            await asyncio.wait_for(task, 10)  # and stops while it waits to try again
    finally:
        await notifier.close()
        await nc.close()
