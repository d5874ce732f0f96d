"""The embedded nats-server admits only the users `serve` wrote into the data dir, each to its
role's subjects; the CLI and the SDKs find those credentials there."""

from __future__ import annotations

import asyncio
import json
import socket
import stat
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from tests.service.helpers import unique_prefix
from tests.support.executable import headgate_executable
from workflow import datadir
from workflow.client import Approver, Headgate
from workflow.client.connection import Role, credentials_file, inbox_prefix_for
from workflow.controls import FreezeChanged
from workflow.errors import ConfigError
from workflow.eventsig import verify_event
from workflow.messages import Released
from workflow.service.embedded_access import accounts_config, permissions
from workflow.service.lifecycle import Service
from workflow.service.settings import Settings
from workflow.subjects import Subjects


class Refusals:
    """A raw client of one role that records the server's permission refusals."""

    def __init__(self) -> None:
        self.errors: asyncio.Queue[str] = asyncio.Queue()

    async def on_error(self, exc: Exception) -> None:
        await self.errors.put(str(exc))

    async def next(self) -> str:
        return await asyncio.wait_for(self.errors.get(), 10)


async def as_role(service: Service, role: Role, refusals: Refusals) -> NATS:
    return await nats.connect(
        service.url, nkeys_seed=str(credentials_file(service.settings.data_dir, role)),
        inbox_prefix=inbox_prefix_for(role.value), error_cb=refusals.on_error,
        allow_reconnect=False,
    )  # fmt: skip


async def test_a_client_without_credentials_is_refused(embedded: Service) -> None:
    nc = NATS()
    try:
        with pytest.raises(Exception, match="Authorization Violation"):
            await nc.connect(embedded.url, allow_reconnect=False, connect_timeout=5)
    finally:
        await nc.close()  # nats-py leaves the refused socket open otherwise


async def test_the_credentials_and_the_data_dir_are_private(embedded: Service) -> None:
    data = embedded.settings.data_dir
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert stat.S_IMODE((data / datadir.CREDENTIALS_DIR).stat().st_mode) == 0o700
    for role in Role:
        seed = credentials_file(data, role)
        assert stat.S_IMODE(seed.stat().st_mode) == 0o600
        assert seed.read_text().startswith("SU")


async def test_an_agent_cannot_decide_nor_read_the_api_nor_the_inbox(embedded: Service) -> None:
    subjects, refusals = embedded.subjects, Refusals()
    nc = await as_role(embedded, Role.AGENT, refusals)
    try:
        await nc.publish(subjects.decisions("rq_x"), b"{}")
        assert "permissions violation for publish" in await refusals.next()
        with pytest.raises(nats.errors.TimeoutError):
            await nc.request(subjects.api("pending"), b"{}", timeout=2)
        assert f'publish to "{subjects.api("pending")}"' in await refusals.next()
        await nc.subscribe(subjects.inbox("*"))
        assert "permissions violation for subscription" in await refusals.next()
        await nc.subscribe("_INBOX.approver.>")  # another role's replies
        assert "permissions violation for subscription" in await refusals.next()
    finally:
        await nc.close()


async def test_an_approver_cannot_propose_nor_forge_events(embedded: Service) -> None:
    subjects, refusals = embedded.subjects, Refusals()
    nc = await as_role(embedded, Role.APPROVER, refusals)
    try:
        for subject in (subjects.proposals("a"), subjects.released("a"), subjects.inbox("acme")):
            await nc.publish(subject, b"{}")
            assert f'publish to "{subject}"' in await refusals.next()
    finally:
        await nc.close()


