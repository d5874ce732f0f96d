"""Who may do what on the embedded nats-server: one user per role, and one per registered agent.

`serve` without `--nats-url` starts its own nats-server. Without accounts, any process on the
machine could connect to it, publish decisions, forge events or read every pending proposal
through `api.*`. So the embedded server gets the permission model of `deploy/nats/accounts.conf`
with one nkey user per role:

- service: everything under the prefix, the JetStream API, acks and replies;
- agent (shared by every agent that has no user of its own): proposals, cancels, execution
  reports, status and offered-tools queries for any agent name, the held/released/blocked
  subjects of any agent, consumers on the results stream; it reads its replies
  (`_INBOX.agent.>`);
- approver: decisions, `api.pending/get/explain/offered`, the controls (`api.grant.*`,
  `api.freeze(s)`, `api.policy.backtest`), `api.web.invite` (a signed request
  for a passkey link), its consumer on the inbox stream; it reads the freezes stream
  (`<prefix>.controls.freeze|thaw`: live, and stored messages by sequence or subject, never
  publishing there) and its replies (`_INBOX.approver.>`).

The shared agent user can speak as any agent: the service's agent-equals-subject check cannot
tell one of its clients from another. `headgate agents add NAME` registers an agent with a user
of its own (`credentials/agents/NAME.nk`), allowed NAME's subjects only — its proposals,
cancels, reports and queries, its held/released/blocked subjects, its private inbox
`_INBOX.NAME.>`, consumers on the results stream whose filter is NAME's (created through the
filtered create subject, which the server checks against the consumer's config; never under
another registered agent's durable name, which would repoint that durable) and its durable
`agent-NAME`. The shared user is then DENIED every one of those subjects (NATS deny
lists), so nobody else can propose, cancel, report or ask as NAME, subscribe to its results or
read and ack its durable consumer. What the shared user can still do while it exists: make a
consumer on the results stream with a wildcard filter (`<prefix>.*.*`, which no deny list can
single out) and so read copies of a registered agent's events — not consume, answer or forge
them (every event is signed by the service). `serve --no-shared-agent` drops the shared user:
then only registered agents connect, and nothing reads another agent's events.

A client without credentials is refused. The role seeds are written once (mode 0600, in a 0700
directory) to `<data dir>/credentials/<role>.nk`, where the CLI and the SDKs find them
(`workflow.client.connection.resolve_nats`, which prefers the agent's own seed); the server
config (public keys only) is written on every start and whenever the registered agents change
(`workflow.service.agent_access` reloads the running server).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from workflow.client.connection import Role, credentials_file, inbox_prefix_for
from workflow.signing import ApproverKey
from workflow.subjects import CONTROL_API_NAMES, Subjects

#: The embedded server's account config, beside its JetStream store.
CONFIG_FILE = "access.conf"


@dataclass(frozen=True, slots=True)
class Permissions:
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    #: Subjects refused although an allow covers them (a deny wins in nats-server).
    deny_publish: tuple[str, ...] = ()
    deny_subscribe: tuple[str, ...] = ()


def consumer_name(agent: str) -> str:
    """The unattended worker's durable on the results stream (`workflow.client.worker`)."""
    return f"agent-{agent}"


def agent_permissions(agent: str, subjects: Subjects, others: tuple[str, ...] = ()) -> Permissions:
    """A registered agent's own user: `agent`'s subjects and nothing else (as the agents of
    deploy/nats/accounts.conf). `others`: the other registered agents, whose durables it may
    not touch."""
    results, own = subjects.stream("results"), subjects.results(agent)
    durable = consumer_name(agent)
    return Permissions(
        publish=(
            subjects.proposals(agent), subjects.cancel(agent), subjects.executed(agent),
            subjects.api_status(agent), subjects.api_offered(agent), subjects.api("key"),
            "$JS.API.INFO",
            # Consumers whose filter is its own results, any name (the SDK's ordered
            # consumers are named afresh each time): the server refuses a create whose config
            # filter differs from the subject's. Never the bare CONSUMER.CREATE.<stream>.
            f"$JS.API.CONSUMER.CREATE.{results}.*.{own}",
            f"$JS.API.CONSUMER.INFO.{results}.{durable}",
            f"$JS.API.CONSUMER.DELETE.{results}.{durable}",
            f"$JS.API.CONSUMER.MSG.NEXT.{results}.{durable}",
            f"$JS.ACK.{results}.{durable}.>", f"$JS.FC.{results}.>",
        ),
        subscribe=(
            f"{inbox_prefix_for(agent)}.>",
            subjects.held(agent), subjects.released(agent), subjects.blocked(agent),
        ),
        # A create through its own filter under another agent's durable name would update
        # that durable (create-or-update) to read this agent's results instead: the other
        # agent's unattended worker would stop getting its releases.
        deny_publish=tuple(
            f"$JS.API.CONSUMER.CREATE.{results}.{consumer_name(other)}.>"
            for other in others if other != agent
        ),
    )  # fmt: skip


