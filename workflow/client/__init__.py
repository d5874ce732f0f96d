"""Python SDKs: `Headgate` for agents, `Approver` for the people who approve their calls.

The names below are imported on first use, so that `import workflow.client.transport` (or a
hook that needs one module) does not load every SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workflow.client.agent import Headgate, Ticket
    from workflow.client.approver import Approver, DecisionResult, PendingRequest
    from workflow.client.display import mask_secrets, summarize, target_of
    from workflow.client.errors import NoLedger, NotProcessed, ResultTimeout, ToolBlocked
    from workflow.client.ledger import Ledger
    from workflow.client.worker import WorkerStats

_WHERE = {
    "Headgate": "agent",
    "Ticket": "agent",
    "Approver": "approver",
    "DecisionResult": "approver",
    "PendingRequest": "approver",
    "mask_secrets": "display",
    "summarize": "display",
    "target_of": "display",
    "NoLedger": "errors",
    "NotProcessed": "errors",
    "ResultTimeout": "errors",
    "ToolBlocked": "errors",
    "Ledger": "ledger",
    "WorkerStats": "worker",
}

__all__ = [
    "Approver",
    "DecisionResult",
    "Headgate",
    "Ledger",
    "NoLedger",
    "NotProcessed",
    "PendingRequest",
    "ResultTimeout",
    "Ticket",
    "ToolBlocked",
    "WorkerStats",
    "mask_secrets",
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
