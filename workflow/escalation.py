"""Escalation ladders: what to do when a held request waits too long. Pure: the clock is passed.

```toml
[approval.escalation]
steps = [
  { after = "15m", action = "remind" },                                   # the same channels again
  { after = "30m", action = "notify", roles = ["lead"], channels = ["pager"] },  # someone else
  { after = "45m", action = "raise", roles = ["lead"] },                  # a lead must now approve
  { after = "1h",  action = "expire" },                                   # give up before the TTL
]
```

Steps are taken in order, each once, `after` counted from when the request was held; a service
that was down takes every step that fell due meanwhile, in order. `raise` only ever tightens
(the strictest of the current requirement and the step's, as a workspace layer does), and
`expire` closes the request with the `expired` outcome, as its TTL would.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from workflow.approvals import HeldRequest
from workflow.messages import ApprovalRequirement
from workflow.policy.durations import Duration, format_duration
from workflow.policy.requirement import Role, describe, strictest

Action = Literal["remind", "notify", "raise", "expire"]
ChannelName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]


class EscalationStep(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    after: Duration = Field(description="Time since the request was held.")
    action: Action
    roles: list[Role] = Field(
        default_factory=list,
        description="notify: the routes for these roles; raise: approvers need one of them.",
    )
    channels: list[ChannelName] = Field(
        default_factory=list, description="notify: these channels as well."
    )
    quorum: Annotated[int, Field(ge=1, le=20)] | None = Field(
        default=None, description="raise: at least this many approvals."
    )

    @model_validator(mode="after")
    def _fits_the_action(self) -> EscalationStep:
        if self.action == "notify" and not (self.roles or self.channels):
            raise ValueError("a notify step names the roles or channels to notify")
        if self.action == "raise" and not (self.roles or self.quorum):
            raise ValueError("a raise step sets roles or quorum (or both)")
        if self.action in ("remind", "expire") and (self.roles or self.channels or self.quorum):
            raise ValueError(f"a {self.action} step takes no roles, channels or quorum")
        if self.action == "notify" and self.quorum is not None:
            raise ValueError("quorum belongs to a raise step")
        if self.action == "raise" and self.channels:
            raise ValueError("channels belong to a notify step")
        return self


class EscalationSpec(BaseModel):
    """`[approval.escalation]`: the ladder every held request climbs while it waits."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: list[EscalationStep] = Field(default_factory=list)

    @model_validator(mode="after")
    def _in_order(self) -> EscalationSpec:
        times = [s.after for s in self.steps]
        if times != sorted(times):
            raise ValueError("the steps must be in the order of their `after`")
        expiring = [i for i, s in enumerate(self.steps) if s.action == "expire"]
        if expiring and expiring[0] != len(self.steps) - 1:
            raise ValueError("expire ends the ladder: no step can follow it")
        return self


@dataclass(frozen=True, slots=True)
class Escalation:
    """One step to take now, and what it does to the request."""

    index: int
    step: EscalationStep
    message: str
    requirement: ApprovalRequirement | None = None
    """`raise`: the new requirement (None when the step would not tighten anything)."""
    expires: bool = False


def held_at(req: HeldRequest) -> datetime:
    """When a request was held: its expiry minus its TTL."""
    return req.expires_at - timedelta(seconds=req.requirement.ttl_seconds)


def due(spec: EscalationSpec, req: HeldRequest, *, taken: int, now: datetime) -> list[Escalation]:
    """The steps past `taken` (the number already taken) whose time has come, in order.

    Nothing for a request that is no longer pending or has expired already (its TTL comes
    first: expiry is its own outcome).
    """
    if req.state != "pending" or now >= req.expires_at:
        return []
    start = held_at(req)
    found: list[Escalation] = []
    requirement = req.requirement
    for index in range(taken, len(spec.steps)):
        step = spec.steps[index]
        if now < start + timedelta(seconds=step.after):
            break
        escalation = _take(index, step, req, requirement)
        if escalation.requirement is not None:
            requirement = escalation.requirement
        found.append(escalation)
    return found


def _take(
    index: int, step: EscalationStep, req: HeldRequest, current: ApprovalRequirement
) -> Escalation:
    waited = format_duration(step.after)
    have = len(req.approvals)
    status = f"{have} of {current.approvals_needed} approvals after {waited}"
    if step.action == "remind":
        return Escalation(index, step, f"Reminder: still waiting, {status}.")
    if step.action == "notify":
        whom = ", ".join(
            [f"role {r}" for r in step.roles] + [f"channel {c}" for c in step.channels]
        )
        return Escalation(index, step, f"Escalated to {whom}: {status}.")
    if step.action == "expire":
        return Escalation(index, step, f"Expired by the escalation ladder: {status}.", expires=True)
    raised = strictest(
        current,
        ApprovalRequirement(
            quorum=step.quorum or 1, roles=step.roles, ttl_seconds=current.ttl_seconds
        ),
    )
    if raised is None:
        # The step's roles share none with the request's: no one could ever approve. Keep the
        # request as it is and say so rather than make it unapprovable.
        return Escalation(
            index,
            step,
            f"The requirement was not raised: roles {', '.join(step.roles)} share none with "
            f"the required {', '.join(current.roles)}; {status}.",
        )
    if raised == current:
        return Escalation(index, step, f"The requirement already asks for as much: {status}.")
    wanted = describe(raised).rsplit(", expires in", 1)[0]  # the TTL is not changed
    return Escalation(index, step, f"Requirement raised to {wanted}: {status}.", requirement=raised)
