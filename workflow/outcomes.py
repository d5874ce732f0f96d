"""The outcome vocabulary: what becomes of a proposal, and of the approval request that holds it.

One definition for the wire (`Blocked.outcome`), the database (`proposals.status`,
`outcomes.outcome`, `requests.state`), the approval state machine, the SDK and the CLI.

A proposal is `pending` until its one terminal `Outcome`: `released` (the call may run) or one
of the blocked outcomes (`denied` by policy, `rejected` by an approver, `expired`, `cancelled` by
its agent, or `invalid`: the proposal could not be read as one, so it was never recorded, and
its agent is told so with the validation error). A held proposal's approval request moves
from `pending` to one terminal `RequestState`, and each terminal state gives exactly one
outcome (`RequestState.outcome`); `denied` has no request state of its own: it is decided by
policy, at intake or when the call is re-checked at release.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, get_args

PENDING = "pending"
"""The status of a proposal that has no outcome yet (held for approval)."""


class Outcome(StrEnum):
    """The one terminal outcome of a proposal."""

    RELEASED = "released"
    DENIED = "denied"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    INVALID = "invalid"

    @property
    def blocked(self) -> bool:
        """Every outcome but `released`: the call will never run."""
        return self is not Outcome.RELEASED


#: The outcomes of a `Blocked` event, as the wire schema spells them (a literal type, so the
#: generated JSON Schema lists them); the same values as the blocked `Outcome`s.
BlockedOutcome = Literal["denied", "rejected", "expired", "cancelled", "invalid"]

if {str(o) for o in Outcome if o.blocked} != set(get_args(BlockedOutcome)):  # pragma: no cover
    raise AssertionError("BlockedOutcome must list exactly the blocked outcomes")


class RequestState(StrEnum):
    """The state of an approval request (the inbox item of a held proposal)."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"

    @property
    def outcome(self) -> Outcome | None:
        """The proposal outcome this state gives; None while the request is pending."""
        return _OUTCOME_OF[self]


_OUTCOME_OF: dict[RequestState, Outcome | None] = {
    RequestState.PENDING: None,
    RequestState.APPROVED: Outcome.RELEASED,
    RequestState.REJECTED: Outcome.REJECTED,
    RequestState.EXPIRED: Outcome.EXPIRED,
    RequestState.CANCELLED: Outcome.CANCELLED,
}

_TERMINAL = frozenset(str(o) for o in Outcome)


def is_terminal(status: str) -> bool:
    """Whether a proposal status (`pending` or an outcome) is final."""
    return status in _TERMINAL
