"""Errors the SDKs raise; all are `HeadgateError`s with the fields their message is built from."""

from __future__ import annotations

from workflow.errors import HeadgateError
from workflow.messages import Blocked


class ToolBlocked(HeadgateError):
    """A gated call will never run: it was denied, rejected, expired or cancelled."""

    def __init__(self, blocked: Blocked):
        self.blocked = blocked
        self.outcome = blocked.outcome
        self.reason = blocked.reason
        super().__init__(f"{blocked.tool} was {blocked.outcome}: {blocked.reason}")


class ResultTimeout(HeadgateError, TimeoutError):
    """No outcome within the time asked for; the proposal is still pending (or unknown)."""

    def __init__(self, proposal_id: str, timeout: float, status: str | None = None):
        self.proposal_id = proposal_id
        self.timeout = timeout
        self.status = status
        state = f" (still {status})" if status else ""
        super().__init__(f"no outcome for proposal {proposal_id} within {timeout:g}s{state}")


class NotProcessed(HeadgateError):
    """The service did not classify a published proposal in time (is it running?).

    The proposal is stored in JetStream and will be processed when the service runs; attach to
    it later with `Headgate.ticket(proposal_id)`.
    """

    def __init__(self, proposal_id: str, timeout: float):
        self.proposal_id = proposal_id
        self.timeout = timeout
        super().__init__(
            f"proposal {proposal_id} was published but not classified within {timeout:g}s; "
            "is the Headgate service running with the same prefix?"
        )


class IdInUse(HeadgateError):
    """This agent already made another call under the proposal id it asked for: the first
    call keeps the id (its ticket, its outcome); a new call needs a new id."""

    def __init__(self, proposal_id: str):
        self.proposal_id = proposal_id
        super().__init__(
            f"proposal id {proposal_id} is already in use by another call of this agent; "
            "a new call needs a new id (leave proposal_id out for a fresh one)"
        )


class NoLedger(HeadgateError):
    """Unattended mode needs a state directory for its ledger."""

    def __init__(self) -> None:
        super().__init__(
            "unattended mode needs a ledger: pass state_dir=Path(...) to Headgate.connect"
        )
