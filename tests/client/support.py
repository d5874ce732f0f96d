"""Shared pieces of the SDK tests: a policy with named approvers, and the service under it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.service.helpers import Harness, running_service
from workflow.signing import ApproverKey

KEYS = {name: ApproverKey.generate() for name in ("alice", "bob")}


def policy_text(*, hurry_ttl: str = "2s") -> str:
    """alice and bob approve everywhere; calls in workspace `hurry` expire after `hurry_ttl`."""
    return f"""
default_ttl = "1h"

[tools.append_line]
risk_class = "write_local"
severity = "medium"

[workspaces.hurry]
approval = {{ ttl = "{hurry_ttl}" }}

[approvers.alice]
key = "{KEYS["alice"].public_key}"
roles = ["approver"]

[approvers.bob]
key = "{KEYS["bob"].public_key}"
roles = ["approver"]
"""


@asynccontextmanager
async def guarded_service(
    nats_url: str, data_dir: Path, *, prefix: str | None = None, **settings: Any
) -> AsyncIterator[Harness]:
    """The service under `policy_text()`, on its own subject prefix."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "policy.toml"
    path.write_text(policy_text())
    async with running_service(
        nats_url, data_dir, prefix=prefix, policy_path=path, **settings
    ) as h:
        yield h
