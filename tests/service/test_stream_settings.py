"""The service brings an existing stream up to date: the freezes stream of an older version
gets direct gets (the approvers read the latest freeze with one)."""

from __future__ import annotations

import nats

from tests.service.helpers import unique_prefix
from workflow.service.streams import ensure_streams, stream_configs
from workflow.subjects import Subjects


async def test_an_older_controls_stream_gets_direct_gets_and_the_others_stay(
    nats_url: str,
) -> None:
    subjects = Subjects(unique_prefix())
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        older = [c for c in stream_configs(subjects) if c.name == subjects.stream("controls")]
        older[0].allow_direct = None  # as created before approvers read it
        await js.add_stream(config=older[0])
        assert not (await js.stream_info(subjects.stream("controls"))).config.allow_direct
        await ensure_streams(js, subjects)
        controls = await js.stream_info(subjects.stream("controls"))
        assert controls.config.allow_direct
        results = await js.stream_info(subjects.stream("results"))
        assert not results.config.allow_direct
    finally:
        for config in stream_configs(subjects):
            assert config.name is not None
            await nc.jetstream().delete_stream(config.name)
        await nc.close()