def _registered_denials(agents: tuple[str, ...], subjects: Subjects) -> Permissions:
    """What the shared agent user may not touch of the registered `agents`."""
    results = subjects.stream("results")
    publish: list[str] = []
    subscribe: list[str] = []
    for agent in agents:
        durable = consumer_name(agent)
        publish += [
            subjects.proposals(agent), subjects.cancel(agent), subjects.executed(agent),
            subjects.api_status(agent), subjects.api_offered(agent),
            f"$JS.API.CONSUMER.CREATE.{results}.*.{subjects.results(agent)}",
            f"$JS.API.CONSUMER.CREATE.{results}.{durable}",
            f"$JS.API.CONSUMER.CREATE.{results}.{durable}.>",
            f"$JS.API.CONSUMER.INFO.{results}.{durable}",
            f"$JS.API.CONSUMER.DELETE.{results}.{durable}",
            f"$JS.API.CONSUMER.MSG.NEXT.{results}.{durable}",
            f"$JS.ACK.{results}.{durable}.>",
        ]  # fmt: skip
        subscribe += [subjects.held(agent), subjects.released(agent), subjects.blocked(agent)]
    return Permissions((), (), tuple(publish), tuple(subscribe))


def permissions(role: Role, subjects: Subjects, registered: tuple[str, ...] = ()) -> Permissions:
    """What a user of `role` may publish and subscribe to under `subjects`' prefix; the shared
    agent user is denied the subjects of the `registered` agents."""
    p = subjects.prefix
    results, inbox = subjects.stream("results"), subjects.stream("inbox")
    if role is Role.SERVICE:
        return Permissions(
            publish=(f"{p}.>", "$JS.API.>", "$JS.ACK.>", "$JS.FC.>", "_INBOX.>"),
            subscribe=(f"{p}.>", "_INBOX.>", "$JS.EVENT.ADVISORY.>"),
        )
    if role is Role.AGENT:
        denied = _registered_denials(registered, subjects)
        return Permissions(
            publish=(
                subjects.proposals("*"), subjects.cancel("*"), subjects.executed("*"),
                subjects.api_status("*"), subjects.api_offered("*"), subjects.api("key"),
                "$JS.API.INFO",
                # Results consumers: the SDK's ordered consumers and the unattended worker's
                # durable one, on the results stream only, named (a create through the bare
                # CONSUMER.CREATE.<stream> would slip past the deny list below).
                f"$JS.API.CONSUMER.CREATE.{results}.>",
                f"$JS.API.CONSUMER.INFO.{results}.>", f"$JS.API.CONSUMER.DELETE.{results}.>",
                f"$JS.API.CONSUMER.MSG.NEXT.{results}.>",
                f"$JS.ACK.{results}.>", f"$JS.FC.{results}.>",
            ),
            subscribe=(
                f"{inbox_prefix_for(Role.AGENT.value)}.>",
                subjects.held("*"), subjects.released("*"), subjects.blocked("*"),
            ),
            deny_publish=denied.deny_publish, deny_subscribe=denied.deny_subscribe,
        )  # fmt: skip
    controls = subjects.stream("controls")
    return Permissions(
        publish=(
            subjects.decisions("*"),
            *(subjects.api(name) for name in ("pending", "get", "explain", "offered", "key")),
            # Grants, freezes and backtests: each request is signed and authorised by the
            # service like a decision.
            *(subjects.api_control(name) for name in CONTROL_API_NAMES),
            subjects.api_web("invite"),
            "$JS.API.INFO",
            f"$JS.API.CONSUMER.CREATE.{inbox}.>", f"$JS.API.CONSUMER.INFO.{inbox}.>",
            f"$JS.API.CONSUMER.MSG.NEXT.{inbox}.>", f"$JS.ACK.{inbox}.>",
            # The freezes stream, read only: its state, a message by sequence or the last of a
            # subject (`next_by_subj` walks it), direct gets. No consumers: a push consumer's
            # deliver subject is the creator's choice, and nothing here needs one.
            *_stream_reads(controls),
        ),
        # Freezes put in force and lifted, live (signed by the service).
        subscribe=(f"{inbox_prefix_for(Role.APPROVER.value)}.>", subjects.controls(">")),
    )  # fmt: skip


