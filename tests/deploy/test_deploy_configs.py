"""The operator files in ``deploy/`` are tested by using them, not by reading them.

* every nats-server config passes ``nats-server -t``;
* the 3-node cluster starts from ``deploy/nats/cluster/node-*.conf`` (ports rewritten to free
  ones, store dirs to temp dirs in a temp copy) and forms a JetStream meta group of 3 that
  accepts the service's streams (its own code) with ``num_replicas=3``;
* the accounts config enforces least privilege on a server started from ``single.conf``: the
  refusals are asserted on the server's permissions-violation error, not on a missing delivery;
* compose, Kubernetes, Dockerfile and systemd files parse and run ``headgate serve`` with the
  flags and environment variables the CLI knows.
"""

from __future__ import annotations

import asyncio
import configparser
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest
import yaml
from nats.aio.client import Client
from nats.js.api import ConsumerConfig

from tests.support.natsproc import (
    CLUSTER_NODES,
    DEPLOY,
    NATS_DIR,
    NatsProcess,
    Servers,
    meta_group_formed,
    port_map,
    rewrite_config,
    stage_nats_dir,
    top_level_port,
    wait_until,
)
from workflow.service.embedded import find_nats_server
from workflow.service.streams import (
    ensure_consumer,
    ensure_streams,
    service_consumers,
    stream_configs,
)
from workflow.subjects import Subjects

pytestmark = pytest.mark.slow

# Example credentials of deploy/nats/accounts.conf: each hash there is of "<user>-dev-password".
SERVICE, AGENT, APPROVER = "headgate", "builder-7", "alice"

# The `headgate serve` surface (flags and environment variables) the deploy files may use.
SERVE_FLAGS = {
    "--nats-url",
    "--database-url",
    "--policy",
    "--data-dir",
    "--metrics-port",
    "--metrics-host",
    "--replicas",
}
SERVE_ENV = {
    "HEADGATE_NATS_URL",
    "HEADGATE_DATABASE_URL",
    "HEADGATE_POLICY",
    "HEADGATE_DATA_DIR",
    "HEADGATE_METRICS_PORT",
    "HEADGATE_METRICS_HOST",
    "HEADGATE_STREAM_REPLICAS",
    "HEADGATE_NATS_USER",
    "HEADGATE_NATS_PASSWORD",
    "HEADGATE_NATS_CREDS",
}
# Each setting must be given to a replica, by flag or by environment variable.
REQUIRED_SETTINGS = {
    "--nats-url": "HEADGATE_NATS_URL",
    "--database-url": "HEADGATE_DATABASE_URL",
    "--policy": "HEADGATE_POLICY",
    "--data-dir": "HEADGATE_DATA_DIR",
    "--metrics-port": "HEADGATE_METRICS_PORT",
    "--replicas": "HEADGATE_STREAM_REPLICAS",
}


@pytest.fixture
def servers() -> Iterator[Servers]:
    started = Servers()
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture(scope="module")
def single_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsProcess]:
    """A nats-server started from deploy/nats/single.conf (+ accounts.conf) on free ports."""
    tmp = tmp_path_factory.mktemp("single")
    staged = stage_nats_dir(tmp)
    config = staged / "single.conf"
    text = config.read_text()
    config.write_text(rewrite_config(text, port_map([text]), tmp / "jetstream"))
    text = config.read_text()
    server = NatsProcess(
        "single",
        config,
        top_level_port(text, "listen"),
        top_level_port(text, "http"),
        tmp / "nats.log",
    )
    started = Servers()
    try:
        started.start(server)
        wait_until(lambda: server.monitor("/healthz")["status"] == "ok", "healthz", [server])
        yield server
    finally:
        started.stop_all()


# ---------------------------------------------------------------------- nats-server -t
def k8s_documents() -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        documents.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return documents


def k8s_nats_conf() -> str:
    for doc in k8s_documents():
        if doc["kind"] == "ConfigMap" and "nats.conf" in doc.get("data", {}):
            conf: str = doc["data"]["nats.conf"]
            return conf
    raise AssertionError("no ConfigMap with nats.conf in deploy/k8s")


def nats_test(
    config: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [find_nats_server(), "-t", "-c", str(config)],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    "relative",
    ["single.conf", "cluster/node-1.conf", "cluster/node-2.conf", "cluster/node-3.conf"],
)
def test_nats_config_passes_nats_server_t(relative: str, tmp_path: Path) -> None:
    result = nats_test(stage_nats_dir(tmp_path) / relative)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "is valid" in result.stdout + result.stderr


