"""Registered agents on the embedded nats-server: each its own user, allowed its own subjects
only, and the shared agent user denied theirs — against a real nats-server started by the
service, as `headgate serve` runs it."""

from __future__ import annotations

import asyncio
import json
import signal
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import nats.errors
import pytest
from nats.aio.client import Client as NATS
from nats.js.api import DeliverPolicy

from tests.adapters.test_hook_gate import READ, WRITE
from tests.adapters.test_lite import _reject, light
from tests.service.helpers import running_service, unique_prefix
from tests.service.test_embedded_access import Refusals, run_cli
from tests.service.test_hook_endpoint import READ as HOOK_READ
from tests.service.test_hook_endpoint import decision_of, post, reason_of
from tests.support.executable import headgate_executable
from workflow import agent_identities, datadir
from workflow.adapters import claude_code, gate
from workflow.adapters.calls import Action, proposal_base, proposal_id
from workflow.adapters.options import GateOptions
from workflow.client import Approver, Headgate
from workflow.client.connection import (
    Role,
    agent_credentials_file,
    credentials_file,
    inbox_prefix_for,
    resolve_nats,
)
from workflow.client.results import NamedConsumer
from workflow.client.worker import consumer_config
from workflow.errors import ConfigError
from workflow.messages import Released
from workflow.service.embedded_access import accounts_config, agent_permissions, permissions
from workflow.service.lifecycle import Service
from workflow.service.settings import Settings
from workflow.signing import ApproverKey
from workflow.subjects import Subjects

ALPHA, BETA, OPEN = "alpha", "beta", "gamma"  # two registered agents, one that is not


async def serve(data: Path, **settings: object) -> Service:
    service = Service(Settings(data_dir=data, prefix=unique_prefix(), **settings))  # type: ignore[arg-type]
    await service.start()
    return service


@pytest.fixture
async def embedded(tmp_path: Path) -> AsyncIterator[Service]:
    """`serve` with ALPHA and BETA registered before it starts."""
    data = tmp_path / ".headgate"
    for name in (ALPHA, BETA):
        agent_identities.add(data, name)
    service = await serve(data)
    try:
        yield service
    finally:
        await service.stop()


async def as_agent(service: Service, name: str, refusals: Refusals) -> NATS:
    """A raw client with `name`'s own credentials and private inbox."""
    return await nats.connect(
        service.url, nkeys_seed=str(agent_credentials_file(service.settings.data_dir, name)),
        inbox_prefix=inbox_prefix_for(name), error_cb=refusals.on_error, allow_reconnect=False,
    )  # fmt: skip


async def as_shared(service: Service, refusals: Refusals) -> NATS:
    return await nats.connect(
        service.url, nkeys_seed=str(credentials_file(service.settings.data_dir, Role.AGENT)),
        inbox_prefix=inbox_prefix_for(Role.AGENT.value), error_cb=refusals.on_error,
        allow_reconnect=False,
    )  # fmt: skip


async def refused_publish(nc: NATS, refusals: Refusals, subject: str) -> None:
    await nc.publish(subject, b"{}")
    assert f'permissions violation for publish to "{subject.lower()}"' in await refusals.next()


async def refused_subscription(nc: NATS, refusals: Refusals, subject: str) -> None:
    await nc.subscribe(subject)
    expected = f'permissions violation for subscription to "{subject.lower()}"'
    assert expected in await refusals.next()


def create_request(stream: str, name: str, filter_subject: str, deliver: str) -> bytes:
    config = {
        "name": name, "filter_subject": filter_subject, "deliver_subject": deliver,
        "ack_policy": "none", "mem_storage": True, "inactive_threshold": 5_000_000_000,
    }  # fmt: skip
    return json.dumps({"stream_name": stream, "config": config}).encode()


async def proposal_accepted(nc: NATS, subject: str, body: bytes = b"{}") -> bool:
    """A JetStream publish the stream acknowledged (the stage then refuses `{}`: no matter)."""
    ack = await nc.jetstream().publish(subject, body, headers={"Nats-Msg-Id": "probe-" + subject})
    return ack.seq > 0


