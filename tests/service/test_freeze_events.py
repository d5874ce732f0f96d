"""A freeze put in force or lifted is news on NATS (`<prefix>.controls.freeze` / `.thaw`),
signed by the service and kept on the controls stream, carrying the freezes in force after it;
a thaw that lifts nothing says nothing."""

from __future__ import annotations

import asyncio
import contextlib
import io
from pathlib import Path

from nats.aio.msg import Msg
from rich.console import Console

from tests.service.helpers import Harness, running_service, wait_until
from workflow.cli.inbox_view import KeyLoader, watch_inbox
from workflow.client.approver import Approver
from workflow.client.display import describe_freeze
from workflow.controls import FreezeChanged
from workflow.eventsig import verify_event
from workflow.web.app import Feed, _templates
from workflow.web.backend import NatsBackend


def root(h: Harness) -> Approver:
    return Approver(h.nc, name="root", key=h.key, prefix=h.subjects.prefix)


async def test_a_freeze_and_its_thaw_are_signed_events_with_the_freezes_in_force(
    nats_url: str, tmp_path: Path
) -> None:
    async with running_service(nats_url, tmp_path) as h:
        assert h.service.ctx is not None
        service_key = h.service.ctx.signer.public_key
        got: asyncio.Queue[Msg] = asyncio.Queue()
        await h.nc.subscribe(h.subjects.controls(">"), cb=got.put)

        await root(h).freeze(workspace="prod", reason="incident 7")
        msg = await asyncio.wait_for(got.get(), 10)
        assert msg.subject == h.subjects.controls("freeze")
        assert verify_event(service_key, msg.subject, msg.data, msg.headers)
        frozen = FreezeChanged.model_validate_json(msg.data)
        assert (frozen.change, frozen.workspace, frozen.by) == ("freeze", "prod", "root")
        assert frozen.message == (
            "Frozen: root froze every call but reads of workspace prod: incident 7."
        )
        assert [f.freeze_id for f in frozen.freezes] == [frozen.freeze_id]

        await root(h).thaw(workspace="elsewhere")  # lifts nothing: no news
        await root(h).thaw(workspace="prod", reason="resolved")
        msg = await asyncio.wait_for(got.get(), 10)
        assert msg.subject == h.subjects.controls("thaw")
        assert verify_event(service_key, msg.subject, msg.data, msg.headers)
        thawed = FreezeChanged.model_validate_json(msg.data)
        assert (thawed.change, thawed.lifted, thawed.freezes) == ("thaw", 1, [])
        assert got.empty()

        info = await h.nc.jetstream().stream_info(h.subjects.stream("controls"))
        assert info.state.messages == 2  # kept for subscribers that come later


async def test_the_live_inbox_shows_a_freeze_while_it_is_in_force(
    nats_url: str, tmp_path: Path
) -> None:
    async with running_service(nats_url, tmp_path) as h:
        out = io.StringIO()
        console = Console(file=out, width=200, color_system=None, force_terminal=False)
        view = asyncio.create_task(
            watch_inbox(root(h), [], 20, 0.2, console, False, KeyLoader(None, tmp_path))
        )

        def last_view() -> str:
            return out.getvalue().rsplit("--- ", 1)[-1]

        try:
            await wait_until(lambda: asyncio.sleep(0, out.getvalue()), lambda t: "pending" in t)
            assert "frozen" not in last_view()
            await root(h).freeze(workspace="prod", reason="incident 7")
            shown = await wait_until(
                lambda: asyncio.sleep(0, last_view()), lambda t: "frozen:" in t
            )
            assert "frozen: every call but reads of workspace prod is held (by root" in shown
            assert "incident 7" in shown
            await root(h).thaw(workspace="prod")
            await wait_until(lambda: asyncio.sleep(0, last_view()), lambda t: "frozen" not in t)
        finally:
            view.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await view


async def test_the_web_inbox_learns_of_a_freeze_from_its_event(
    nats_url: str, tmp_path: Path
) -> None:
    """The web inbox's feed refreshes on the event alone (nobody watching: no periodic
    refresh), and its list shows the freeze."""
    async with running_service(nats_url, tmp_path) as h:
        feed = Feed(NatsBackend(h.nc, h.subjects))
        await feed.start()
        try:
            assert feed.snapshot.freezes == []
            await root(h).freeze(agent="agent-1", all_calls=True, reason="drill")
            await wait_until(lambda: asyncio.sleep(0, feed.snapshot.freezes), bool)
            (shown,) = [describe_freeze(f) for f in feed.snapshot.freezes]
            html = _templates().get_template("list.html").render(groups=[], frozen=[shown])
            assert "Frozen: every call of agent agent-1 is held (by root" in html
            await root(h).thaw(agent="agent-1")
            await wait_until(lambda: asyncio.sleep(0, feed.snapshot.freezes), lambda f: not f)
        finally:
            await feed.stop()
