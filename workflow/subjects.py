"""Every subject and stream name Headgate uses, built in one place.

The prefix (default ``headgate``) is configurable so several Headgate installations can share a
NATS account. Request/reply subjects (``<prefix>.api.*``) are deliberately outside every stream:
a stream whose subjects cover a request subject would answer the request itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PREFIX = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")

API_NAMES = ("pending", "get", "explain", "cancel", "offered", "key")
#: The web inbox's queries (`<prefix>.api.web.<name>`).
WEB_API_NAMES = ("invite", "invitation", "register", "passkey")
#: The approvers' controls (`<prefix>.api.<name>`): grants and freezes.
CONTROL_API_NAMES = (
    "grant.issue", "grant.list", "grant.revoke", "freeze", "freezes", "policy.backtest",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Subjects:
    prefix: str = "headgate"

    def __post_init__(self) -> None:
        if not _PREFIX.match(self.prefix):
            raise ValueError(f"subject prefix {self.prefix!r} is not a valid NATS subject prefix")

    # ------------------------------------------------------------------ per-entity subjects
    def proposals(self, agent: str = "*") -> str:
        return f"{self.prefix}.proposals.{agent}"

    def held(self, agent: str = "*") -> str:
        return f"{self.prefix}.held.{agent}"

    def released(self, agent: str = "*") -> str:
        return f"{self.prefix}.released.{agent}"

    def blocked(self, agent: str = "*") -> str:
        return f"{self.prefix}.blocked.{agent}"

    def results(self, agent: str) -> str:
        """`<prefix>.*.<agent>`: on the results stream, exactly this agent's held, released and
        blocked events (the single filter the deploy permissions pin an agent's consumer to)."""
        return f"{self.prefix}.*.{agent}"

    def inbox(self, workspace: str = "*") -> str:
        return f"{self.prefix}.inbox.{workspace}"

    def decisions(self, request_id: str = "*") -> str:
        return f"{self.prefix}.decisions.{request_id}"

    def cancel(self, agent: str = "*") -> str:
        return f"{self.prefix}.cancel.{agent}"

    def executed(self, agent: str = "*") -> str:
        return f"{self.prefix}.executed.{agent}"

    def escalated(self, workspace: str = "*") -> str:
        return f"{self.prefix}.escalated.{workspace}"

    def notified(self, workspace: str = "*") -> str:
        return f"{self.prefix}.notified.{workspace}"

    def controls(self, change: str = "*") -> str:
        """`<prefix>.controls.<change>`: news of the approvers' controls (`freeze`, `thaw`)."""
        return f"{self.prefix}.controls.{change}"

    def grants(self, change: str = "*") -> str:
        """`<prefix>.controls.grant.<change>`: a grant `issued` or `revoked` (in the controls
        stream, beside the freezes)."""
        return f"{self.prefix}.controls.grant.{change}"

    def dead(self, stage: str = "*") -> str:
        return f"{self.prefix}.dead.{stage}"

    def api(self, name: str) -> str:
        if name not in API_NAMES:
            raise ValueError(f"unknown API subject {name!r}")
        return f"{self.prefix}.api.{name}"

    def api_web(self, name: str) -> str:
        if name not in WEB_API_NAMES:
            raise ValueError(f"unknown web API subject {name!r}")
        return f"{self.prefix}.api.web.{name}"

    def api_control(self, name: str) -> str:
        if name not in CONTROL_API_NAMES:
            raise ValueError(f"unknown control API subject {name!r}")
        return f"{self.prefix}.api.{name}"

    def api_status(self, agent: str = "*") -> str:
        """An agent's own view of its proposals: the service answers only about proposals
        of the agent named in the subject, so NATS permissions can scope it to that agent."""
        return f"{self.prefix}.api.status.{agent}"

    def api_offered(self, agent: str = "*") -> str:
        """Which tools to offer an agent, asked by that agent: the service answers only for
        the agent named in the subject, so NATS permissions can scope it to that agent."""
        return f"{self.prefix}.api.offered.{agent}"

    # ------------------------------------------------------------------ parsing
    def token_after(self, subject: str, kind: str) -> str | None:
        """The last token of ``<prefix>.<kind>.<token>``, or None if the subject is not one."""
        head = f"{self.prefix}.{kind}."
        if not subject.startswith(head):
            return None
        token = subject[len(head) :]
        return token if token and "." not in token else None

    # ------------------------------------------------------------------ streams
    @property
    def stream_prefix(self) -> str:
        return re.sub(r"[^A-Za-z0-9]", "_", self.prefix).upper()

    def stream(self, kind: str) -> str:
        """Stream name for a kind: proposals, decisions, results, inbox, executed, dead."""
        return f"{self.stream_prefix}_{kind.upper()}"