# --------------------------------------------------------------------------- a registered agent


async def test_a_registered_agent_cannot_propose_cancel_or_ask_as_another(
    embedded: Service,
) -> None:
    s, refusals = embedded.subjects, Refusals()
    nc = await as_agent(embedded, ALPHA, refusals)
    try:
        for subject in (s.proposals(BETA), s.cancel(BETA), s.executed(BETA),
                        s.api_status(BETA), s.api_offered(BETA),
                        s.proposals(OPEN), s.decisions("rq_x")):  # fmt: skip
            await refused_publish(nc, refusals, subject)
        assert await proposal_accepted(nc, s.proposals(ALPHA))  # its own: accepted
    finally:
        await nc.close()


async def test_a_registered_agent_cannot_read_another_agents_results(embedded: Service) -> None:
    s, refusals = embedded.subjects, Refusals()
    nc = await as_agent(embedded, ALPHA, refusals)
    try:
        for subject in (s.released(BETA), s.held(BETA), s.blocked(BETA), s.released("*"),
                        "_INBOX.beta.>", "_INBOX.agent.>"):  # fmt: skip
            await refused_subscription(nc, refusals, subject)
        await nc.subscribe(s.released(ALPHA))  # its own: no refusal (the next check says so)
        await nc.flush()
        await refused_subscription(nc, refusals, s.inbox("*"))
    finally:
        await nc.close()


async def test_a_registered_agent_cannot_make_a_consumer_on_another_agents_results(
    embedded: Service,
) -> None:
    s, refusals = embedded.subjects, Refusals()
    stream = s.stream("results")
    nc = await as_agent(embedded, ALPHA, refusals)
    try:
        deliver = f"{inbox_prefix_for(ALPHA)}.deliver"
        # Through the filtered create subject naming BETA's results: refused by NATS.
        theirs = f"$JS.API.CONSUMER.CREATE.{stream}.c1.{s.results(BETA)}"
        with pytest.raises(nats.errors.TimeoutError):
            await nc.request(theirs, create_request(stream, "c1", s.results(BETA), deliver), 2)
        assert "permissions violation for publish" in await refusals.next()
        # Through the bare create subject (its filter would go unchecked): refused.
        bare = f"$JS.API.CONSUMER.CREATE.{stream}"
        with pytest.raises(nats.errors.TimeoutError):
            await nc.request(bare, create_request(stream, "c2", s.results(BETA), deliver), 2)
        assert f'publish to "{bare.lower()}"' in await refusals.next()
        # Its own filter in the subject, BETA's in the config: JetStream refuses the mismatch.
        mine = f"$JS.API.CONSUMER.CREATE.{stream}.c3.{s.results(ALPHA)}"
        answer = await nc.request(mine, create_request(stream, "c3", s.results(BETA), deliver), 5)
        assert "did not match filtered subject" in json.loads(answer.data)["error"]["description"]
        # BETA's unattended worker's durable: neither read nor acked by ALPHA.
        for subject in (f"$JS.API.CONSUMER.MSG.NEXT.{stream}.agent-{BETA}",
                        f"$JS.API.CONSUMER.INFO.{stream}.agent-{BETA}",
                        f"$JS.ACK.{stream}.agent-{BETA}.1.1.1.1.1"):  # fmt: skip
            await refused_publish(nc, refusals, subject)
        # Its own results: a consumer is made.
        answer = await nc.request(mine, create_request(stream, "c3", s.results(ALPHA), deliver), 5)
        assert json.loads(answer.data)["name"] == "c3"
    finally:
        await nc.close()


