"""Connecting: one line and bounded time when NATS is not there, and surviving its restart."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.client.support import KEYS, guarded_service
from tests.support.natsproc import free_ports
from workflow.client import Approver, Headgate
from workflow.client.connection import NatsTarget, Role, connect, credentials_file, resolve_nats
from workflow.errors import ConfigError, ConnectError
from workflow.messages import Released
from workflow.service.embedded import EmbeddedNats
from workflow.signing import ApproverKey

ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADGATE_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, capture_output=True,
        text=True, timeout=120, check=False, env=env,
    )  # fmt: skip


@pytest.mark.parametrize("sdk", ["agent", "approver"])
def test_connecting_to_no_server_ends_in_one_sentence_within_the_timeout(
    sdk: str, tmp_path: Path
) -> None:
    (port,) = free_ports(1)
    opener = (
        f'Headgate.connect("nats://127.0.0.1:{port}", agent="a", connect_timeout=1.5)'
        if sdk == "agent"
        else f'Approver.connect("nats://127.0.0.1:{port}", name="a", '
        "key=ApproverKey.generate(), connect_timeout=1.5)"
    )
    done = run_python(
        f"""
        import asyncio
        from workflow.client import Approver, Headgate
        from workflow.errors import ConnectError
        from workflow.signing import ApproverKey

        async def main():
            try:
                async with {opener}:
                    print("connected?")
            except ConnectError as exc:
                print(exc)

        asyncio.run(main())
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no traceback per attempt, no log line
    assert done.stdout.splitlines() == [
        f"cannot reach NATS at nats://127.0.0.1:{port} within 1.5s (last error: "
        f"[Errno 111] Connect call failed ('127.0.0.1', {port}))"
    ]