async def test_the_sdks_and_the_cli_work_with_the_written_credentials(
    embedded: Service, tmp_path: Path
) -> None:
    data, prefix = embedded.settings.data_dir, embedded.subjects.prefix
    seed = data / datadir.LOCAL_KEY_FILE  # the local approver the default policy trusts
    async with (
        Headgate.connect(agent="builder", workspace="acme", prefix=prefix, data_dir=data) as hg,
        Approver.connect(name="me", key=seed, prefix=prefix, data_dir=data) as approver,
    ):
        ticket = await hg.propose("write_file", {"path": "x.txt"})
        assert ticket.held
        inbox = approver.inbox(workspaces=["acme"])
        item = await asyncio.wait_for(inbox.__anext__(), 10)
        await inbox.aclose()
        assert (await item.approve()).accepted
        assert isinstance(await ticket.result(timeout=10), Released)
        read = await hg.propose("read_file", {"path": "README.md"})
        assert isinstance(await read.result(timeout=10), Released)

    cli = ["--data-dir", str(data), "--prefix", prefix]
    proposed = await run_cli(tmp_path, "propose", "--agent", "demo", "--tool", "write_file",
                             "--id", "w1", "--args", '{"path": "n.txt"}', "--wait", "1",
                             *cli)  # fmt: skip
    assert proposed.returncode == 4, proposed.stderr
    pending = await run_cli(tmp_path, "pending", "--json", *cli)
    assert [i["proposal_id"] for i in json.loads(pending.stdout)["items"]] == ["w1"]
    approved = await run_cli(tmp_path, "approve", "w1", *cli)
    assert approved.returncode == 0, approved.stderr
    shown = await run_cli(tmp_path, "show", "w1", "--json", *cli)
    assert json.loads(shown.stdout)["status"] == "released"


async def run_cli(cwd: Path, *args: str) -> CompletedCli:
    proc = await asyncio.create_subprocess_exec(
        headgate_executable(), *args, cwd=cwd, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return CompletedCli(proc.returncode or 0, out.decode(), err.decode())


class CompletedCli:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def test_the_account_config_names_every_role_and_no_anonymous_user() -> None:
    subjects = Subjects("hg")
    text = accounts_config({role: f"U{role.value.upper()}KEY" for role in Role}, subjects)
    for role in Role:
        assert f"nkey: U{role.value.upper()}KEY  # {role.value}" in text
    assert "no_auth_user" not in text
    assert "hg.decisions.*" in permissions(Role.APPROVER, subjects).publish
    assert "hg.decisions.*" not in permissions(Role.AGENT, subjects).publish
    # An agent asks about its own proposals and tools, and for the service's public key.
    asks = {s for s in permissions(Role.AGENT, subjects).publish if s.startswith("hg.api.")}
    assert asks == {"hg.api.status.*", "hg.api.offered.*", "hg.api.key"}


async def test_the_embedded_server_keeps_its_port_and_a_taken_one_is_handled(
    tmp_path: Path,
) -> None:
    data = tmp_path / ".headgate"
    prefix = unique_prefix()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # Asked for explicitly: a one-line error naming the way out.
        explicit = Service(Settings(data_dir=data, prefix=prefix, nats_port=port))
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}: the port is"):
            await explicit.start()
        # Only recorded from last time: a free port instead, recorded for next time.
        datadir.record_port(data, port)
        service = Service(Settings(data_dir=data, prefix=prefix))
        await service.start()
        try:
            moved = int(service.url.rsplit(":", 1)[1])
            assert moved != port
            assert datadir.recorded_port(data) == moved
        finally:
            await service.stop()
    again = Service(Settings(data_dir=data, prefix=prefix))
    await again.start()
    try:
        assert again.url == f"nats://127.0.0.1:{moved}"
    finally:
        await again.stop()


async def test_an_approver_reaches_the_controls_on_the_embedded_default(
    embedded: Service, tmp_path: Path
) -> None:
    """Grants, freezes and backtests are approvers' requests: the approver credentials `serve`
    writes may ask them (each request is still signed and authorised by the service)."""
    data, prefix = embedded.settings.data_dir, embedded.subjects.prefix
    cli = ["--data-dir", str(data), "--prefix", prefix]
    listed = await run_cli(tmp_path, "grants", "list", "--json", *cli)
    assert listed.returncode == 0, listed.stderr
    assert "permissions violation" not in listed.stderr
    frozen = await run_cli(tmp_path, "freeze", "--agent", "demo", "--reason", "audit", *cli)
    assert frozen.returncode == 0, frozen.stderr
    thawed = await run_cli(tmp_path, "thaw", "--agent", "demo", *cli)
    assert thawed.returncode == 0, thawed.stderr
    refusals = Refusals()
    agent = await as_role(embedded, Role.AGENT, refusals)
    try:  # an agent still may not
        await agent.publish(embedded.subjects.api_control("grant.list"), b"{}")
        assert "permissions violation" in await refusals.next()
    finally:
        await agent.close()