async def test_a_registered_agent_cannot_repoint_another_agents_durable(
    embedded: Service,
) -> None:
    """Through its own filter, but under BETA's durable name: that would update BETA's durable
    to deliver ALPHA's results, and BETA's worker would no longer get its releases."""
    s, refusals = embedded.subjects, Refusals()
    stream = s.stream("results")
    beta = await as_agent(embedded, BETA, Refusals())
    nc = await as_agent(embedded, ALPHA, refusals)
    try:
        await beta.jetstream().add_consumer(stream, config=consumer_config(s, BETA))
        hijack = consumer_config(s, BETA)
        hijack.filter_subject = s.results(ALPHA)
        body = json.dumps({"stream_name": stream, "config": hijack.as_dict()}).encode()
        subject = f"$JS.API.CONSUMER.CREATE.{stream}.agent-{BETA}.{s.results(ALPHA)}"
        with pytest.raises(nats.errors.TimeoutError):
            await nc.request(subject, body, 2)
        assert "permissions violation for publish" in await refusals.next()
        info = await beta.jetstream().consumer_info(stream, f"agent-{BETA}")
        assert info.config.filter_subject == s.results(BETA)
    finally:
        await nc.close()
        await beta.close()


# --------------------------------------------------------------------------- the shared user


async def test_the_shared_agent_user_cannot_act_as_a_registered_agent(embedded: Service) -> None:
    s, refusals = embedded.subjects, Refusals()
    stream = s.stream("results")
    nc = await as_shared(embedded, refusals)
    try:
        for subject in (s.proposals(ALPHA), s.cancel(ALPHA), s.executed(ALPHA),
                        s.api_status(ALPHA), s.api_offered(BETA),
                        f"$JS.API.CONSUMER.CREATE.{stream}.c1.{s.results(ALPHA)}",
                        f"$JS.API.CONSUMER.CREATE.{stream}.agent-{ALPHA}",
                        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.agent-{ALPHA}",
                        f"$JS.ACK.{stream}.agent-{BETA}.1.1.1.1.1"):  # fmt: skip
            await refused_publish(nc, refusals, subject)
        for subject in (s.released(ALPHA), s.held(BETA), s.blocked(ALPHA), "_INBOX.alpha.>"):
            await refused_subscription(nc, refusals, subject)
        # An agent nobody registered still works through it (compatibility).
        assert await proposal_accepted(nc, s.proposals(OPEN))
        await nc.subscribe(s.released(OPEN))
        await nc.flush()
        await refused_subscription(nc, refusals, s.inbox("*"))  # the next refusal is this one
    finally:
        await nc.close()


async def test_without_the_shared_user_only_registered_agents_connect(tmp_path: Path) -> None:
    data = tmp_path / ".headgate"
    agent_identities.add(data, ALPHA)
    service = await serve(data, shared_agent=False)
    try:
        shared = NATS()
        try:
            with pytest.raises(Exception, match="Authorization Violation"):
                await shared.connect(
                    service.url, nkeys_seed=str(credentials_file(data, Role.AGENT)),
                    allow_reconnect=False, connect_timeout=5,
                )  # fmt: skip
        finally:
            await shared.close()
        refusals = Refusals()
        nc = await as_agent(service, ALPHA, refusals)
        try:
            assert await proposal_accepted(nc, service.subjects.proposals(ALPHA))
        finally:
            await nc.close()
        # The approver and the CLI are unaffected.
        pending = await run_cli(tmp_path, "pending", "--json", "--data-dir", str(data),
                                "--prefix", service.subjects.prefix)  # fmt: skip
        assert pending.returncode == 0, pending.stderr
        unregistered = await run_cli(
            tmp_path, "propose", "--agent", OPEN, "--tool", "read_file", "--args", "{}",
            "--data-dir", str(data), "--prefix", service.subjects.prefix,
        )  # fmt: skip
        assert unregistered.returncode != 0
        assert "headgate agents add" in unregistered.stderr
        assert "Traceback" not in unregistered.stderr
    finally:
        await service.stop()


# --------------------------------------------------------------------------- normal flow


