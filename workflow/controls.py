"""Wire models of the approvers' controls that keep prompts few: grants and freezes.

Kept beside `workflow.messages` (whose `Wire` base and signing rules they share) so the models
of one feature stay together; `workflow.schemas` generates their schemas like every other
wire message. Requests are signed like decisions: Ed25519 (nkeys) over the canonical JSON of
every field but `signature` (`workflow.messages.signed_text`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, Field

from workflow.messages import (
    SCHEME_FIELD,
    Identifier,
    PublicKey,
    Signature,
    SignatureScheme,
    Token,
    Wire,
    signed_text,
)

Nonce = Annotated[str, Field(min_length=8, max_length=100)]


class GrantScope(StrEnum):
    """What a grant covers besides its tool, agent and workspace."""

    TOOL = "tool"
    COMMAND_PREFIX = "command-prefix"
    PATH = "path"


class GrantIssue(Wire):
    """Approve calls like one held request until `expires_at` (`<prefix>.api.grant.issue`).

    The request it is made from must be one a single approval could release, and the approver
    must be allowed to approve it (role, workspace, not running the agent); the service checks
    both, and that the scope covers the request's own call.
    """

    grant_id: Identifier
    request_id: Token = Field(description="The held request the grant was made from.")
    tool: Annotated[str, Field(min_length=1, max_length=200)]
    workspace: Token
    agent: Token | None = Field(default=None, description="Only this agent's calls (else any).")
    session_id: Annotated[str, Field(min_length=1, max_length=200)] | None = Field(
        default=None, description="Only the calls of this client session (proposal context)."
    )
    scope: GrantScope
    command_prefix: (
        Annotated[list[Annotated[str, Field(min_length=1, max_length=4096)]], Field(max_length=64)]
        | None
    ) = Field(
        default=None,
        description="command-prefix: the argv a simple command must start with, word for word.",
    )
    path_glob: Annotated[str, Field(min_length=1, max_length=1000)] | None = Field(
        default=None, description="path: the glob every path argument must match."
    )
    expires_at: AwareDatetime
    max_uses: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    approver: Annotated[str, Field(min_length=1, max_length=200)]
    reason: Annotated[str, Field(max_length=2000)] = ""
    nonce: Nonce
    issued_at: AwareDatetime
    signature_scheme: SignatureScheme | None = SCHEME_FIELD
    key: PublicKey | None = None
    signature: Signature | None = None

    def signing_payload(self) -> bytes:
        return signed_text(self.model_dump(mode="json")).encode()


class GrantInfo(Wire):
    """A stored grant, as `headgate grants list` shows it."""

    grant_id: str
    request_id: str
    approver: str
    tool: str
    workspace: str
    agent: str | None = None
    session_id: str | None = None
    scope: GrantScope
    command_prefix: list[str] | None = None
    path_glob: str | None = None
    issued_at: AwareDatetime
    expires_at: AwareDatetime
    max_uses: int | None = None
    uses: int = 0
    revoked_at: AwareDatetime | None = None
    revoked_by: str | None = None
    status: str = Field(description="active, used_up, expired or revoked.")


class GrantChanged(Wire):
    """A grant was issued or revoked (`<prefix>.controls.grant.issued`, `.revoked`).

    The news for live inboxes, other approvers and auditors, signed like every event: a grant
    releases calls that no one is asked about until it expires, is used up or is revoked, so
    who granted what is told as it happens. The database row and its audit record are what
    the intake reads.
    """

    change: Literal["issued", "revoked"]
    message: str = Field(description="What happened, in a sentence.")
    by: str = Field(description="The approver who issued or revoked it.")
    at: AwareDatetime
    grant: GrantInfo = Field(description="The grant as it stands after the change.")


class GrantsQuery(Wire):
    """List grants (`<prefix>.api.grant.list`): the active ones, or every one with `all`."""

    all: bool = False
    workspace: Token | None = None
    limit: Annotated[int, Field(ge=1, le=1000)] = 200


class GrantsReply(Wire):
    grants: list[GrantInfo]


class GrantRevoke(Wire):
    """Revoke a grant (`<prefix>.api.grant.revoke`), signed by an approver who may approve for
    its workspace; it releases nothing from the next proposal on."""

    grant_id: Identifier
    approver: Annotated[str, Field(min_length=1, max_length=200)]
    reason: Annotated[str, Field(max_length=2000)] = ""
    nonce: Nonce
    issued_at: AwareDatetime
    signature_scheme: SignatureScheme | None = SCHEME_FIELD
    key: PublicKey | None = None
    signature: Signature | None = None

    def signing_payload(self) -> bytes:
        return signed_text(self.model_dump(mode="json")).encode()


class FreezeOrder(Wire):
    """Freeze (or, with `thaw`, lift a freeze) over a scope (`<prefix>.api.freeze`).

    While frozen, every consequential call in scope is held for approval, whatever a grant or
    an `allow` would do; reads keep flowing unless `all_calls`. Signed by an approver who may
    approve for the workspace (for a freeze of every workspace: one who may approve for all).
    """

    thaw: bool = False
    agent: Token | None = None
    workspace: Token | None = None
    all_calls: bool = Field(default=False, description="Hold reads too.")
    reason: Annotated[str, Field(max_length=2000)] = ""
    approver: Annotated[str, Field(min_length=1, max_length=200)]
    nonce: Nonce
    issued_at: AwareDatetime
    signature_scheme: SignatureScheme | None = SCHEME_FIELD
    key: PublicKey | None = None
    signature: Signature | None = None

    def signing_payload(self) -> bytes:
        return signed_text(self.model_dump(mode="json")).encode()


class FreezeInfo(Wire):
    freeze_id: str
    agent: str | None = None
    workspace: str | None = None
    all_calls: bool = False
    reason: str = ""
    by: str
    at: AwareDatetime


class FreezeChanged(Wire):
    """A freeze was put in force or lifted (`<prefix>.controls.freeze`, `.thaw`).

    The news for live inboxes and other subscribers, signed like every event; the database row
    and its audit record are what the intake reads. Carries the freezes in force after the
    change, so a view can show them without asking.
    """

    change: Literal["freeze", "thaw"]
    message: str = Field(description="What happened, as the approver was told.")
    agent: str | None = None
    workspace: str | None = None
    all_calls: bool = False
    reason: str = ""
    by: str
    at: AwareDatetime
    freeze_id: str | None = Field(default=None, description="The freeze put in force.")
    lifted: int = Field(default=0, description="How many freezes a thaw lifted.")
    freezes: list[FreezeInfo]


class FreezeReply(Wire):
    """The freezes in force after the order (empty after a thaw of the only one)."""

    message: str
    freezes: list[FreezeInfo]


class FreezesQuery(Wire):
    """The freezes in force (`<prefix>.api.freezes`)."""


class BacktestQuery(Wire):
    """Backtest a policy over the stored proposals (`<prefix>.api.policy.backtest`)."""

    policy: Annotated[str, Field(max_length=1_000_000)] = Field(
        description="The new policy, as the text of a policy file (TOML)."
    )
    since_seconds: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="Only the proposals of this last period (else all)."
    )
    examples: Annotated[int, Field(ge=0, le=20)] = 3


class BacktestReply(Wire):
    """What `headgate policy backtest --json` prints: counts before/after, changes, tools and
    agents behind them, prompts per day, examples."""

    report: dict[str, Any]


#: The controls' wire models, by schema file name (merged into `headgate schemas`).
CONTROL_MODELS: dict[str, type[BaseModel]] = {
    "api_grant_issue": GrantIssue,
    "api_grant_info": GrantInfo,
    "api_grant_list_query": GrantsQuery,
    "api_grant_list_reply": GrantsReply,
    "api_grant_revoke": GrantRevoke,
    "api_freeze": FreezeOrder,
    "api_freeze_reply": FreezeReply,
    "api_freezes_query": FreezesQuery,
    "controls_freeze_changed": FreezeChanged,
    "controls_grant_changed": GrantChanged,
    "api_backtest_query": BacktestQuery,
    "api_backtest_reply": BacktestReply,
}