async def test_the_url_is_recorded_once_the_service_answers(tmp_path: Path) -> None:
    """A client that finds `nats.url` finds a service that answers: the first hook or CLI call
    after `serve` starts is not refused with "no Headgate service answers"."""
    data = tmp_path / ".headgate"
    proc = await asyncio.create_subprocess_exec(
        headgate_executable(), "serve", "--data-dir", str(data), "--prefix", "hgurl",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        url_file = data / datadir.URL_FILE
        for _ in range(12_000):  # up to 60 s, looking every 5 ms
            if url_file.exists() or proc.returncode is not None:
                break
            await asyncio.sleep(0.005)
        assert url_file.exists(), "serve never recorded its URL"
        nc = await nats.connect(
            url_file.read_text().strip(),
            nkeys_seed=str(credentials_file(data, Role.AGENT)),
            inbox_prefix=inbox_prefix_for(Role.AGENT.value), allow_reconnect=False,
        )  # fmt: skip
        try:
            reply = await nc.request("hgurl.api.key", b"{}", timeout=5)
        finally:
            await nc.close()
        assert json.loads(reply.data)["public_key"].startswith("N")
    finally:
        proc.terminate()
        await proc.wait()


async def test_an_approver_reads_the_freezes_stream_but_cannot_publish_there(
    embedded: Service,
) -> None:
    """The approver user follows freezes live and reads them from the stream (its state, by
    sequence, the last change, direct gets), signed by the service; it can neither publish a
    freeze nor change the stream."""
    subjects, refusals = embedded.subjects, Refusals()
    stream, data = subjects.stream("controls"), embedded.settings.data_dir
    assert embedded.ctx is not None
    service_key = embedded.ctx.signer.public_key
    nc = await as_role(embedded, Role.APPROVER, refusals)
    try:
        live: asyncio.Queue[Msg] = asyncio.Queue()
        await nc.subscribe(subjects.controls(">"), cb=live.put)
        await nc.flush()
        seed = data / datadir.LOCAL_KEY_FILE
        async with Approver.connect(name="me", key=seed, prefix=subjects.prefix,
                                    data_dir=data) as approver:  # fmt: skip
            await approver.freeze(workspace="prod", reason="incident 7")
            await approver.thaw(workspace="prod")
        news = [await asyncio.wait_for(live.get(), 10) for _ in range(2)]
        assert [m.subject for m in news] == [subjects.controls("freeze"), subjects.controls("thaw")]

        js = nc.jetstream()
        assert (await js.stream_info(stream)).state.messages == 2
        first = await js.get_msg(stream, seq=1)
        last = await js.get_last_msg(stream, subjects.controls(">"))
        direct = await js.get_last_msg(stream, subjects.controls("thaw"), direct=True)
        assert (first.subject, last.seq, direct.seq) == (subjects.controls("freeze"), 2, 2)
        for msg in (first, last, direct):
            assert msg.subject is not None
            assert msg.data is not None
            assert verify_event(service_key, msg.subject, msg.data, msg.headers)
        assert FreezeChanged.model_validate_json(first.data or b"").workspace == "prod"
        assert refusals.errors.empty()

        # Read only: no freeze news of its own, no change to the stream, no consumer there.
        with pytest.raises(nats.errors.TimeoutError):
            await js.publish(subjects.controls("freeze"), b"{}", timeout=1)
        assert f'publish to "{subjects.controls("freeze")}"' in await refusals.next()
        for subject in (
            subjects.controls("thaw"), f"$JS.API.STREAM.PURGE.{stream}",
            f"$JS.API.STREAM.MSG.DELETE.{stream}", f"$JS.API.STREAM.UPDATE.{stream}",
            f"$JS.API.STREAM.DELETE.{stream}", f"$JS.API.CONSUMER.CREATE.{stream}",
        ):  # fmt: skip
            await nc.publish(subject, b"{}")
            assert f'publish to "{subject.lower()}"' in (await refusals.next()).lower()
        assert (await js.stream_info(stream)).state.messages == 2
    finally:
        await nc.close()