async def test_a_registered_agents_sdk_finds_its_own_credentials_and_is_served(
    embedded: Service,
) -> None:
    data, prefix = embedded.settings.data_dir, embedded.subjects.prefix
    target = resolve_nats(role=Role.AGENT, data_dir=data, agent=ALPHA, env={})
    assert target.nkey == agent_credentials_file(data, ALPHA)
    assert target.inbox_prefix == "_INBOX.alpha"
    shared = resolve_nats(role=Role.AGENT, data_dir=data, agent=OPEN, env={})
    assert shared.nkey == credentials_file(data, Role.AGENT)
    seed = data / datadir.LOCAL_KEY_FILE
    async with (
        Headgate.connect(agent=ALPHA, workspace="acme", prefix=prefix, data_dir=data) as hg,
        Approver.connect(name="me", key=seed, prefix=prefix, data_dir=data) as approver,
    ):
        read = await hg.propose("read_file", {"path": "README.md"})
        assert isinstance(await read.result(timeout=10), Released)
        ticket = await hg.propose("write_file", {"path": "x.txt"})
        assert ticket.held
        inbox = approver.inbox(workspaces=["acme"])
        item = await asyncio.wait_for(inbox.__anext__(), 10)
        await inbox.aclose()
        assert item.item.proposal.agent == ALPHA
        assert (await item.approve()).accepted
        assert isinstance(await ticket.result(timeout=10), Released)


async def test_a_registered_agents_hook_light_path_and_cli_work(
    embedded: Service, tmp_path: Path
) -> None:
    data, prefix = embedded.settings.data_dir, embedded.subjects.prefix
    opts = GateOptions(agent=ALPHA, prefix=prefix, data_dir=data, wait=10)
    assert (await light(claude_code.parse(READ), opts)).action == Action.ALLOW
    assert (await gate.decide(claude_code.parse(READ), opts)).action == Action.ALLOW  # the SDK's
    write = claude_code.parse(WRITE)
    waiting = asyncio.create_task(light(write, opts))
    assert embedded.ctx is not None
    pid = proposal_id(proposal_base(write, ALPHA, "default"), 0)
    while (await embedded.ctx.store.proposals.history(pid)) is None:  # held by the service
        await asyncio.sleep(0.05)
    await _reject(embedded, data, pid)
    answer = await waiting
    assert answer.action == Action.DENY
    assert "not today" in answer.reason
    # The CLI as ALPHA, then as BETA: each with its own user.
    for name in (ALPHA, BETA):
        run = await run_cli(tmp_path, "propose", "--agent", name, "--tool", "read_file",
                            "--args", '{"path": "a"}', "--wait", "10", "--data-dir", str(data),
                            "--prefix", prefix)  # fmt: skip
        assert run.returncode == 0, run.stderr


async def test_a_registered_agents_unattended_worker_reads_its_durable(
    embedded: Service, tmp_path: Path
) -> None:
    """The worker's durable `agent-alpha` is created through the filtered create subject and
    read and acked with ALPHA's own user."""
    data, prefix = embedded.settings.data_dir, embedded.subjects.prefix
    ran: list[str] = []
    stop = asyncio.Event()

    async def read_file(path: str) -> str:
        ran.append(path)
        stop.set()
        return "read"

    async with Headgate.connect(agent=ALPHA, prefix=prefix, data_dir=data,
                                state_dir=tmp_path / "state") as hg:  # fmt: skip
        await hg.enqueue("read_file", {"path": "notes.txt"})
        stats = await asyncio.wait_for(hg.run_released({"read_file": read_file}, stop=stop), 30)
    assert ran == ["notes.txt"]
    assert stats.executed == 1