def test_the_cli_with_a_wrong_nats_url_prints_one_line(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADGATE_")}
    done = subprocess.run(
        [sys.executable, "-m", "workflow", "pending", "--nats-url", f"nats://127.0.0.1:{port}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error: cannot reach NATS at nats://127.0.0.1:{port} within 3s")
    assert line.endswith("is `headgate serve` running?")


async def test_refused_credentials_fail_at_once_naming_where_they_came_from(
    tmp_path: Path,
) -> None:
    server = EmbeddedNats(tmp_path / "nats", extra_args=["--user", "svc", "--pass", "right"])
    url = server.start()
    try:
        target = NatsTarget(url, user="svc", password="wrong", origin="HEADGATE_NATS_URL")
        # A connect timeout far beyond the test's patience: the refusal must not wait for it.
        with pytest.raises(ConnectError, match="refused the credentials") as refused:
            await asyncio.wait_for(connect(target, name="t", connect_timeout=600), 60)
        assert "(HEADGATE_NATS_URL)" in str(refused.value)
        assert "wrong" not in str(refused.value)
        nc = await connect(NatsTarget(url, user="svc", password="right"), name="t")
        await nc.close()
    finally:
        server.stop()


async def test_reconnect_attempts_can_be_bounded(nats_url: str, tmp_path: Path) -> None:
    async with guarded_service(nats_url, tmp_path) as h:
        prefix = h.subjects.prefix
        async with Headgate.connect(nats_url, agent="a", prefix=prefix) as hg:
            assert hg.nc.options["max_reconnect_attempts"] == -1  # for ever, by default
        async with Headgate.connect(
            nats_url, agent="a", prefix=prefix, max_reconnect_attempts=3
        ) as hg:
            assert hg.nc.options["max_reconnect_attempts"] == 3
        async with Approver.connect(
            nats_url, name="a", key=KEYS["alice"], prefix=prefix, max_reconnect_attempts=2
        ) as approver:
            assert approver.nc.options["max_reconnect_attempts"] == 2


def test_the_resolver_takes_options_then_the_environment_then_the_data_dir(
    tmp_path: Path,
) -> None:
    data = tmp_path / ".headgate"
    with pytest.raises(ConfigError, match="no NATS URL: pass --nats-url"):
        resolve_nats(role=Role.AGENT, data_dir=data, env={})
    data.mkdir()
    (data / "nats.url").write_text("nats://127.0.0.1:4999\n")
    seed = credentials_file(data, Role.APPROVER)
    seed.parent.mkdir()
    ApproverKey.generate().write(seed)

    local = resolve_nats(role=Role.APPROVER, data_dir=data, env={})
    assert (local.url, local.nkey, local.inbox_prefix) == (
        "nats://127.0.0.1:4999", seed, "_INBOX.approver"
    )  # fmt: skip
    # An agent has no credentials there: it connects without.
    assert resolve_nats(role=Role.AGENT, data_dir=data, env={}).nkey is None
    # The URL from the environment, the credentials still from the data dir.
    env = {"HEADGATE_NATS_URL": "nats://a:1,nats://b:2", "HEADGATE_DATA_DIR": str(data)}
    both = resolve_nats(role=Role.APPROVER, env=env)
    assert (both.servers, both.nkey) == (["nats://a:1", "nats://b:2"], seed)
    # Credentials from the environment win over the data dir's; the inbox prefix follows the
    # user, as deploy/nats/accounts.conf expects.
    env |= {"HEADGATE_NATS_USER": "alice", "HEADGATE_NATS_PASSWORD": "pw"}
    named = resolve_nats(role=Role.APPROVER, env=env)
    assert (named.user, named.password, named.nkey, named.inbox_prefix) == (
        "alice", "pw", None, "_INBOX.alice"
    )  # fmt: skip
    assert "pw" not in repr(named)
    # Options win over everything.
    given = resolve_nats("nats://x:3", role=Role.APPROVER, user="bob", env=env)
    assert (given.url, given.user) == ("nats://x:3", "bob")


async def test_an_agent_and_an_approver_carry_on_after_the_server_restarts(
    tmp_path: Path,
) -> None:
    (port,) = free_ports(1)
    server = EmbeddedNats(tmp_path / "nats", port=port)
    url = server.start()
    try:
        async with (
            guarded_service(url, tmp_path / "svc") as h,
            Headgate.connect(url, agent="builder", workspace="acme", prefix=h.subjects.prefix)
            as hg,
            Approver.connect(url, name="alice", key=KEYS["alice"], prefix=h.subjects.prefix)
            as alice,
        ):  # fmt: skip
            hg.recheck_interval = 3600  # outcomes must come from the results consumer
            inbox = alice.inbox(workspaces=["acme"])
            before = await hg.propose("write_file", {"path": "before.txt"})
            first = await asyncio.wait_for(inbox.__anext__(), 15)
            assert first.proposal_id == before.proposal_id
            assert (await first.approve()).accepted
            assert isinstance(await before.result(timeout=15), Released)

            server.stop()
            server = EmbeddedNats(tmp_path / "nats", port=port)
            assert server.start() == url

            after = await hg.propose("write_file", {"path": "after.txt"}, timeout=30)
            second = await asyncio.wait_for(inbox.__anext__(), 30)
            assert second.proposal_id == after.proposal_id
            result = await second.approve(timeout=30)
            assert result.accepted, result.message
            released = await after.result(timeout=30)
            assert isinstance(released, Released)
            assert released.arguments == {"path": "after.txt"}
            await inbox.aclose()
    finally:
        server.stop()


def test_an_nkey_given_by_hand_of_no_known_user_gets_no_inbox_prefix(tmp_path: Path) -> None:
    """A seed that is none of the data dir's and not named after a role or the agent: the
    server's own inbox rules apply (nats-py's default `_INBOX`); the service's seed needs none
    (it reads every inbox)."""
    seed = tmp_path / "someone.nk"
    ApproverKey.generate().write(seed)
    env = {"HEADGATE_NATS_URL": "nats://127.0.0.1:4222", "HEADGATE_NATS_NKEY": str(seed)}
    for role, agent in ((Role.AGENT, "builder"), (Role.APPROVER, None)):
        target = resolve_nats(role=role, agent=agent, data_dir=tmp_path / "none", env=env)
        assert (target.nkey, target.inbox_prefix) == (seed, None)
    named = tmp_path / "builder.nk"  # an agent's seed copied under its name
    named.write_text(seed.read_text())
    env["HEADGATE_NATS_NKEY"] = str(named)
    target = resolve_nats(role=Role.AGENT, agent="builder", data_dir=tmp_path, env=env)
    assert target.inbox_prefix == "_INBOX.builder"
    nowhere = tmp_path / "none"
    assert (
        resolve_nats(role=Role.AGENT, agent="other", data_dir=nowhere, env=env).inbox_prefix is None
    )
    service = tmp_path / "service.nk"
    service.write_text(seed.read_text())
    env["HEADGATE_NATS_NKEY"] = str(service)
    assert resolve_nats(role=Role.APPROVER, data_dir=nowhere, env=env).inbox_prefix is None
