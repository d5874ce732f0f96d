"""Who may do what on the embedded nats-server: one user per role, credentials in the data dir.

`serve` without `--nats-url` starts its own nats-server. Without accounts, any process on the
machine could connect to it, publish decisions, forge events or read every pending proposal
through `api.*`. So the embedded server gets the permission model of `deploy/nats/accounts.conf`
with one nkey user per role:

- service: everything under the prefix, the JetStream API, acks and replies;
- agent: proposals, cancels, execution reports, status and offered-tools queries about
  itself (`api.status.<agent>`, `api.offered.<agent>`), consumers on the results stream; it
  reads its replies (`_INBOX.agent.>`) and the held/released/blocked subjects;
- approver: decisions, `api.pending/get/explain/offered`, the controls (`api.grant.*`,
  `api.freeze(s)`, `api.policy.backtest`), `api.web.invite` (a signed request
  for a passkey link), its consumer on the inbox stream;
  it reads its replies (`_INBOX.approver.>`).

A client without credentials is refused. The seeds are written once (mode 0600, in a 0700
directory) to `<data dir>/credentials/<role>.nk`, where the CLI and the SDKs find them
(`workflow.client.connection.resolve_nats`); the server config (public keys only) is written
on every start. Unlike the deploy accounts, all agents share one user here: an agent could
publish as another agent, which the service's agent-equals-subject check cannot tell apart.
Give each agent its own user (deploy/nats/accounts.conf) where agents do not trust each other.
"""

from __future__ import annotations

import json
import os
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


def permissions(role: Role, subjects: Subjects) -> Permissions:
    """What a user of `role` may publish and subscribe to under `subjects`' prefix."""
    p = subjects.prefix
    results, inbox = subjects.stream("results"), subjects.stream("inbox")
    if role is Role.SERVICE:
        return Permissions(
            publish=(f"{p}.>", "$JS.API.>", "$JS.ACK.>", "$JS.FC.>", "_INBOX.>"),
            subscribe=(f"{p}.>", "_INBOX.>", "$JS.EVENT.ADVISORY.>"),
        )
    if role is Role.AGENT:
        return Permissions(
            publish=(
                subjects.proposals("*"), subjects.cancel("*"), subjects.executed("*"),
                subjects.api_status("*"), subjects.api_offered("*"), subjects.api("key"),
                "$JS.API.INFO",
                # Results consumers: the SDK's ordered consumer and the unattended worker's
                # durable one, on the results stream only.
                f"$JS.API.CONSUMER.CREATE.{results}", f"$JS.API.CONSUMER.CREATE.{results}.>",
                f"$JS.API.CONSUMER.INFO.{results}.>", f"$JS.API.CONSUMER.DELETE.{results}.>",
                f"$JS.API.CONSUMER.MSG.NEXT.{results}.>",
                f"$JS.ACK.{results}.>", f"$JS.FC.{results}.>",
            ),
            subscribe=(
                f"{inbox_prefix_for(Role.AGENT.value)}.>",
                subjects.held("*"), subjects.released("*"), subjects.blocked("*"),
            ),
        )  # fmt: skip
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
        ),
        subscribe=(f"{inbox_prefix_for(Role.APPROVER.value)}.>",),
    )  # fmt: skip


def accounts_config(public_keys: dict[Role, str], subjects: Subjects) -> str:
    """nats-server config text: one JetStream account, one nkey user per role, no anonymous
    access (a server with users refuses a client that presents none)."""
    users = []
    for role in Role:
        allowed = permissions(role, subjects)
        users.append(
            "      {\n"
            f"        nkey: {public_keys[role]}  # {role.value}\n"
            "        permissions: {\n"
            f"          publish: {{ allow: {_list(allowed.publish)} }}\n"
            f"          subscribe: {{ allow: {_list(allowed.subscribe)} }}\n"
            "        }\n"
            "      }"
        )
    return (
        "# Written by `headgate serve` on every start (see workflow/service/embedded_access.py).\n"
        "accounts: {\n"
        "  HEADGATE: {\n"
        "    jetstream: enabled\n"
        "    users: [\n" + "\n".join(users) + "\n    ]\n"
        "  }\n"
        "}\n"
    )


def _list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


@dataclass(frozen=True, slots=True)
class EmbeddedAccess:
    config: Path
    #: The service's own credentials on that server.
    service_seed: Path


def prepare_access(data_dir: Path, store_dir: Path, subjects: Subjects) -> EmbeddedAccess:
    """Create the role seeds once (0600) and write the server's account config."""
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
    store_dir.mkdir(parents=True, exist_ok=True)
    config = store_dir / CONFIG_FILE
    config.write_text(accounts_config(keys, subjects))
    os.chmod(config, 0o600)
    return EmbeddedAccess(config, credentials_file(data_dir, Role.SERVICE))
