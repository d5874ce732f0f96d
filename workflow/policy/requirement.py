"""Approval requirements: the policy file's partial spec and how requirements combine.

Two ways of combining exist, and they are deliberately different:

* **override** (`ApprovalSpec.apply`) is used *inside the global policy*, from the general to
  the specific: the default `[approval]`, then the risk class's `approval`, then the tool's
  `approval`. The most specific global statement is the operator's choice, exactly like
  "the global decision for the tool, else for its risk class".
* **strictest** (`strictest`) is used for everything layered on top (workspace, source,
  a tool entry that no longer matches the tool's definition, a held verdict at re-check): the
  larger quorum, four-eyes if any asks for it, the shorter TTL, and the *intersection* of the
  approver roles.

Roles are an any-of list on the wire ("an approver needs one of these roles; empty = any").
Adding a layer must never let more people approve, so the strictest of two role lists is the
set of roles both accept: the intersection, where an empty list means "any role". A union
would widen who may approve, which is a loosening. When two non-empty lists share no role,
no approver could ever satisfy both; `strictest` reports that and the engine denies the call
rather than holding it for an approval that can never come.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from workflow.messages import ApprovalRequirement
from workflow.policy.durations import Duration, format_duration

Role = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]


class ApprovalSpec(BaseModel):
    """An approval requirement as written in the policy file; unset fields inherit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    quorum: Annotated[int, Field(ge=1, le=20)] | None = Field(
        default=None, description="Distinct approvals needed."
    )
    roles: list[Role] | None = Field(
        default=None, description="An approver needs one of these roles; empty = any role."
    )
    four_eyes: bool | None = Field(default=None, description="At least two distinct approvers.")
    ttl: Duration | None = Field(
        default=None, description="How long the request waits before it expires."
    )

    def apply(self, base: ApprovalRequirement) -> ApprovalRequirement:
        """`base` with every field this spec sets replaced (the global override chain)."""
        return ApprovalRequirement(
            quorum=base.quorum if self.quorum is None else self.quorum,
            roles=list(base.roles) if self.roles is None else sorted(set(self.roles)),
            four_eyes=base.four_eyes if self.four_eyes is None else self.four_eyes,
            ttl_seconds=base.ttl_seconds if self.ttl is None else self.ttl,
        )

    def looser_than(self, base: ApprovalRequirement) -> list[tuple[str, str]]:
        """Every field of this spec that would loosen `base`, as (field, sentence)."""
        found: list[tuple[str, str]] = []
        if self.quorum is not None and self.quorum < base.quorum:
            found.append(
                ("quorum", f"quorum {self.quorum} is lower than the {base.quorum} it must tighten")
            )
        if self.four_eyes is False and base.four_eyes:
            found.append(("four_eyes", "four_eyes = false would drop the four-eyes rule"))
        if self.ttl is not None and self.ttl > base.ttl_seconds:
            found.append(
                (
                    "ttl",
                    f"ttl {format_duration(self.ttl)} is longer than the "
                    f"{format_duration(base.ttl_seconds)} it must tighten",
                )
            )
        if self.roles is not None and base.roles:
            extra = sorted(set(self.roles) - set(base.roles))
            if not self.roles:
                found.append(
                    ("roles", f"an empty roles list (any role) widens {base.roles} to everyone")
                )
            elif extra:
                found.append(
                    (
                        "roles",
                        f"roles {extra} are not among the roles {base.roles} it must narrow; "
                        "choose a subset",
                    )
                )
        return found


def strictest(a: ApprovalRequirement, b: ApprovalRequirement) -> ApprovalRequirement | None:
    """The requirement that satisfies both, or None when their roles have nothing in common."""
    roles = combine_roles(a.roles, b.roles)
    if roles is None:
        return None
    return ApprovalRequirement(
        quorum=max(a.quorum, b.quorum),
        roles=roles,
        four_eyes=a.four_eyes or b.four_eyes,
        ttl_seconds=min(a.ttl_seconds, b.ttl_seconds),
    )


def combine_roles(a: list[str], b: list[str]) -> list[str] | None:
    """Intersection of two any-of role lists, where [] means any; None if disjoint."""
    if not a:
        return sorted(set(b))
    if not b:
        return sorted(set(a))
    both = sorted(set(a) & set(b))
    return both or None


def at_least_as_strict(a: ApprovalRequirement, b: ApprovalRequirement) -> bool:
    """True when every approval set that satisfies `a` also satisfies `b`."""
    roles_ok = not b.roles or (bool(a.roles) and set(a.roles) <= set(b.roles))
    return (
        a.approvals_needed >= b.approvals_needed
        and a.quorum >= b.quorum
        and (a.four_eyes or not b.four_eyes)
        and a.ttl_seconds <= b.ttl_seconds
        and roles_ok
    )


def describe(req: ApprovalRequirement) -> str:
    """A short human description: "2 approvals (four-eyes) from role lead, expires in 1h"."""
    n = req.approvals_needed
    text = f"{n} approval{'s' if n != 1 else ''}"
    if req.four_eyes:
        text += " (four-eyes)"
    if req.roles:
        label = "role" if len(req.roles) == 1 else "one of the roles"
        text += f" from {label} {', '.join(req.roles)}"
    return f"{text}, expires in {format_duration(req.ttl_seconds)}"
