"""The options of a hook process (light: a hook loads the SDK only for a tool call)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class GateOptions:
    agent: str
    workspace: str = "default"
    #: Seconds to hold the client for a decision before answering "pending".
    wait: float = 20.0
    connect_timeout: float = 3.0
    prefix: str = "headgate"
    nats_url: str | None = None
    data_dir: Path | None = None
    #: The answer for a call still held after `wait`: "deny" or "defer" (`calls.OnPending`).
    on_pending: str = "deny"
