"""Python SDKs: `Headgate` for agents, `Approver` for the people who approve their calls.

The names below are imported on first use, so a process that needs one piece (an agent hook
resolving where NATS is, say) does not load the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workflow.client.agent import Headgate as Headgate
    from workflow.client.agent import Ticket as Ticket
    from workflow.client.approver import Approver as Approver
    from workflow.client.approver import DecisionResult as DecisionResult
    from workflow.client.approver import PendingRequest as PendingRequest
    from workflow.client.connection import NatsTarget as NatsTarget
    from workflow.client.connection import resolve_nats as resolve_nats
    from workflow.client.display import mask_secrets as mask_secrets
    from workflow.client.display import summarize as summarize
    from workflow.client.display import target_of as target_of
    from workflow.client.errors import IdInUse as IdInUse
    from workflow.client.errors import NoLedger as NoLedger
    from workflow.client.errors import NotProcessed as NotProcessed
    from workflow.client.errors import ResultTimeout as ResultTimeout
    from workflow.client.errors import ToolBlocked as ToolBlocked
    from workflow.client.ledger import Ledger as Ledger
    from workflow.client.verify import DigestMismatch as DigestMismatch
    from workflow.client.worker import WorkerStats as WorkerStats

_WHERE = {
    "Approver": "approver",
    "DecisionResult": "approver",
    "DigestMismatch": "verify",
    "Headgate": "agent",
    "IdInUse": "errors",
    "Ledger": "ledger",
    "NatsTarget": "connection",
    "NoLedger": "errors",
    "NotProcessed": "errors",
    "PendingRequest": "approver",
    "ResultTimeout": "errors",
    "Ticket": "agent",
    "ToolBlocked": "errors",
    "WorkerStats": "worker",
    "mask_secrets": "display",
    "resolve_nats": "connection",
    "summarize": "display",
    "target_of": "display",
}

__all__ = [
    "Approver",
    "DecisionResult",
    "DigestMismatch",
    "Headgate",
    "IdInUse",
    "Ledger",
    "NatsTarget",
    "NoLedger",
    "NotProcessed",
    "PendingRequest",
    "ResultTimeout",
    "Ticket",
    "ToolBlocked",
    "WorkerStats",
    "mask_secrets",
    "resolve_nats",
    "summarize",
    "target_of",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'workflow.client' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"workflow.client.{module}"), name)
    globals()[name] = value
    return value