def _stream_reads(stream: str) -> tuple[str, ...]:
    """The JetStream API subjects that read `stream`'s messages and change nothing."""
    return (
        f"$JS.API.STREAM.INFO.{stream}", f"$JS.API.STREAM.MSG.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}", f"$JS.API.DIRECT.GET.{stream}.>",
    )  # fmt: skip


def accounts_config(
    public_keys: Mapping[Role, str],
    subjects: Subjects,
    agents: Mapping[str, str] | None = None,
    *,
    shared_agent: bool = True,
) -> str:
    """nats-server config text: one JetStream account, one nkey user per role and per
    registered agent (`agents`: name -> public key), no anonymous access (a server with users
    refuses a client that presents none). Without `shared_agent`, no shared agent user."""
    agents = dict(agents or {})
    registered = tuple(sorted(agents))
    users = []
    for role in Role:
        if role is Role.AGENT and not shared_agent:
            continue
        users.append(_user(public_keys[role], role.value, permissions(role, subjects, registered)))
    for name in registered:
        allowed = agent_permissions(name, subjects, registered)
        users.append(_user(agents[name], f"agent {name}", allowed))
    return (
        "# Written by `headgate serve` on every start and when the registered agents change\n"
        "# (see workflow/service/embedded_access.py).\n"
        "accounts: {\n"
        "  HEADGATE: {\n"
        "    jetstream: enabled\n"
        "    users: [\n" + "\n".join(users) + "\n    ]\n"
        "  }\n"
        "}\n"
    )


def _user(public_key: str, comment: str, allowed: Permissions) -> str:
    def rule(allow: tuple[str, ...], deny: tuple[str, ...]) -> str:
        return f"{{ allow: {_list(allow)}" + (f", deny: {_list(deny)}" if deny else "") + " }"

    return (
        "      {\n"
        f"        nkey: {public_key}  # {comment}\n"
        "        permissions: {\n"
        f"          publish: {rule(allowed.publish, allowed.deny_publish)}\n"
        f"          subscribe: {rule(allowed.subscribe, allowed.deny_subscribe)}\n"
        "        }\n"
        "      }"
    )


def _list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


@dataclass(frozen=True, slots=True)
class EmbeddedAccess:
    config: Path
    #: The service's own credentials on that server.
    service_seed: Path
    #: The registered agents the config gives a user of their own: name -> public key.
    agents: Mapping[str, str]
    shared_agent: bool


def prepare_access(
    data_dir: Path, store_dir: Path, subjects: Subjects, *, shared_agent: bool = True
) -> EmbeddedAccess:
    """Create the role seeds once (0600) and write the server's account config, with a user
    for every agent registered in the data dir (`workflow.agent_identities`)."""
    from workflow.agent_identities import registered

    keys: dict[Role, str] = {}
    for role in Role:
        path = credentials_file(data_dir, role)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)
        if path.exists():
            os.chmod(path, 0o600)  # whatever happened to it since, only the owner reads it
            keys[role] = ApproverKey.from_file(path).public_key
        else:
            key = ApproverKey.generate()
            key.write(path)
            keys[role] = key.public_key
    agents = {name: found.public_key for name, found in registered(data_dir).items()}
    store_dir.mkdir(parents=True, exist_ok=True)
    config = store_dir / CONFIG_FILE
    partial = config.with_name(f".{CONFIG_FILE}.partial")  # a reload never reads half a file
    partial.write_text(accounts_config(keys, subjects, agents, shared_agent=shared_agent))
    os.chmod(partial, 0o600)
    partial.replace(config)
    return EmbeddedAccess(config, credentials_file(data_dir, Role.SERVICE), agents, shared_agent)
