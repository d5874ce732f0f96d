"""Python SDKs: `Headgate` for agents, `Approver` for the people who approve their calls."""

from workflow.client.agent import Headgate, Ticket
from workflow.client.approver import Approver, DecisionResult, PendingRequest
from workflow.client.display import mask_secrets, summarize, target_of
from workflow.client.errors import NoLedger, NotProcessed, ResultTimeout, ToolBlocked
from workflow.client.ledger import Ledger
from workflow.client.worker import WorkerStats

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