async def test_an_agent_given_a_data_dir_of_its_own_with_only_its_seed_is_served(
    embedded: Service, tmp_path: Path
) -> None:
    """Where agents must not read each other's seeds, each gets a directory holding only the
    URL, the service's public key and its own seed (HEADGATE_DATA_DIR in its sandbox)."""
    data, prefix = embedded.settings.data_dir, embedded.subjects.prefix
    mine = tmp_path / "alpha-only"
    for name in (datadir.URL_FILE, datadir.SERVICE_KEY_FILE):
        (mine / name).parent.mkdir(parents=True, exist_ok=True)
        (mine / name).write_text((data / name).read_text())
    seed = agent_credentials_file(mine, ALPHA)
    seed.parent.mkdir(parents=True)
    seed.write_text(agent_credentials_file(data, ALPHA).read_text())
    opts = GateOptions(agent=ALPHA, prefix=prefix, data_dir=mine, wait=10)
    assert (await light(claude_code.parse(READ), opts)).action == Action.ALLOW
    async with Headgate.connect(agent=ALPHA, prefix=prefix, data_dir=mine) as hg:
        read = await hg.propose("read_file", {"path": "README.md"})
        assert isinstance(await read.result(timeout=10), Released)
    assert not credentials_file(mine, Role.AGENT).exists()  # no shared seed to fall back on


# --------------------------------------------------------------------------- while serve runs


async def test_agents_added_and_removed_while_serve_runs_are_applied(tmp_path: Path) -> None:
    data = tmp_path / ".headgate"
    service = await serve(data)
    s = service.subjects
    refusals = Refusals()
    shared = await as_shared(service, refusals)
    try:
        await shared.subscribe(s.released(ALPHA))  # allowed while ALPHA is not registered
        assert await proposal_accepted(shared, s.proposals(ALPHA))
        added = await run_cli(tmp_path, "agents", "add", ALPHA, "--data-dir", str(data))
        assert added.returncode == 0, added.stderr
        assert "applied it" in added.stdout
        # The server took the subscription it no longer allows, and refuses the publish.
        assert f'subscription to "{s.released(ALPHA).lower()}"' in await refusals.next()
        await refused_publish(shared, refusals, s.proposals(ALPHA))
        mine = Refusals()
        own = await as_agent(service, ALPHA, mine)
        assert await proposal_accepted(own, s.proposals(ALPHA))
        listed = await run_cli(tmp_path, "agents", "list", "--json", "--data-dir", str(data))
        assert json.loads(listed.stdout)["agents"][0]["state"] == "applied"

        removed = await run_cli(tmp_path, "agents", "remove", ALPHA, "--data-dir", str(data))
        assert removed.returncode == 0, removed.stderr
        # Its own user is gone (the server closes its connection); the shared one may again.
        for _ in range(200):
            if own.is_closed:
                break
            await asyncio.sleep(0.05)
        assert own.is_closed
        assert await proposal_accepted(shared, s.proposals(ALPHA))
    finally:
        await shared.close()
        await service.stop()