def test_container_config_passes_nats_server_t_with_its_environment(tmp_path: Path) -> None:
    config = stage_nats_dir(tmp_path) / "cluster" / "container.conf"
    result = nats_test(config, {"NATS_SERVER_NAME": "nats-1"})
    assert result.returncode == 0, result.stderr + result.stdout
    # The server name must come from the environment: without it the config is refused.
    env = {k: v for k, v in os.environ.items() if k != "NATS_SERVER_NAME"}
    unset = subprocess.run(
        [find_nats_server(), "-t", "-c", str(config)],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    assert unset.returncode != 0
    assert "NATS_SERVER_NAME" in unset.stderr + unset.stdout


def test_k8s_nats_config_passes_nats_server_t_with_the_accounts_beside_it(tmp_path: Path) -> None:
    # In the StatefulSet a projected volume puts the ConfigMap's nats.conf and the Secret's
    # accounts.conf (made from deploy/nats/accounts.conf) in one directory.
    (tmp_path / "nats.conf").write_text(k8s_nats_conf())
    shutil.copy(NATS_DIR / "accounts.conf", tmp_path / "accounts.conf")
    result = nats_test(tmp_path / "nats.conf", {"POD_NAME": "headgate-nats-0"})
    assert result.returncode == 0, result.stderr + result.stdout


# ---------------------------------------------------------------------- the 3-node cluster
async def test_cluster_forms_from_deploy_files_and_replicates_a_stream(
    tmp_path: Path, servers: Servers
) -> None:
    staged = stage_nats_dir(tmp_path)
    originals = [path.read_text() for path in CLUSTER_NODES]
    ports = port_map(originals)
    assert len(ports) == 9, f"3 nodes x (client, http, cluster) ports, found {sorted(ports)}"
    nodes = []
    for i, original in enumerate(originals, start=1):
        config = staged / "cluster" / f"node-{i}.conf"
        text = rewrite_config(original, ports, tmp_path / f"store-{i}")
        config.write_text(text)
        nodes.append(
            NatsProcess(
                f"node-{i}",
                config,
                top_level_port(text, "listen"),
                top_level_port(text, "http"),
                tmp_path / f"node-{i}.log",
            )
        )
    began = time.monotonic()
    for node in nodes:
        servers.start(node)
    wait_until(lambda: all(meta_group_formed(n) for n in nodes), "a meta leader of 3", nodes)
    formed = time.monotonic() - began

    names = {n.monitor("/varz")["server_name"] for n in nodes}
    assert names == {"headgate-nats-1", "headgate-nats-2", "headgate-nats-3"}
    leaders = {n.monitor("/jsz")["meta_cluster"]["leader"] for n in nodes}
    assert len(leaders) == 1, f"the nodes disagree on the meta leader: {leaders}"
    for node in nodes:
        # /routez counts pooled routes: every node must reach both others, by name.
        remotes = {r["remote_name"] for r in node.monitor("/routez")["routes"]}
        assert remotes == names - {node.monitor("/varz")["server_name"]}

    nc = await nats.connect(
        servers=[n.url for n in nodes],
        user=SERVICE,
        password=f"{SERVICE}-dev-password",
        inbox_prefix=f"_INBOX.{SERVICE}",
        connect_timeout=5,
        max_reconnect_attempts=0,
    )
    try:
        js = nc.jetstream(timeout=10)
        # The service's own stream and consumer definitions, created with its permissions.
        await ensure_streams(js, Subjects(), replicas=3)
        for spec in service_consumers(Subjects()).values():
            await ensure_consumer(js, spec)
        streams = [c.name for c in stream_configs(Subjects(), replicas=3)]
        assert "HEADGATE_PROPOSALS" in streams
        for stream in streams:
            assert stream is not None
            state = await js.stream_info(stream)
            assert state.config.num_replicas == 3, stream
            assert state.cluster is not None
            assert state.cluster.leader in names
            followers = {peer.name for peer in state.cluster.replicas or []}
            assert followers | {state.cluster.leader} == names, stream
        ack = await js.publish(
            "headgate.proposals.builder-7", b"{}", headers={"Nats-Msg-Id": "p-1"}
        )
        assert ack.stream == "HEADGATE_PROPOSALS"
    finally:
        await nc.close()
    print(f"3-node cluster formed in {formed:.2f} s")


# ---------------------------------------------------------------------- least privilege
class Violations:
    """The error callback of a connection: collects the server's -ERR permission violations."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self._changed = asyncio.Event()

    async def record(self, error: Exception) -> None:
        # A bound coroutine method: nats-py refuses callables that are not coroutine functions.
        self.errors.append(str(error))
        self._changed.set()

    async def wait_for(self, kind: str, subject: str, timeout: float = 5) -> str:
        """The violation for ``kind`` ("publish"/"subscription") to ``subject``."""
        wanted = f'permissions violation for {kind} to "{subject.lower()}"'
        async with asyncio.timeout(timeout):
            while True:
                for error in self.errors:
                    if wanted in error.lower():
                        return error
                self._changed.clear()
                await self._changed.wait()


@dataclass
class Conn:
    nc: Client
    violations: Violations


@pytest.fixture
async def connect(single_server: NatsProcess) -> AsyncIterator[Any]:
    opened: list[Client] = []

    async def open_as(user: str) -> Conn:
        violations = Violations()
        nc = await nats.connect(
            single_server.url,
            user=user,
            password=f"{user}-dev-password",
            inbox_prefix=f"_INBOX.{user}",
            error_cb=violations.record,
            max_reconnect_attempts=0,
        )
        opened.append(nc)
        return Conn(nc, violations)

    try:
        yield open_as
    finally:
        for nc in opened:
            await nc.close()


@pytest.fixture
async def service(connect: Any) -> Conn:
    """The service user, with the streams created by the service's own code (idempotent)."""
    conn: Conn = await connect(SERVICE)
    await ensure_streams(conn.nc.jetstream(), Subjects(), replicas=1)
    return conn


async def stream_messages(service: Conn, stream: str) -> int:
    info = await service.nc.jetstream().stream_info(stream)
    return int(info.state.messages)


async def refused_publish(conn: Conn, subject: str) -> str:
    """A JetStream publish the server must refuse: no PubAck, and a permissions violation."""
    with pytest.raises(nats.errors.TimeoutError):
        await conn.nc.jetstream().publish(subject, b"{}", timeout=0.5)
    return await conn.violations.wait_for("publish", subject)


async def test_agent_publishes_its_own_proposal_into_the_service_stream(
    service: Conn, connect: Any
) -> None:
    agent: Conn = await connect(AGENT)
    before = await stream_messages(service, "HEADGATE_PROPOSALS")
    js = agent.nc.jetstream()
    ack = await js.publish(
        f"headgate.proposals.{AGENT}", b'{"agent": "builder-7"}', headers={"Nats-Msg-Id": "a-1"}
    )
    assert ack.stream == "HEADGATE_PROPOSALS"
    again = await js.publish(
        f"headgate.proposals.{AGENT}", b'{"agent": "builder-7"}', headers={"Nats-Msg-Id": "a-1"}
    )
    assert again.duplicate, "the retried publish is deduplicated by Nats-Msg-Id"
    assert (await js.publish(f"headgate.cancel.{AGENT}", b"{}")).stream == "HEADGATE_DECISIONS"
    assert (await js.publish(f"headgate.executed.{AGENT}", b"{}")).stream == "HEADGATE_EXECUTED"
    assert await stream_messages(service, "HEADGATE_PROPOSALS") == before + 1
    assert agent.violations.errors == []


async def test_agent_cannot_publish_a_decision(service: Conn, connect: Any) -> None:
    agent: Conn = await connect(AGENT)
    before = await stream_messages(service, "HEADGATE_DECISIONS")
    await refused_publish(agent, "headgate.decisions.x")
    assert await stream_messages(service, "HEADGATE_DECISIONS") == before


async def test_agent_cannot_publish_as_another_agent(service: Conn, connect: Any) -> None:
    agent: Conn = await connect(AGENT)
    before = await stream_messages(service, "HEADGATE_PROPOSALS")
    await refused_publish(agent, "headgate.proposals.someone-else")
    await refused_publish(agent, "headgate.cancel.someone-else")
    await refused_publish(agent, "headgate.executed.someone-else")
    await refused_publish(agent, "headgate.released.builder-7")
    assert await stream_messages(service, "HEADGATE_PROPOSALS") == before


async def test_agent_reads_its_results_and_only_its_own(service: Conn, connect: Any) -> None:
    sjs = service.nc.jetstream()
    await sjs.publish(f"headgate.released.{AGENT}", b"released")
    await sjs.publish(f"headgate.blocked.{AGENT}", b"blocked")
    await sjs.publish("headgate.released.someone-else", b"not yours")
    agent: Conn = await connect(AGENT)
    js = agent.nc.jetstream()

    sub = await js.pull_subscribe(
        f"headgate.*.{AGENT}", durable=f"agent-{AGENT}", stream="HEADGATE_RESULTS"
    )
    messages = await sub.fetch(100, timeout=1)
    subjects = {m.subject for m in messages}
    assert subjects == {f"headgate.released.{AGENT}", f"headgate.blocked.{AGENT}"}
    for message in messages:
        await message.ack()  # $JS.ACK.HEADGATE_RESULTS.agent-builder-7.> is allowed
    assert agent.violations.errors == []

    # Pointing its consumer at someone else's results is refused by the permissions...
    other = (
        "$JS.API.CONSUMER.CREATE.HEADGATE_RESULTS.agent-builder-7.headgate.released.someone-else"
    )
    config = ConsumerConfig(
        name=f"agent-{AGENT}",
        durable_name=f"agent-{AGENT}",
        filter_subject="headgate.released.someone-else",
    )
    request = json.dumps({"stream_name": "HEADGATE_RESULTS", "config": config.as_dict()})
    with pytest.raises(nats.errors.TimeoutError):
        await agent.nc.request(other, request.encode(), timeout=0.5)
    await agent.violations.wait_for("publish", other)
    # ... and through its own allowed subject by the server (config filter must match it).
    mine = "$JS.API.CONSUMER.CREATE.HEADGATE_RESULTS.agent-builder-7.headgate.released.builder-7"
    reply = await agent.nc.request(mine, request.encode(), timeout=2)
    assert "did not match filtered subject" in json.loads(reply.data)["error"]["description"]
    # Another agent's durable (a deny line per other agent), the unfiltered create, other
    # streams: all refused.
    for subject in [
        "$JS.API.CONSUMER.CREATE.HEADGATE_RESULTS.agent-reviewer-2.headgate.released.builder-7",
        "$JS.API.CONSUMER.CREATE.HEADGATE_RESULTS.agent-builder-7",
        "$JS.API.CONSUMER.DURABLE.CREATE.HEADGATE_RESULTS.agent-builder-7",
        "$JS.API.CONSUMER.MSG.NEXT.HEADGATE_INBOX.approver-alice",
        "$JS.API.STREAM.DELETE.HEADGATE_RESULTS",
    ]:
        await agent.nc.publish(subject, b"{}")
        await agent.violations.wait_for("publish", subject)


async def test_a_coding_agents_hook_is_gated_through_the_deploy_accounts(
    single_server: NatsProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`headgate hook`'s light path as the agent user: it listens on its own results subjects
    (and no one else's), proposes, and gets the service's signed answer."""
    from workflow.adapters import claude_code, lite
    from workflow.adapters.calls import Action
    from workflow.adapters.options import GateOptions
    from workflow.service.lifecycle import Service
    from workflow.service.settings import Settings

    service = Service(Settings(
        data_dir=tmp_path, nats_url=single_server.url, nats_user=SERVICE,
        nats_password=f"{SERVICE}-dev-password",
    ))  # fmt: skip
    await service.start()
    try:
        # The service answers on the status subject once its API has subscribed.
        agent = await nats.connect(single_server.url, user=AGENT, inbox_prefix=f"_INBOX.{AGENT}",
                                   password=f"{AGENT}-dev-password")  # fmt: skip
        for _ in range(100):
            try:
                await agent.request(f"headgate.api.status.{AGENT}", b"{}", timeout=1)
                break
            except nats.errors.NoRespondersError:
                await asyncio.sleep(0.05)
        await agent.close()
        monkeypatch.setenv("HEADGATE_NATS_USER", AGENT)
        monkeypatch.setenv("HEADGATE_NATS_PASSWORD", f"{AGENT}-dev-password")
        read = claude_code.parse({
            "hook_event_name": "PreToolUse", "session_id": "s1", "cwd": "/w",
            "tool_name": "Read", "tool_input": {"file_path": "/w/README.md"},
        })  # fmt: skip
        options = GateOptions(agent=AGENT, nats_url=single_server.url, data_dir=tmp_path, wait=2)
        answer = await asyncio.to_thread(lite.decide, read, options, 20)
        assert answer.action == Action.ALLOW, answer.reason
        other = GateOptions(agent="someone-else", nats_url=single_server.url, data_dir=tmp_path)
        with pytest.raises(Exception, match="Permissions Violation"):
            await asyncio.to_thread(lite.decide, read, other, 20)
    finally:
        await service.stop()


async def test_agent_cannot_read_another_clients_replies(service: Conn, connect: Any) -> None:
    agent: Conn = await connect(AGENT)
    await agent.nc.subscribe(f"_INBOX.{APPROVER}.>")
    await agent.violations.wait_for("subscription", f"_INBOX.{APPROVER}.>")
    await agent.nc.subscribe("headgate.>")
    await agent.violations.wait_for("subscription", "headgate.>")


async def test_approver_publishes_a_decision_but_not_a_proposal(
    service: Conn, connect: Any
) -> None:
    approver: Conn = await connect(APPROVER)
    js = approver.nc.jetstream()
    before = await stream_messages(service, "HEADGATE_DECISIONS")
    ack = await js.publish("headgate.decisions.r-1", b"{}", headers={"Nats-Msg-Id": "d-1"})
    assert ack.stream == "HEADGATE_DECISIONS"
    assert await stream_messages(service, "HEADGATE_DECISIONS") == before + 1
    await refused_publish(approver, f"headgate.proposals.{AGENT}")
    await refused_publish(approver, f"headgate.released.{AGENT}")


async def test_approver_reads_the_freezes_but_cannot_publish_them(
    service: Conn, connect: Any
) -> None:
    """The freezes stream (`headgate.controls.*`, published by the service) is the approvers'
    to read — live, by sequence, the last change, direct gets — and not to write."""
    approver: Conn = await connect(APPROVER)
    live = await approver.nc.subscribe("headgate.controls.>")
    await approver.nc.flush()
    stream, js = "HEADGATE_CONTROLS", approver.nc.jetstream()
    before = await stream_messages(service, stream)
    await service.nc.jetstream().publish("headgate.controls.freeze", b'{"change": "freeze"}')
    assert (await live.next_msg(timeout=5)).data == b'{"change": "freeze"}'
    assert (await js.stream_info(stream)).state.messages == before + 1
    last = await js.get_last_msg(stream, "headgate.controls.>")
    direct = await js.get_last_msg(stream, "headgate.controls.freeze", direct=True)
    by_seq = await js.get_msg(stream, seq=last.seq)
    assert last.data == direct.data == by_seq.data == b'{"change": "freeze"}'
    assert approver.violations.errors == []

    await refused_publish(approver, "headgate.controls.freeze")
    await refused_publish(approver, "headgate.controls.thaw")
    for subject in [
        f"$JS.API.STREAM.PURGE.{stream}", f"$JS.API.STREAM.MSG.DELETE.{stream}",
        f"$JS.API.STREAM.UPDATE.{stream}", f"$JS.API.CONSUMER.CREATE.{stream}",
    ]:  # fmt: skip
        await approver.nc.publish(subject, b"{}")
        await approver.violations.wait_for("publish", subject)
    assert await stream_messages(service, stream) == before + 1


async def test_approver_reads_the_inbox_and_queries_the_service(
    service: Conn, connect: Any
) -> None:
    await service.nc.jetstream().publish("headgate.inbox.default", b"request-1")

    async def answer(msg: Any) -> None:
        await msg.respond(b'{"pending": []}')

    # The service answers in its queue group, on the approver's private inbox.
    api = await service.nc.subscribe("headgate.api.pending", queue="headgate-api", cb=answer)
    await service.nc.flush()
    try:
        approver: Conn = await connect(APPROVER)
        sub = await approver.nc.jetstream().pull_subscribe(
            "headgate.inbox.>", durable=f"approver-{APPROVER}", stream="HEADGATE_INBOX"
        )
        messages = await sub.fetch(1, timeout=2)
        await messages[0].ack()
        reply = await approver.nc.request("headgate.api.pending", b"{}", timeout=2)
        assert json.loads(reply.data) == {"pending": []}
        assert approver.violations.errors == []

        # Cancelling is the service's (and the agent's own subject), not an approver's API.
        await approver.nc.publish("headgate.api.cancel", b"{}")
        await approver.violations.wait_for("publish", "headgate.api.cancel")
        # An agent may not query the API: pending would list other agents' proposals.
        agent: Conn = await connect(AGENT)
        await agent.nc.publish("headgate.api.pending", b"{}")
        await agent.violations.wait_for("publish", "headgate.api.pending")
    finally:
        await api.unsubscribe()


async def test_wrong_password_is_refused(single_server: NatsProcess) -> None:
    errors = Violations()
    nc = Client()
    try:
        with pytest.raises(nats.errors.Error, match=r"(?i)authorization violation"):
            await nc.connect(
                single_server.url,
                user=AGENT,
                password="guess",
                allow_reconnect=False,
                connect_timeout=2,
                error_cb=errors.record,
            )
    finally:
        # nats-py leaves the socket of a refused connect open; close() releases it.
        await nc.close()


# ---------------------------------------------------------------------- compose
def load_yaml(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def serve_settings(args: list[str], env: Mapping[str, str]) -> set[str]:
    """Check ``args`` (after ``headgate serve``) and ``env``; the settings they provide."""
    flags = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    assert flags <= SERVE_FLAGS, f"unknown serve flags: {flags - SERVE_FLAGS}"
    ours = {k for k in env if k.startswith("HEADGATE_")}
    assert ours <= SERVE_ENV, f"unknown HEADGATE_ variables: {ours - SERVE_ENV}"
    return {flag for flag, var in REQUIRED_SETTINGS.items() if flag in flags or var in env}


def dockerfile_entrypoint() -> list[str]:
    text = (DEPLOY / "Dockerfile").read_text()
    found = re.findall(r"(?m)^ENTRYPOINT\s+(\[.*\])\s*$", text)
    assert len(found) == 1, "one exec-form ENTRYPOINT"
    entrypoint: list[str] = json.loads(found[0])
    return entrypoint


def test_dockerfile_builds_the_repo_with_postgres_as_a_non_root_user() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"(?m)^FROM python:3\.11-slim", text)
    assert re.search(r"pip install .*\.\[postgres\]", text)
    users = re.findall(r"(?m)^USER\s+(\S+)", text)
    assert users, "the image must switch to a non-root USER"
    assert users[-1] not in {"root", "0", "0:0"}
    assert dockerfile_entrypoint()[-2:] == ["headgate", "serve"]


def compose_services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = load_yaml(DEPLOY / "compose.yaml")["services"]
    return services


def compose_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def test_compose_runs_three_nats_nodes_postgres_and_two_headgate_replicas() -> None:
    services = compose_services()
    nats_nodes = {n: s for n, s in services.items() if str(s.get("image", "")).startswith("nats:")}
    assert len(nats_nodes) == 3
    names = {compose_env(s)["NATS_SERVER_NAME"] for s in nats_nodes.values()}
    assert len(names) == 3, "each node needs its own server name"
    routes = re.findall(
        r"nats-route://([\w-]+):", (NATS_DIR / "cluster" / "container.conf").read_text()
    )
    assert set(routes) == set(nats_nodes), "container.conf routes name the compose services"
    for service in nats_nodes.values():
        assert "healthcheck" in service
        assert "/etc/nats/cluster/container.conf" in service["command"]

    postgres = [s for s in services.values() if str(s.get("image", "")).startswith("postgres:")]
    assert len(postgres) == 1
    assert "healthcheck" in postgres[0]

    headgate = {n: s for n, s in services.items() if "build" in s}
    replicas = sum(int(s.get("deploy", {}).get("replicas", 1)) for s in headgate.values())
    assert replicas == 2
    entrypoint = dockerfile_entrypoint()
    for name, service in headgate.items():
        assert service["build"]["dockerfile"].endswith("Dockerfile")
        assert "healthcheck" in service, name
        assert service.get("entrypoint") in (None, entrypoint)
        env = compose_env(service)
        provided = serve_settings(list(service.get("command", [])), env)
        assert provided == set(REQUIRED_SETTINGS), (
            f"{name} misses {set(REQUIRED_SETTINGS) - provided}"
        )
        urls = env["HEADGATE_NATS_URL"].split(",")
        assert {u.split("//")[1].split(":")[0] for u in urls} == set(nats_nodes)
        assert env["HEADGATE_DATABASE_URL"].startswith("postgresql+asyncpg://")
        assert env["HEADGATE_STREAM_REPLICAS"] == "3"
        assert env["HEADGATE_NATS_USER"] == SERVICE
        depends = service.get("depends_on", {})
        assert all(depends[n]["condition"] == "service_healthy" for n in [*nats_nodes])


def compose_mounts() -> list[tuple[str, str]]:
    """(service, source) of every bind mount of a deploy/ file."""
    mounts = []
    for name, service in compose_services().items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0] if isinstance(volume, str) else volume["source"]
            if source.startswith("."):
                mounts.append((name, source))
    return mounts


@pytest.mark.parametrize(("service", "source"), compose_mounts())
def test_compose_mounts_an_existing_deploy_file(service: str, source: str) -> None:
    path = DEPLOY / source
    if source == "./policy.example.toml" and not path.exists():
        pytest.skip("deploy/policy.example.toml comes with the policy engine (issue 4)")
    assert path.exists(), f"{service} mounts {source}, which does not exist"


# ---------------------------------------------------------------------- kubernetes
def k8s_by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in k8s_documents() if d["kind"] == kind]


def container_named(doc: dict[str, Any], name: str) -> dict[str, Any]:
    containers: list[dict[str, Any]] = doc["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == name)


def test_k8s_manifests_have_the_expected_kinds() -> None:
    documents = k8s_documents()
    kinds = {d["kind"] for d in documents}
    assert {"Namespace", "StatefulSet", "Service", "ConfigMap", "Secret", "Deployment"} <= kinds
    namespaces = {d["metadata"]["name"] for d in k8s_by_kind("Namespace")}
    assert namespaces == {"headgate"}
    for doc in documents:
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == "headgate", doc["metadata"]["name"]


def test_k8s_nats_is_a_three_node_statefulset_behind_a_headless_service() -> None:
    (nats_set,) = [
        s for s in k8s_by_kind("StatefulSet") if s["metadata"]["name"] == "headgate-nats"
    ]
    assert nats_set["spec"]["replicas"] == 3
    service_name = nats_set["spec"]["serviceName"]
    (headless,) = [s for s in k8s_by_kind("Service") if s["metadata"]["name"] == service_name]
    assert headless["spec"]["clusterIP"] == "None"
    routes = set(re.findall(r"nats-route://([\w.-]+):6222", k8s_nats_conf()))
    assert routes == {f"headgate-nats-{i}.{service_name}" for i in range(3)}
    container = container_named(nats_set, "nats")
    assert container["image"].startswith("nats:")
    assert nats_set["spec"]["volumeClaimTemplates"]


def test_k8s_headgate_runs_two_replicas_with_health_probes() -> None:
    (deployment,) = k8s_by_kind("Deployment")
    assert deployment["spec"]["replicas"] == 2
    container = container_named(deployment, "headgate")
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    command = [*container.get("command", dockerfile_entrypoint()), *container.get("args", [])]
    assert command[:2] == ["headgate", "serve"]
    env = {e["name"]: e.get("value", "<from secret>") for e in container["env"]}
    assert serve_settings(command[2:], env) == set(REQUIRED_SETTINGS)
    assert env["HEADGATE_STREAM_REPLICAS"] == "3"
    secrets = {
        e["valueFrom"]["secretKeyRef"]["name"]
        for e in container["env"]
        if "valueFrom" in e and "secretKeyRef" in e["valueFrom"]
    }
    assert secrets, "the database URL and NATS password come from a Secret"
    metrics = [
        s
        for s in k8s_by_kind("Service")
        if s["spec"].get("selector") == deployment["spec"]["selector"]["matchLabels"]
    ]
    assert metrics, "a Service exposes the replicas' metrics port"


def test_k8s_policy_configmap_is_a_valid_policy(tmp_path: Path) -> None:
    from workflow.policy.load import load_policy

    policies = [d for d in k8s_by_kind("ConfigMap") if "policy.toml" in d.get("data", {})]
    assert len(policies) == 1
    path = tmp_path / "policy.toml"
    path.write_text(policies[0]["data"]["policy.toml"])
    load_policy(path)


# ---------------------------------------------------------------------- systemd
def test_systemd_unit_is_hardened_and_runs_headgate_serve() -> None:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(DEPLOY / "systemd" / "headgate.service")
    service = parser["Service"]
    command = service["ExecStart"].split()
    assert command[0].endswith("/headgate")
    assert command[1] == "serve"
    assert service["Restart"] == "on-failure"
    assert service["ProtectSystem"] == "strict"
    assert service["EnvironmentFile"].lstrip("-") == "/etc/headgate/env"
    assert service.get("StateDirectory")
    assert service.get("DynamicUser") == "yes" or service.get("User") not in (None, "root")
    assert parser["Install"]["WantedBy"]

    example = (DEPLOY / "systemd" / "headgate.env.example").read_text()
    env = dict(re.findall(r"(?m)^(HEADGATE_\w+)=(.*)$", example))
    assert serve_settings(command[2:], env) == set(REQUIRED_SETTINGS)
    assert env["HEADGATE_DATABASE_URL"].startswith("postgresql+asyncpg://")


@pytest.mark.parametrize("kind", ["status", "offered"])
async def test_agent_asks_about_itself_only_on_its_own_subjects(
    service: Conn, connect: Any, kind: str
) -> None:
    # The service side: answer on every agent's subject (as `headgate serve` does).
    async def answer(msg: Any) -> None:
        await msg.respond(msg.subject.encode())

    await service.nc.subscribe(f"headgate.api.{kind}.*", cb=answer)
    await service.nc.flush()
    agent: Conn = await connect(AGENT)
    reply = await agent.nc.request(f"headgate.api.{kind}.{AGENT}", b"{}", timeout=2)
    assert reply.data == f"headgate.api.{kind}.{AGENT}".encode()
    for subject in (f"headgate.api.{kind}.someone-else", "headgate.api.get",
                    "headgate.api.offered"):  # fmt: skip
        await agent.nc.publish(subject, b"{}")
        assert await agent.violations.wait_for("publish", subject)


# ---------------------------------------------------------------------- exposure and first steps
def test_compose_publishes_nats_on_loopback_only() -> None:
    for name, service in compose_services().items():
        if not str(service.get("image", "")).startswith("nats:"):
            continue
        ports = [str(p) for p in service.get("ports", [])]
        assert ports, name
        for port in ports:
            # host_ip:host_port:container_port; without a host ip Docker binds every interface
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} on all interfaces"


def test_containers_serve_metrics_where_their_probes_reach_them() -> None:
    """Metrics listen on loopback by default; in a container the published port and the
    kubelet's probes come in on the container's own address."""
    for name, service in compose_services().items():
        env = compose_env(service)
        if "HEADGATE_METRICS_PORT" in env and service.get("ports"):
            assert env.get("HEADGATE_METRICS_HOST") == "0.0.0.0", name
    (deployment,) = k8s_by_kind("Deployment")
    env = {e["name"]: e.get("value") for e in container_named(deployment, "headgate")["env"]}
    assert env["HEADGATE_METRICS_HOST"] == "0.0.0.0"


def test_the_shipped_examples_say_what_to_do_before_anything_can_be_approved() -> None:
    from workflow.policy.coverage import approval_gaps
    from workflow.policy.load import load_policy_text

    first_step = "Before anything can be approved"
    compose = (DEPLOY / "compose.yaml").read_text()
    assert first_step in compose
    assert "headgate keys new alice" in compose
    (configmap,) = [d for d in k8s_by_kind("ConfigMap") if "policy.toml" in d.get("data", {})]
    text = configmap["data"]["policy.toml"]
    assert text.splitlines()[0].startswith(f"# {first_step}")
    # ... which is what `serve` and `policy check` warn about, naming the rules.
    (gap,) = approval_gaps(load_policy_text(text))
    assert gap.key == "approvers"


def test_install_instructions_do_not_name_an_unpublished_package() -> None:
    """headgate is installed from the repository, not from PyPI."""
    # `pip install 'headgate[postgres]'` asks PyPI; `headgate[postgres] @ file:///…` does not.
    unpublished = re.compile(r"pip install '?headgate\[\w+\](?!\s*@)")
    for path in (DEPLOY / "systemd" / "headgate.service", DEPLOY.parent / "README.md",
                 DEPLOY / "README.md"):  # fmt: skip
        assert not unpublished.search(path.read_text()), path


def _allowed(user: str) -> dict[str, list[str]]:
    """The `publish` and `subscribe` allow lists of `user`'s block in accounts.conf."""
    text = (NATS_DIR / "accounts.conf").read_text()
    block = text[text.index(f"user: {user}\n") :]
    block = block[: block.index("\n      }\n")]
    lists = {}
    for kind in ("publish", "subscribe"):
        part = block[block.index(f"{kind}: {{") :]
        part = part[: part.index("]")]
        lines = [line.split("#")[0] for line in part.splitlines()]
        lists[kind] = re.findall(r'"([^"]+)"', "\n".join(lines))
    return lists


@pytest.mark.parametrize(("user", "role"), [("builder-7", "agent"), ("alice", "approver")])
def test_the_deploy_readmes_permission_table_lists_every_subject_accounts_conf_allows(
    user: str, role: str
) -> None:
    """deploy/README.md's table of users and permissions says what the template in
    accounts.conf allows, subject for subject (`<agent>`/`<name>` for the template's user)."""
    placeholder = "<agent>" if role == "agent" else "<name>"
    rows = {
        line.split("|")[1].strip(): line.split("|")[2:4]
        for line in (DEPLOY / "README.md").read_text().splitlines()
        if line.startswith("| ")
    }
    (row,) = [cells for name, cells in rows.items() if name.startswith(role)]
    allowed = _allowed(user)
    assert allowed["publish"]
    assert allowed["subscribe"]
    for kind, cell in zip(("publish", "subscribe"), row, strict=True):
        for subject in allowed[kind]:
            named = subject.replace(user, placeholder)
            also = named.endswith(".>") and f"`{named[:-2]}` (and `.>`)" in cell
            assert f"`{named}`" in cell or also, f"{role} {kind}: {named} is not in the table"


async def test_the_agent_sdk_runs_as_the_deploy_agent_user(
    single_server: NatsProcess, tmp_path: Path
) -> None:
    """The Python SDK as `builder-7` with the template's permissions and nothing more: its
    results router (an ordered consumer, named afresh) sees a read released, and its worker
    reads the durable `agent-builder-7` and runs a queued call once."""
    from workflow.client.agent import Headgate
    from workflow.messages import Released
    from workflow.nats_target import NatsTarget
    from workflow.service.lifecycle import Service
    from workflow.service.settings import Settings

    service = Service(Settings(
        data_dir=tmp_path / "service", nats_url=single_server.url, nats_user=SERVICE,
        nats_password=f"{SERVICE}-dev-password",
    ))  # fmt: skip
    await service.start()
    violations = Violations()
    target = NatsTarget(
        single_server.url, user=AGENT, password=f"{AGENT}-dev-password",
        inbox_prefix=f"_INBOX.{AGENT}",
    )  # fmt: skip
    try:
        async with Headgate.connect(
            target, agent=AGENT, state_dir=tmp_path / "agent", data_dir=tmp_path / "service",
            error_cb=violations.record,
        ) as hg:  # fmt: skip
            ticket = await hg.propose("read_file", {"path": "/w/README.md"})
            outcome = await ticket.result(timeout=20)
            assert isinstance(outcome, Released), outcome
            ran: list[str] = []
            stop = asyncio.Event()

            async def read_file(path: str) -> str:
                ran.append(path)
                stop.set()
                return "12 lines"

            await hg.enqueue("read_file", {"path": "/w/notes.md"})
            worker = asyncio.create_task(hg.run_released({"read_file": read_file}, stop=stop))
            await asyncio.wait_for(worker, 30)
            assert ran == ["/w/notes.md"]
        assert violations.errors == []
    finally:
        await service.stop()


async def test_the_approver_sdk_approves_as_the_deploy_approver_user(
    single_server: NatsProcess, tmp_path: Path
) -> None:
    """The approver SDK as `alice` with the template's permissions: it reads the held call
    from its durable `approver-alice`, signs an approval, and the agent's call is released."""
    from workflow.client.agent import Headgate
    from workflow.client.approver import Approver
    from workflow.messages import Released
    from workflow.nats_target import NatsTarget
    from workflow.service.lifecycle import Service
    from workflow.service.settings import Settings
    from workflow.signing import ApproverKey

    key = ApproverKey.generate()
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[approvers.{APPROVER}]\nkey = "{key.public_key}"\nroles = ["approver"]\n')
    service = Service(Settings(
        data_dir=tmp_path / "service", nats_url=single_server.url, nats_user=SERVICE,
        nats_password=f"{SERVICE}-dev-password", policy_path=policy,
    ))  # fmt: skip
    await service.start()

    def target(user: str) -> NatsTarget:
        return NatsTarget(
            single_server.url, user=user, password=f"{user}-dev-password",
            inbox_prefix=f"_INBOX.{user}",
        )  # fmt: skip

    violations = Violations()
    try:
        async with (
            Headgate.connect(target(AGENT), agent=AGENT, data_dir=tmp_path / "service") as hg,
            Approver.connect(
                target(APPROVER), name=APPROVER, key=key, data_dir=tmp_path / "service",
                error_cb=violations.record,
            ) as approver,
        ):  # fmt: skip
            ticket = await hg.propose("write_file", {"path": "/w/out.txt", "content": "x"})
            assert ticket.held
            async for item in approver.inbox():
                assert item.proposal_id == ticket.proposal_id
                await item.approve(reason="fine")
                break
            outcome = await ticket.result(timeout=20)
            assert isinstance(outcome, Released), outcome
        assert violations.errors == []
    finally:
        await service.stop()
