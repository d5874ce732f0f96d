"""What an approver checks before it signs: the content it shows hashes to the digest it signs.

A decision is bound to a proposal digest. An inbox item (or a pending entry) carries both the
proposal and its digest; anyone who can publish on the inbox subject can pair harmless-looking
content with the digest of another proposal, and an approver that signs the digest it was given
would approve what it never saw. So every client recomputes the digest from the proposal it
displays (`Proposal.digest`, the function the service binds decisions with) and refuses a
mismatch. Pure functions: no I/O.

Everything a client reads from the inbox passes `check_inbox_item` before it is shown, which is
also where a check of the service's signature on the item belongs once the service signs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from workflow.errors import HeadgateError
from workflow.messages import InboxItem, PendingEntry, Proposal


class DigestMismatch(HeadgateError):
    """The proposal shown for a request does not hash to the digest a decision would sign."""

    def __init__(self, request_id: str, why: str):
        self.request_id = request_id
        self.why = why
        super().__init__(
            f"refusing to sign request {request_id}: {why}; the request may be forged, "
            "check it with `headgate show`"
        )


class Decidable(Protocol):
    """What a decision is made about: a request, the proposal shown, the digest to sign."""

    @property
    def request_id(self) -> str: ...
    @property
    def proposal(self) -> Proposal: ...
    @property
    def proposal_digest(self) -> str: ...


@dataclass(frozen=True, slots=True)
class ShownRequest:
    """A request as a view showed it: its id, the proposal shown and the digest to sign."""

    request_id: str
    proposal: Proposal
    proposal_digest: str


def check_digest(request_id: str, proposal: Proposal, digest: str) -> None:
    """Raise `DigestMismatch` unless `proposal` hashes to `digest`."""
    actual = proposal.digest()
    if actual != digest:
        raise DigestMismatch(
            request_id,
            f"the proposal shown hashes to {actual[:12]}…, not to the digest {digest[:12]}… "
            "a decision would be bound to",
        )


def check_inbox_item(item: InboxItem, headers: dict[str, str] | None = None) -> InboxItem:
    """The item, when what it shows is what a decision on it would approve.

    `headers` are the message's NATS headers (unused until inbox items carry a service
    signature)."""
    check_digest(item.request_id, item.proposal, item.proposal_digest)
    if item.proposal.id != item.proposal_id:
        raise DigestMismatch(
            item.request_id,
            f"the item names proposal {item.proposal_id} but shows proposal {item.proposal.id}",
        )
    return item


#: The fields of a pending entry that repeat its proposal's; they must agree with it.
_ENTRY_FIELDS = ("agent", "workspace", "tool", "arguments", "intent")


def shown_proposal(entry: PendingEntry, proposal: Proposal) -> Proposal:
    """`proposal` (fetched by id), checked against what `entry` shows and against its digest.

    A pending entry repeats some fields of its proposal (agent, workspace, tool, arguments,
    intent) but not all of them, so a view that printed the entry fetches the whole proposal
    before deciding: it must hash to the entry's digest and agree with every field the entry
    showed, so that what was read is what the decision approves.
    """
    check_digest(entry.request_id, proposal, entry.proposal_digest)
    differs = [name for name in _ENTRY_FIELDS if getattr(entry, name) != getattr(proposal, name)]
    if proposal.id != entry.proposal_id:
        differs.insert(0, "proposal id")
    if differs:
        raise DigestMismatch(
            entry.request_id, f"the {', '.join(differs)} shown differ from the proposal's"
        )
    return proposal