async def test_the_http_hooks_take_only_a_registered_agents_own_token(
    nats_url: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    own = agent_identities.add(data, ALPHA).token.read_text().strip()
    async with running_service(nats_url, data, hook_listen="127.0.0.1:0") as h:
        shared = datadir.hook_token(data)[0]
        assert decision_of(await post(h, HOOK_READ, token=own, agent=ALPHA)) == "allow"
        refused = await post(h, HOOK_READ, token=shared, agent=ALPHA)  # the shared token: no
        assert decision_of(refused) == "block"
        assert "credentials/agents/NAME.token" in reason_of(refused)
        assert decision_of(await post(h, HOOK_READ, token=own, agent=OPEN)) == "block"
        assert decision_of(await post(h, HOOK_READ, token=shared, agent=OPEN)) == "allow"
        # Registered while serve runs: its own token from then on.
        later = agent_identities.add(data, BETA).token.read_text().strip()
        assert h.service.agent_access is not None
        assert await h.service.agent_access.apply("test")
        assert decision_of(await post(h, HOOK_READ, token=shared, agent=BETA)) == "block"
        assert decision_of(await post(h, HOOK_READ, token=later, agent=BETA)) == "allow"
        applied = agent_identities.read_applied(data)
        assert applied is not None
        assert not applied.embedded  # NATS users are the operator's on an external server
        assert applied.hook_agents == (ALPHA, BETA)


async def test_sighup_has_a_running_serve_apply_the_registered_agents(tmp_path: Path) -> None:
    data = tmp_path / ".headgate"
    proc = await asyncio.create_subprocess_exec(
        headgate_executable(), "serve", "--data-dir", str(data), "--prefix", unique_prefix(),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    try:

        async def line_with(text: str) -> str:
            assert proc.stderr is not None
            while True:
                line = (await proc.stderr.readline()).decode()
                assert line, "serve ended"
                if text in line:
                    return line

        await asyncio.wait_for(line_with("registered agents (start): none"), 60)
        proc.send_signal(signal.SIGHUP)
        await asyncio.wait_for(line_with("registered agents (SIGHUP)"), 30)
        applied = agent_identities.read_applied(data)
        assert applied is not None
        assert applied.pid == proc.pid
    finally:
        proc.terminate()
        await proc.wait()


# --------------------------------------------------------------------------- registry and CLI


def test_names_duplicates_and_file_modes(tmp_path: Path) -> None:
    data = tmp_path / ".headgate"
    found = agent_identities.add(data, ALPHA)
    assert stat.S_IMODE(found.seed.stat().st_mode) == 0o600
    assert stat.S_IMODE(found.token.stat().st_mode) == 0o600
    assert stat.S_IMODE(found.seed.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((data / datadir.CREDENTIALS_DIR).stat().st_mode) == 0o700
    assert stat.S_IMODE(data.stat().st_mode) == 0o700  # made by `agents add` before serve ran
    assert found.seed.read_text().startswith("SU")
    with pytest.raises(ConfigError, match="already registered"):
        agent_identities.add(data, ALPHA)
    for bad in ("a.b", "a b", "*", "", "x" * 65, "../x"):
        with pytest.raises(ConfigError, match="is not valid"):
            agent_identities.add(data, bad)
    for reserved in ("agent", "approver", "service"):
        with pytest.raises(ConfigError, match="taken by a role"):
            agent_identities.add(data, reserved)
    with pytest.raises(ConfigError, match="no agent 'nobody' is registered"):
        agent_identities.remove(data, "nobody")
    assert list(agent_identities.registered(data)) == [ALPHA]


async def test_the_agents_commands_say_what_is_wrong_without_a_traceback(
    tmp_path: Path,
) -> None:
    data = str(tmp_path / ".headgate")
    added = await run_cli(tmp_path, "agents", "add", ALPHA, "--data-dir", data)
    assert added.returncode == 0, added.stderr
    assert "no headgate serve runs" in added.stdout
    for args, says in (
        (("add", ALPHA), "already registered"),
        (("add", "no.dots"), "is not valid"),
        (("remove", BETA), "no agent 'beta' is registered"),
    ):
        run = await run_cli(tmp_path, "agents", *args, "--data-dir", data)
        assert run.returncode == 2
        assert says in run.stderr
        assert "Traceback" not in run.stderr
    helped = await run_cli(tmp_path, "agents", "--help")
    assert "shared agent user" in helped.stdout
    for name, token in ((ALPHA, f"credentials/agents/{ALPHA}.token"), (OPEN, "hook.token")):
        snippet = await run_cli(tmp_path, "hook", "claude-code", "--agent", name,
                                "--print-config", "--http", "--hook-url", "http://127.0.0.1:9",
                                "--data-dir", data)  # fmt: skip
        assert snippet.returncode == 0, snippet.stderr
        assert f"{data}/{token})" in snippet.stdout  # the token file it tells to export


def test_the_config_gives_each_registered_agent_its_own_user_and_denies_it_to_the_shared_one() -> (
    None
):
    subjects = Subjects("hg")
    keys = {role: f"U{role.value.upper()}KEY" for role in Role}
    text = accounts_config(keys, subjects, {ALPHA: "UALPHAKEY"})
    assert "nkey: UALPHAKEY  # agent alpha" in text
    shared = permissions(Role.AGENT, subjects, (ALPHA,))
    assert "hg.proposals.alpha" in shared.deny_publish
    assert "hg.released.alpha" in shared.deny_subscribe
    # No create subject whose filter goes unchecked, for anyone playing an agent.
    assert "$JS.API.CONSUMER.CREATE.HG_RESULTS" not in shared.publish
    own = agent_permissions(ALPHA, subjects)
    assert "$JS.API.CONSUMER.CREATE.HG_RESULTS.*.hg.*.alpha" in own.publish
    assert all(ALPHA in s or s in ("hg.api.key", "$JS.API.INFO", "$JS.FC.HG_RESULTS.>")
               for s in own.publish)  # fmt: skip
    assert "nkey: UAGENTKEY" not in accounts_config(keys, subjects, {}, shared_agent=False)


def test_the_sdks_results_consumers_are_named_afresh_for_every_create() -> None:
    """nats-py copies the config (`evolve`) before each create, also when it remakes an
    ordered consumer: each copy has a new name, so a remade consumer never updates the one it
    replaces, and every create goes through the filtered create subject."""
    config = NamedConsumer(deliver_policy=DeliverPolicy.NEW)
    config.filter_subject = Subjects("hg").results(ALPHA)
    first, second = config.evolve(), config.evolve()
    assert first.name != second.name
    assert first.name is not None
    assert first.name.startswith(f"{ALPHA}-")
    assert first.as_dict()["filter_subject"] == "hg.*.alpha"


@pytest.mark.parametrize("where", ["data dir", "copy"])
async def test_an_nkey_given_by_hand_gets_its_user_s_inbox_and_makes_requests(
    embedded: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """`HEADGATE_NATS_NKEY` (or `--nats-nkey`) naming a seed of the embedded server — a
    registered agent's, a role's — gets the reply inbox that user may read, so its requests
    (API queries, JetStream publishes) are answered: found by the seed in the data dir, or, for
    a copy with no data dir beside it, by the name it was written under."""
    data, prefix = embedded.settings.data_dir, embedded.subjects.prefix
    seeds = {
        ALPHA: agent_credentials_file(data, ALPHA),
        "approver": credentials_file(data, Role.APPROVER),
    }
    if where == "copy":  # the agent's own directory: no data dir with the other seeds
        elsewhere = tmp_path / "own"
        elsewhere.mkdir()
        for name, seed in list(seeds.items()):
            seeds[name] = elsewhere / seed.name
            seeds[name].write_text(seed.read_text())
        monkeypatch.setenv("HEADGATE_DATA_DIR", str(elsewhere))
    else:  # another name, found by its content
        monkeypatch.setenv("HEADGATE_DATA_DIR", str(data))
    monkeypatch.setenv("HEADGATE_NATS_URL", embedded.url)

    monkeypatch.setenv("HEADGATE_NATS_NKEY", str(seeds[ALPHA]))
    assert resolve_nats(role=Role.AGENT, agent=ALPHA).inbox_prefix == f"_INBOX.{ALPHA}"
    assert embedded.ctx is not None
    service_key = embedded.ctx.signer.public_key
    async with Headgate.connect(agent=ALPHA, prefix=prefix, service_key=service_key) as hg:
        ticket = await hg.propose("read_file", {"path": "README.md"})  # a JetStream publish
        assert isinstance(await ticket.result(timeout=20), Released)
        again = await hg.ticket(ticket.proposal_id)  # api.get: a request on its inbox
        assert isinstance(await again.result(timeout=20), Released)

    monkeypatch.setenv("HEADGATE_NATS_NKEY", str(seeds["approver"]))
    assert resolve_nats(role=Role.APPROVER).inbox_prefix == "_INBOX.approver"
    async with Approver.connect(
        name="me", key=ApproverKey.generate(), prefix=prefix, service_key=service_key
    ) as approver:
        assert await approver.pending() == []
        assert (await approver.freezes()).freezes == []
