"""The benchmark's agents publish as agents do: `Nats-Msg-Id` is `<agent>:<proposal id>`
(`workflow.ids.proposal_msg_id`), and the relay's results are still routed to their proposal."""

from __future__ import annotations

import asyncio
import json

import nats

from tests.service.helpers import unique_prefix
from workflow.bench.load import AGENTS, READS_ONLY, Load, Observer, Tracker, drive, settle
from workflow.bench.relay import delete_relay_streams, run_relay, stream_names
from workflow.ids import proposal_msg_id
from workflow.subjects import Subjects


async def test_the_load_sends_agent_bound_message_ids_and_the_relay_results_arrive(
    nats_url: str,
) -> None:
    prefix = unique_prefix()
    stopping = asyncio.Event()
    relay = asyncio.create_task(run_relay(nats_url, prefix, 64, stopping))
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        in_stream, out_stream = stream_names(prefix)
        for _ in range(500):  # the relay makes its streams and its consumer first
            try:
                await js.consumer_info(in_stream, "relay")
                break
            except Exception:
                await asyncio.sleep(0.02)
        observer = Observer(Subjects(prefix), prefix)
        await observer.subscribe(nc)
        tracker = Tracker(relay=True)
        observer.tracker = tracker
        load = Load(
            subject_for=lambda agent: f"{prefix}.in.{agent}", mix=READS_ONLY, count=40,
            duration=60, rate=None, window=40, tag="hgbids",
        )  # fmt: skip
        await drive(js, load, tracker)
        await settle(tracker, idle_timeout=30)
        assert (tracker.published, tracker.completed, tracker.pending) == (40, 40, {})

        sub = await js.subscribe(f"{prefix}.out.>", stream=out_stream, ordered_consumer=True)
        seen = [await sub.next_msg(timeout=10) for _ in range(40)]
        await sub.unsubscribe()
        for msg in seen:
            proposal = json.loads(msg.data)
            assert proposal["agent"] in AGENTS
            assert msg.subject == f"{prefix}.out.{proposal['agent']}"
            assert msg.headers is not None
            want = "relay:" + proposal_msg_id(proposal["agent"], proposal["id"])
            assert msg.headers["Nats-Msg-Id"] == want
    finally:
        stopping.set()
        await relay
        await delete_relay_streams(nc.jetstream(), prefix)
        await nc.close()
